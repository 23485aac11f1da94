from typing import Any, Callable

def settled_result(fut: Any) -> Any: ...

class Slot:
    data: list[bytes] | None
    close: bool
    def __init__(self, close: bool) -> None: ...

class InferRoute:
    pipeline_high: int
    def __init__(self, decompress: Callable[[bytes, bytes, int], bytes],
                 response_encoding: Callable[[bytes], str | None],
                 compress: Callable[[str, Any], bytes], pipeline_high: int) -> None: ...
    def __call__(self, conn: Any, method: str, headers: dict[bytes, bytes], body: bytes,
                 keep_alive: bool, model: str, version: str) -> None: ...

class InferDone:
    def __call__(self, fut: Any) -> None: ...
