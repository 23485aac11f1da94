from typing import Any

class ServerHandle:
    router: Any
    control: Any
    def __init__(self, router: Any) -> None: ...

class BlsCall:
    token: int
    def respond(self, response: Any, error: BaseException | None, final: bool) -> None: ...

def drain() -> None: ...

class ProgramTraceRef:
    id: int
    parent_id: int
    recorded: bool
    @property
    def timestamps(self) -> bool: ...
    @property
    def tensors(self) -> bool: ...
    def report(self, own: bool, trace_id: int, parent_id: int, model_name: str,
               model_version: Any, request_id: str, timestamps: list, tensors: list) -> None: ...
