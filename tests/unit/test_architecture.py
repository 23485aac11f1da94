"""The layers the import linter (`make lint`, .importlinter) cannot see:
the compiled engine's imports (.pyx and .pxd), and that no part of the
server finds the server through a module-level registry."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*(?:from|c?import)\s+(pyserver(?:\.\w+)*)", re.M)
# What the engine may import of pyserver: itself and the kernel's leaves
# (its errors and datatypes), never a layer above it.
ENGINE_MAY_IMPORT = ("pyserver.engine", "pyserver.kernel.errors", "pyserver.kernel.dtypes")


def _imports(path: Path) -> list[str]:
    return IMPORT.findall(path.read_text())


def test_the_engine_imports_nothing_above_the_kernel():
    offenders = []
    for path in sorted((ROOT / "engine").rglob("*.p[yx][xd]")):
        for name in _imports(path):
            if not name.startswith(ENGINE_MAY_IMPORT):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert (ROOT / "engine" / "batcher.pyx").exists()
    assert not offenders, offenders


def test_only_the_protocol_folder_holds_wire_codecs():
    """engine/ outside engine/protocol/ imports none of the wire codecs."""
    offenders = []
    for path in sorted((ROOT / "engine").glob("*.p[yx][xd]")):
        for name in _imports(path):
            if name.startswith("pyserver.engine.protocol"):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert not offenders, offenders


def test_no_module_keeps_a_registry_of_running_servers():
    """The server hands its context down (kernel/context.py); nothing looks
    a server up from a module-level list."""
    offenders = []
    for path in sorted((ROOT / "pyserver").rglob("*.py")):
        text = path.read_text()
        for pattern in (r"^_RUNNING\b", r"\bserver_for\(", r"^_SERVERS\b"):
            if re.search(pattern, text, re.M):
                offenders.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert not offenders, offenders


def test_every_compiled_module_has_a_stub():
    """engine/X.pyx -> pyserver/engine/X.pyi (the same under protocol/)."""
    missing = []
    for pyx in sorted((ROOT / "engine").rglob("*.pyx")):
        stub = ROOT / "pyserver" / "engine" / pyx.relative_to(ROOT / "engine").with_suffix(".pyi")
        if not stub.exists():
            missing.append(str(stub.relative_to(ROOT)))
    assert not missing, missing


def test_the_architecture_document_names_every_part():
    """docs/ARCHITECTURE.md shows where each package and top-level module
    sits; a new one must be placed there (and in .importlinter's layers)."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    contracts = (ROOT / ".importlinter").read_text()
    parts = sorted(p.name.removesuffix(".py") for p in (ROOT / "pyserver").iterdir()
                   if (p.is_dir() and (p / "__init__.py").exists())
                   or (p.suffix == ".py" and p.name != "__init__.py"))
    helpers = {"testing", "reference_batcher", "_proto"}  # test helpers; generated code
    missing_doc = [p for p in parts if p not in helpers and p not in doc]
    missing_layer = [p for p in parts if p not in helpers and f"pyserver.{p}" not in contracts]
    assert not missing_doc, missing_doc
    assert not missing_layer, missing_layer
