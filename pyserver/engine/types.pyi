from typing import Any, Callable

class InferTensor:
    name: str
    datatype: str
    shape: list[int]
    data: Any
    parameters: dict | None
    def __init__(self, name: str, datatype: str, shape: list[int], data: Any,
                 parameters: dict | None = ...) -> None: ...

class RequestedOutput:
    name: str
    parameters: dict | None
    def __init__(self, name: str, parameters: dict | None = ...) -> None: ...

class InferRequest:
    model_name: str
    model_version: str
    id: str
    inputs: list[InferTensor]
    outputs: list[RequestedOutput]
    parameters: dict
    priority: int
    timeout_us: int
    parent_trace: int | None
    trace: tuple | dict | None
    def __init__(self, model_name: str, model_version: str = ..., id: str = ...,
                 inputs: list[InferTensor] | None = ..., outputs: list[RequestedOutput] | None = ...,
                 parameters: dict | None = ..., priority: int = ..., timeout_us: int = ...,
                 parent_trace: int | None = ...) -> None: ...

class InferResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[InferTensor]
    parameters: dict | None
    def __init__(self, model_name: str, model_version: str, id: str, outputs: list[InferTensor],
                 parameters: dict | None = ...) -> None: ...

class PendingRequest:
    request: InferRequest
    future: Any
    arrays: dict
    batch_size: int
    response: Any
    id: int
    trace: dict | None
    batch_view: Any  # a custom batching library's view (triton_c.RequestView) or None
    def __init__(self, request: InferRequest, future: Any, arrays: dict, batch_size: int) -> None: ...

class PlainPending(PendingRequest):
    request_id: str
    wanted: list[str] | None
    def __init__(self, future: Any, arrays: dict, batch_size: int, request_id: str,
                 wanted: list[str] | None) -> None: ...

class ImmediateFuture:
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def set_result(self, result: Any) -> None: ...
    def set_exception(self, exception: BaseException) -> None: ...
    def cancel(self, msg: Any = ...) -> bool: ...
    def result(self) -> Any: ...
    def exception(self) -> BaseException | None: ...
    def add_done_callback(self, fn: Callable[[ImmediateFuture], Any], *, context: Any = ...) -> None: ...

RESERVED_PARAMETERS: frozenset[str]
SEQUENCE_START_FLAG: int
SEQUENCE_END_FLAG: int

def request_properties(params: dict | None) -> tuple[int | str, int, dict]: ...
