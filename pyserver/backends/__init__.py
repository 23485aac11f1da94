"""Backends: one module per framework, imported lazily so a CPU-only install
without a framework still serves the models it can.

A backend class is built once per model instance; what it offers and
declares (its capabilities, the batch outcome, the execution-driver
interface) is written in base.py. ``find_backend`` finds the class a
config's backend name means, as Triton searches (a built-in, a registered
one, a Triton backend library, a Python-based backend's model.py),
``instance_class(cls, config)`` the one that runs that config's instances,
and ``register_backend`` adds an application's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyserver.kernel.errors import Code, ServerError

# backend name -> (module, class)
_BACKENDS = {
    "onnxruntime": ("pyserver.backends.onnxruntime", "OnnxRuntimeBackend"),
    "openvino": ("pyserver.backends.openvino", "OpenVINOBackend"),
    "python": ("pyserver.backends.python", "PythonBackend"),
    "pytorch": ("pyserver.backends.pytorch", "PyTorchBackend"),
    "tensorrt": ("pyserver.backends.tensorrt", "TensorRTBackend"),
}


def register_backend(name: str, cls) -> None:
    """Makes `backend: "<name>"` in a config.pbtxt load ``cls`` (for
    embedding applications and tests). Replaces an earlier registration."""
    _CUSTOM[name] = cls


_CUSTOM: dict = {}


def backend_class(name: str):
    """The class of a built-in or registered backend."""
    if name in _CUSTOM:
        return _CUSTOM[name]
    try:
        module_name, class_name = _BACKENDS[name]
    except KeyError:
        known = ", ".join(sorted(_BACKENDS))
        raise ServerError(
            Code.UNSUPPORTED,
            f"unable to find backend '{name}' (backends available here: {known})") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ServerError(
            Code.UNAVAILABLE,
            f"unable to load backend '{name}': {err}") from None
    return getattr(module, class_name)


DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"
PYTHON_RUNTIME = "model.py"  # a config's `runtime` naming a Python-based backend


@dataclass(frozen=True)
class BackendSearch:
    """Where a model's backend is looked for, as Triton looks: the model's
    version folder, its folder, then ``backend_directory``/NAME/, and what
    the server was told about backends (--backend-config, by backend name;
    "" holds the global settings)."""
    version_dir: Path | None
    model_dir: Path
    backend_directory: str = DEFAULT_BACKEND_DIRECTORY
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    auto_complete: bool = True  # not --strict-model-config
    default_max_batch_size: int = 4  # --backend-config=default-max-batch-size=N


def find_backend(name: str, runtime: str, search: BackendSearch):
    """The class that runs a model whose config says ``backend: name`` (and
    ``runtime``, Triton's field naming the backend's library or model.py).

    In order: a backend the application registered; a Triton backend
    library (libtriton_NAME.so, or the file ``runtime`` names) in the
    model's version folder or its folder; a built-in backend; the library
    in BACKEND_DIR/NAME/; a Python-based backend, BACKEND_DIR/NAME/model.py
    (run by the Python backend; ``runtime: "model.py"`` asks for it). The
    built-ins come before the backend directory so that a Triton install's
    /opt/tritonserver/backends/onnxruntime does not replace pyserver's own."""
    if name in _CUSTOM:
        return _CUSTOM[name]
    library_name = runtime if runtime and runtime != PYTHON_RUNTIME else f"libtriton_{name}.so"
    own = [d for d in (search.version_dir, search.model_dir) if d is not None]
    if runtime != PYTHON_RUNTIME:
        for folder in own:
            if (folder / library_name).is_file():
                return _library_backend(folder / library_name, name, search)
        if name in _BACKENDS and runtime in ("", f"libtriton_{name}.so"):
            return backend_class(name)
    backend_folder = Path(search.backend_directory) / name
    if runtime != PYTHON_RUNTIME and (backend_folder / library_name).is_file():
        return _library_backend(backend_folder / library_name, name, search)
    if (backend_folder / PYTHON_RUNTIME).is_file() and (not runtime or runtime == PYTHON_RUNTIME):
        from pyserver.backends.python import python_based_backend
        return python_based_backend(str(backend_folder / PYTHON_RUNTIME))
    if runtime == PYTHON_RUNTIME:
        raise ServerError(
            Code.INVALID_ARG,
            f"unable to find Python backend based backend library '{PYTHON_RUNTIME}' for "
            f"backend '{name}', searched: '{backend_folder / PYTHON_RUNTIME}'")
    if runtime:
        searched = " ".join(f"'{d}'" for d in (*own, backend_folder))
        raise ServerError(Code.INVALID_ARG,
                          f"unable to find backend library '{runtime}' for backend '{name}', "
                          f"searched: {searched}")
    if name not in _BACKENDS:
        known = ", ".join(sorted(_BACKENDS))
        raise ServerError(
            Code.INVALID_ARG,
            f"unable to find backend library for backend '{name}', try specifying runtime on "
            f"the model configuration (searched {', '.join(str(d) for d in (*own, backend_folder))};"
            f" built-in backends: {known})")
    return backend_class(name)


# Triton's compute capability floor for GPU backends, as its server words it
# in every backend's config (std::to_string of a double).
MIN_COMPUTE_CAPABILITY = "6.000000"


def library_settings(name: str, search: BackendSearch) -> dict[str, str]:
    """The "cmdline" of a Triton backend library's config: what Triton's
    server gives every backend (backend-directory, auto-complete-config,
    min-compute-capability, default-max-batch-size; the Python backend tells
    its default location from a python-based one's by backend-directory),
    then the global --backend-config settings, then the backend's own."""
    settings = {"backend-directory": search.backend_directory,
                "auto-complete-config": "true" if search.auto_complete else "false",
                "min-compute-capability": MIN_COMPUTE_CAPABILITY,
                "default-max-batch-size": str(search.default_max_batch_size)}
    settings.update(search.backend_config.get("", {}))
    settings.update(search.backend_config.get(name, {}))
    return settings


def _library_backend(path: Path, name: str, search: BackendSearch):
    """A backend compiled against Triton's C backend API, loaded from
    ``path``, configured with library_settings()."""
    settings = library_settings(name, search)
    try:
        from pyserver.backends.triton_c import library_backend
    except ImportError as err:
        raise ServerError(Code.UNAVAILABLE,
                          f"unable to load backend '{name}' from {path}: {err}") from None
    return library_backend(str(path), name, settings)


def instance_class(cls, config):
    """The class that runs ``config``'s instances: ``cls`` itself, unless it
    chooses one per config (``cls.instance_class(config)``: the Python
    backend's process and thread modes)."""
    choose = getattr(cls, "instance_class", None)
    return cls if choose is None else choose(config)
