from typing import Any

class ServerHandle:
    router: Any
    control: Any
    def __init__(self, router: Any) -> None: ...

class BlsCall:
    token: int
    def respond(self, response: Any, error: BaseException | None, final: bool) -> None: ...

def drain() -> None: ...
