from typing import Any, Callable

def settle(requests: list, handles: dict, reschedule: type, tracer: Any,
           now_ns: Callable[[], int]) -> list | None: ...
