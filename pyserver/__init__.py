"""pyserver: a Triton-compatible inference server.

    import asyncio, pyserver
    server = pyserver.Server("models/")
    asyncio.run(...)  # await server.start(); await server.infer(...)

    with pyserver.EmbeddedServer("models/") as server:  # blocking, no network
        outputs = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})
"""

from pyserver._version import __version__
from pyserver.embedded import EmbeddedServer
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from pyserver.server import Server

__all__ = ["Code", "EmbeddedServer", "InferRequest", "InferResponse", "InferTensor",
           "RequestedOutput", "Server", "ServerError", "__version__"]
