"""Protocol-neutral request and response objects shared by every frontend:
``InferRequest``, ``InferTensor``, ``RequestedOutput``, ``InferResponse``, and
the server's ``PendingRequest`` (a request in flight).

A frontend decodes its wire format into an ``InferRequest`` (tensors as numpy
arrays, views over the received bytes where possible), awaits
``Server.infer(request)`` and encodes the ``InferResponse`` it gets back. The
classes are built in the engine (engine/types.pyx), where they are cheaper
to make.
"""

from pyserver.engine.types import (
    ImmediateFuture,
    InferRequest,
    InferResponse,
    InferTensor,
    PendingRequest,
    RequestedOutput,
    request_properties,
)

__all__ = ["ImmediateFuture", "InferRequest", "InferResponse", "InferTensor", "PendingRequest",
           "RequestedOutput", "request_properties"]
