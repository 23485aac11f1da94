from typing import Any, Callable

from pyserver.engine.batcher import Batch, Scheduler
from pyserver.engine.plain_spec import PlainSpec

def gather_inputs(requests: list, gather_each: Callable[[list], dict]) -> dict: ...
def run_plain(batch: Batch, execute: Callable[[dict], dict], model: Any, scheduler: Scheduler,
              batching: bool) -> tuple[int, int, int, int, int, str]: ...

class InlineBatches:
    def __init__(self, scheduler: Scheduler, execute: Callable[[dict], dict], model: Any,
                 answer: Callable[[Batch, int, str | None], None], batching: bool,
                 costly_ns: int, outlier_ns: int) -> None: ...
    @property
    def average_ns(self) -> float: ...
    def reset(self) -> None: ...
    def note(self, wall_ns: int) -> bool: ...
    def run(self) -> bool: ...

class DirectRoute:
    spec: PlainSpec
    input_names: list
    input_dtypes: list
    output_names: list
    output_types: list
    model_name: str
    version: str
    runs: int
    def __init__(self, batches: InlineBatches, driver: Any, running: Any, spec: PlainSpec,
                 inputs: list[tuple[str, Any]], outputs: list[tuple[str, str]],
                 model_name: str, version: str) -> None: ...
    def run(self, feed: dict, batch_size: int, received_ns: int) -> dict: ...

class NamedRun:
    def __init__(self, run: Callable[[list, dict, Any], list], names: list, options: Any,
                 fallback: Callable[[list, dict, Any], list]) -> None: ...
    def __call__(self, feed: dict) -> dict: ...
