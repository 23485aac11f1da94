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


def test_the_core_holds_no_protocol_code():
    """The schedulers, cache, memory and stats (csrc/src, csrc/include)
    include nothing of csrc/protocol: the wire codecs sit above the core."""
    offenders = []
    for folder in (CSRC / "src", CSRC / "include"):
        for path in folder.rglob("*"):
            if path.suffix in {".h", ".cc"}:
                for n, line in enumerate(path.read_text().splitlines(), 1):
                    if re.match(r'\s*#\s*include\s*[<"]pyserver/protocol/', line):
                        offenders.append(f"{path.relative_to(CSRC)}:{n}: {line.strip()}")
    assert not offenders, offenders


LIBRARIES = ("libpyserver_core.so", "libpyserver_protocol.so", "libtritonserver.so")


def test_one_core_library_shared_by_every_engine_module():
    import subprocess

    import pyserver.engine as engine  # imports every compiled module
    import pyserver.engine.protocol.grpc_codec  # noqa: F401
    import pyserver.engine.protocol.http_infer  # noqa: F401

    engine_dir = Path(engine.__file__).parent
    modules = [p for p in [*engine_dir.glob("*.so"), *engine_dir.glob("protocol/*.so")]
               if p.name not in LIBRARIES]
    assert len(modules) >= 5
    assert any(p.parent.name == "protocol" for p in modules)
    for mod in modules:
        dyn = subprocess.run(["readelf", "-d", str(mod)], capture_output=True, text=True).stdout
        symbols = subprocess.run(["nm", "-D", str(mod)], capture_output=True, text=True).stdout
        csrc = [line.split()[-1] for line in symbols.splitlines() if "_ZN8pyserver" in line]
        # csrc code reached through the shared libraries, never a copy of
        # it (inline header functions are weak, "W", in every user)
        defined = [line for line in symbols.splitlines()
                   if "_ZN8pyserver" in line and " T " in line]
        assert not defined, (mod.name, defined[:3])
        if csrc:
            assert any(f"[{lib}]" in dyn for lib in LIBRARIES), mod.name
        origin = "[$ORIGIN/..]" if mod.parent.name == "protocol" else "[$ORIGIN]"
        runpath = [line for line in dyn.splitlines() if "RUNPATH" in line or "RPATH" in line]
        assert runpath and all(origin in line for line in runpath), (mod.name, runpath)
    maps = Path("/proc/self/maps").read_text().splitlines()
    cores = {line.split()[-1] for line in maps if line.endswith("libpyserver_core.so")}
    assert len(cores) == 1, cores
