"""The image's recipe, checked without building it (make test-image builds
and runs it): the requirements helper both Dockerfiles call, and the
Dockerfiles' promises (non-root, ports, healthcheck, entrypoint, read-only
friendly environment)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _helper():
    spec = importlib.util.spec_from_file_location("image_requirements", ROOT / "docker" / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_requirements_are_pyprojects_with_extras_and_swaps():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    helper = _helper()
    cpu = helper.requirements(project, ["openai"], {}, [])
    assert cpu[:len(project["dependencies"])] == project["dependencies"]
    assert any(r.startswith("jinja2") for r in cpu)
    gpu = helper.requirements(project, [], {"onnxruntime": "onnxruntime-gpu>=1.20,<1.27"}, ["cupy-cuda12x"])
    assert "onnxruntime-gpu>=1.20,<1.27" in gpu and "cupy-cuda12x" in gpu
    assert not any(re.match(r"onnxruntime(?![-\w])", r) for r in gpu)
    with pytest.raises(SystemExit, match="no extra"):
        helper.requirements(project, ["no-such-extra"], {}, [])


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_dockerfile_runtime_contract(name):
    instructions = _instructions(ROOT / name)
    stages = [rest for kw, rest in instructions if kw == "FROM"]
    assert len(stages) >= 2, "multi-stage: a build stage and a runtime stage"
    final = instructions[max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM"):]
    final_text = "\n".join(f"{kw} {rest}" for kw, rest in final)
    assert ("USER", "1000:1000") in final
    assert ("EXPOSE", "8000 8001 8002") in final
    assert ("ENTRYPOINT", '["/usr/local/bin/pyserver-entrypoint"]') in final
    assert "docker/entrypoint.sh /usr/local/bin/pyserver-entrypoint" in final_text
    # Triton's image has the command there; Seldon's and Triton's charts name it
    assert "/opt/tritonserver/bin/tritonserver" in final_text
    assert ("CMD", '["--model-repository=/models"]') in final
    assert "/v2/health/ready" in next(rest for kw, rest in final if kw == "HEALTHCHECK")
    assert "HOME=/tmp" in final_text and "PYTHONDONTWRITEBYTECODE=1" in final_text
    # No compiler in the runtime stage: it installs only the libraries the
    # build stage found the installed code links.
    assert "g++" not in final_text and "-dev" not in final_text
    assert "org.opencontainers.image.revision" in final_text
