"""Type stub for the compiled pyserver.engine.plain_spec (engine/plain_spec.pyx)."""

class PlainSpec:
    batching: bool
    max_batch_size: int
    def __init__(self, inputs: list[tuple[str, str, tuple]], outputs: list[str],
                 max_batch_size: int) -> None: ...
    def check(self, inputs: list[tuple[str, str, list]], outputs: list[str]) -> int | None: ...
