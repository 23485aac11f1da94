"""pyserver: a Triton-compatible inference server.

    import asyncio, pyserver
    server = pyserver.Server("models/")
    asyncio.run(...)  # await server.start(); await server.infer(...)

    with pyserver.EmbeddedServer("models/") as server:  # blocking, no network
        outputs = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})
"""

__version__ = "0.1.0"

from pyserver.core.errors import Code, ServerError  # noqa: E402
from pyserver.core.server import Server  # noqa: E402
from pyserver.core.types import InferRequest, InferResponse, InferTensor, RequestedOutput  # noqa: E402
from pyserver.embedded import EmbeddedServer  # noqa: E402

__all__ = ["Code", "EmbeddedServer", "InferRequest", "InferResponse", "InferTensor",
           "RequestedOutput", "Server", "ServerError", "__version__"]
