"""Native build: setuptools hands the engine to CMake (see CMakeLists.txt).

CMake builds csrc as one shared library (libpyserver_core.so), the wire
codecs of csrc/protocol as another (libpyserver_protocol.so), and every Cython
module from engine/ into pyserver/engine/ (engine/protocol/ into
pyserver/engine/protocol/), linked against them with an $ORIGIN rpath. The build folder persists under build/, so rebuilds are incremental.
The .proto files are compiled into a descriptor set loaded by pyserver._proto.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# engine/*.pyx as pyserver.engine.*, engine/protocol/*.pyx as pyserver.engine.protocol.*
ENGINE_MODULES = sorted(p.stem for p in (ROOT / "engine").glob("*.pyx")) + \
    sorted(f"protocol.{p.stem}" for p in (ROOT / "engine" / "protocol").glob("*.pyx"))
if not Path("/usr/include/nghttp2/nghttp2.h").exists():
    # CMake skips the HTTP/2 module without libnghttp2-dev (no gRPC then).
    ENGINE_MODULES.remove("protocol.http2")


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        self._cmake_done = False
        super().run()

    def build_extension(self, ext):
        if self._cmake_done:
            return
        engine_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        engine_dir.mkdir(parents=True, exist_ok=True)
        build_type = os.environ.get("PYSERVER_BUILD_TYPE", "RelWithDebInfo")
        tag = f"{build_type}-py{sys.version_info.major}{sys.version_info.minor}"
        build_dir = ROOT / "build" / f"cmake-{tag}"
        build_dir.mkdir(parents=True, exist_ok=True)
        generator = ["-G", "Ninja"] if _have("ninja") else []
        subprocess.check_call(
            ["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
             f"-DCMAKE_BUILD_TYPE={build_type}",
             f"-DPython_EXECUTABLE={sys.executable}",
             f"-DPYSERVER_ENGINE_DIR={engine_dir}"])
        jobs = os.environ.get("PYSERVER_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        _compile_protos(engine_dir.parent / "_proto")
        if getattr(self, "editable_mode", False) or self.inplace:
            # setuptools copies only the extension modules back into the
            # source tree; the core library and descriptor set must follow.
            for library in ("libpyserver_core.so", "libpyserver_protocol.so",
                            "libtritonserver.so"):
                _copy_if_changed(engine_dir / library, ROOT / "pyserver" / "engine" / library)
            _copy_if_changed(engine_dir.parent / "_proto" / "pyserver_protos.desc",
                             ROOT / "pyserver" / "_proto" / "pyserver_protos.desc")
        self._cmake_done = True


def _copy_if_changed(src, dst):
    import shutil
    if src.resolve() == dst.resolve():
        return
    if dst.exists() and dst.read_bytes() == src.read_bytes():
        return
    tmp = dst.with_suffix(dst.suffix + ".tmp")
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)  # atomic: a running server keeps its mapped copy


def _have(tool):
    from shutil import which
    return which(tool) is not None


def _compile_protos(out_dir):
    """protos/*.proto -> one FileDescriptorSet (loaded into a private pool, so
    it never clashes with tritonclient's copies of the same files)."""
    from grpc_tools import protoc
    import grpc_tools

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{ROOT / 'protos'}", f"-I{well_known}", "--include_imports",
            f"--descriptor_set_out={out_dir / 'pyserver_protos.desc'}",
            "model_config.proto", "grpc_service.proto", "health.proto"]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed on protos/")


setup(
    ext_modules=[CMakeExtension(f"pyserver.engine.{m}") for m in ENGINE_MODULES],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"pyserver._proto": ["*.desc"], "pyserver.engine": ["*.so", "*.pyi"],
                  "pyserver.engine.protocol": ["*.so", "*.pyi"]},
)
