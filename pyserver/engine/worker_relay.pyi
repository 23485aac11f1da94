"""Type stub for the compiled pyserver.engine.worker_relay (engine/worker_relay.pyx)."""

import asyncio
from collections import deque
from typing import Any

class WorkerRelay:
    batches: deque
    mv: Any
    instance: Any
    backend: Any
    loop: asyncio.AbstractEventLoop
    _worker: Any
    _t_start: int
    _start_unseen: bool
    _stopped: bool
    _requests: Any
    def __init__(self, mv: Any, instance: Any, loop: asyncio.AbstractEventLoop,
                 max_group: int) -> None: ...
    def dispatch(self) -> None: ...
    def _send_at_iteration_end(self) -> None: ...
    def _on_readable(self) -> None: ...
