"""Type stub for the compiled pyserver.engine.batch_results (engine/batch_results.pyx)."""

from typing import Any, Callable

class BatchResults:
    def __init__(self, model: Any, responses: Callable, other: Callable, scheduler: Any) -> None: ...
    def finish(self, batch: Any, results: Any, start_ns: int, output_ns: int) -> bool: ...
