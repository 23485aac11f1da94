"""pyserver: a Triton-compatible inference server.

    import asyncio, pyserver
    server = pyserver.Server("models/")
    asyncio.run(...)  # await server.start(); await server.infer(...)

    with pyserver.EmbeddedServer("models/") as server:  # blocking, no network
        outputs = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})
"""

from pyserver._version import __version__

# The public names load on first use (PEP 562), so that `python -m pyserver`
# can choose its memory allocator (runtime/allocator.py) before the server's
# modules are imported: importing them all takes ~0.2 s, which a re-exec
# would otherwise pay twice.
_PUBLIC = {
    "EmbeddedServer": "pyserver.embedded",
    "Code": "pyserver.kernel.errors",
    "ServerError": "pyserver.kernel.errors",
    "InferRequest": "pyserver.kernel.types",
    "InferResponse": "pyserver.kernel.types",
    "InferTensor": "pyserver.kernel.types",
    "RequestedOutput": "pyserver.kernel.types",
    "Server": "pyserver.server",
}

__all__ = ["Code", "EmbeddedServer", "InferRequest", "InferResponse", "InferTensor",
           "RequestedOutput", "Server", "ServerError", "__version__"]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pyserver' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
