from typing import Any

class ServerHandle:
    router: Any
    control: Any
    def __init__(self, router: Any) -> None: ...

class BlsCall:
    token: int
    def respond(self, response: Any, error: BaseException | None, final: bool) -> None: ...

def drain() -> None: ...

def next_trace_id() -> int: ...

TRACE_LEVEL_TIMESTAMPS: int
TRACE_LEVEL_TENSORS: int

class ProgramTraceRef:
    id: int
    parent_id: int
    level: int
    recorded: bool
    def report(self, trace_id: int, parent_id: int, model_name: str, model_version: Any,
               request_id: str, timestamps: list, tensors: list) -> None: ...
