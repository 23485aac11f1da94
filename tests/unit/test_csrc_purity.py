"""csrc must build and run without an interpreter: no Python headers there."""

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "csrc"


def test_csrc_includes_no_python_headers():
    offenders = []
    for path in CSRC.rglob("*"):
        if path.suffix in {".h", ".hpp", ".cc", ".cpp"}:
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.match(r'\s*#\s*include\s*[<"](Python\.h|pybind11/)', line):
                    offenders.append(f"{path.relative_to(CSRC)}:{n}: {line.strip()}")
    assert list(CSRC.rglob("*.cc")), "csrc sources not found"
    assert not offenders, offenders
