"""Backends: one module per framework, imported lazily so a CPU-only install
without a framework still serves the models it can.

A backend class is built once per model instance; what it offers and
declares (its capabilities, the batch outcome, the execution-driver
interface) is written in base.py. ``backend_class(name)`` finds the class a
config's backend name means, ``instance_class(cls, config)`` the one that
runs that config's instances, and ``register_backend`` adds an
application's own.
"""

from __future__ import annotations

import importlib

from pyserver.kernel.errors import Code, ServerError

# backend name -> (module, class)
_BACKENDS = {
    "onnxruntime": ("pyserver.backends.onnxruntime", "OnnxRuntimeBackend"),
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


def instance_class(cls, config):
    """The class that runs ``config``'s instances: ``cls`` itself, unless it
    chooses one per config (``cls.instance_class(config)``: the Python
    backend's process and thread modes)."""
    choose = getattr(cls, "instance_class", None)
    return cls if choose is None else choose(config)
