"""Type stub for the compiled pyserver.engine.plain_spec (engine/plain_spec.pyx)."""

from typing import Any

class PlainSpec:
    def __init__(self, inputs: list[tuple[str, str, tuple]], outputs: list[str],
                 max_batch_size: int) -> None: ...
    def check(self, inputs: list[tuple[str, str, list]], outputs: list[str]) -> int | None: ...

class PlainModel:
    spec: PlainSpec
    input_names: list
    input_dtypes: list
    output_names: list
    output_types: list
    output_dtypes: list
    model_name: str
    version: str
    respond: Any
    typed_by_arrays: bool
    def __init__(self, spec: PlainSpec, inputs: list[tuple[str, Any]],
                 outputs: list[tuple[str, str]], model_name: str, version: str,
                 respond: Any = ..., typed_by_arrays: bool = ...) -> None: ...
