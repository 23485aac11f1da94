from typing import Any, Callable

class Ledger:
    inflight: int
    handles: dict
    stopping: bool
    drained: Any
    def __init__(self) -> None: ...

class Route:
    model: Any
    open: bool
    cache_checked: bool
    direct: Any  # a DirectRoute, or None
    records: Any  # a PlainModel, or None
    records_queued: int
    def __init__(self, model: Any, validate: Callable, answer: Callable, scheduler: Any,
                 dispatch: Callable[[], None] | None, open: bool) -> None: ...

class Admission:
    def __init__(self, ledger: Ledger, general: Callable, general_resolved: Callable,
                 uses_cache: Callable[[Any], bool], spin: Callable[[Any], None],
                 tracer: Any) -> None: ...
    def bind(self, manager: Any, loop: Any) -> None: ...
    def enqueue_plain(self, route: Route, pending: Any) -> Any: ...
    def submit(self, request: Any, future: Any = None) -> Any: ...
    def direct_route(self, model_name: str) -> Any | None: ...
