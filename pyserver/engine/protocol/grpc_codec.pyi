from typing import Any, Callable

from pyserver.engine.types import PlainPending
from pyserver.kernel.types import InferRequest, InferResponse

def decode_infer_request(
    msg: bytes,
    contents_decoder: Callable[[str, str, list[int], bytes, str, str], Any] | None = ...,
) -> tuple[InferRequest, dict[str, Any] | None]: ...
def encode_infer_response(response: InferResponse, request: InferRequest | None = ...) -> bytes: ...
def encode_stream_response(response: InferResponse | None, request: Any = ...,
                           error: str | None = ...) -> bytes: ...

class InferHandler:
    def __init__(self, submit: Callable[[InferRequest], Any], loop: Any, *,
                 contents_decoder: Callable[..., Any] | None = ...,
                 shm_resolver: Callable[[InferRequest], Any] | None = ...,
                 on_error: Callable[[Any, BaseException], Any],
                 on_deadline: Callable[[Any, Any], Any], canceller: Any = ...,
                 header_forwarder: Any = ..., tracer: Any = ..., routes: Any = ...,
                 enqueue_plain: Any = ...) -> None: ...
    def prepare(self, stream: Any, msg: bytes) -> tuple[InferRequest, dict | None, Any]: ...
    def __call__(self, stream: Any, msg: bytes) -> None: ...

class GrpcPending(PlainPending): ...
