"""Custom batching, as Triton's dynamic batcher has it: a shared library
exporting TRITONBACKEND_ModelBatcherInitialize/Finalize and
TRITONBACKEND_ModelBatchInitialize/IncludeRequest/Finalize decides, beside
the batcher's own rules, which queued requests join a batch.

Which library: the file the config's TRITON_BATCH_STRATEGY_PATH parameter
names (inside the model's folder), else the first batchstrategy.so in the
version folder, the model's folder, then the backend's folder under the
backend directory. Models with sequence batching have none. The library is
loaded (its batcher initialized) for every other model, and consulted
where the model has dynamic batching. csrc runs it (LibraryBatchStrategy)
while a batch forms, over a view of each queued request made here."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pyserver._proto import ModelConfig
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")

PATH_PARAMETER = "TRITON_BATCH_STRATEGY_PATH"
LIBRARY_NAME = "batchstrategy.so"


def find_strategy(config: ModelConfig, version_dir: Path, model_dir: Path,
                  backend_folder: Path | None) -> str | None:
    """The custom batching library for this model version, or None; Triton's
    errors for a path it refuses."""
    params = config.parameters
    if config.HasField("sequence_batching"):
        if PATH_PARAMETER in params:
            raise ServerError(Code.INVALID_ARG,
                              f"{PATH_PARAMETER} cannot be specified with sequence batcher, "
                              "using default batching strategy")
        return None
    if PATH_PARAMETER in params:
        path = params[PATH_PARAMETER].string_value
        if not path:
            raise ServerError(Code.INVALID_ARG, "Parent path and child path must be non-empty")
        if not Path(path).resolve().is_relative_to(model_dir.resolve()):
            raise ServerError(Code.INVALID_ARG, "Batching library path escapes model repository.")
        if not Path(path).exists():
            raise ServerError(Code.NOT_FOUND, f"Batching library path not found: {path}")
        return str(Path(path).resolve())  # dlopen would search the library path for a bare name
    for folder in (version_dir, model_dir, backend_folder):
        if folder is not None and (folder / LIBRARY_NAME).is_file():
            return str(folder / LIBRARY_NAME)
    return None


def load_strategy(path: str, name: str, version: int, model_dir: str, config_json: dict,
                  output_names: list[str]):
    """The library at ``path`` opened and its batcher initialized for the
    model (engine/triton_c.pyx LibraryBatchStrategy)."""
    from pyserver.engine.triton_c import LibraryBatchStrategy

    log.info("Loading custom batching strategy library %s for model %s", path, name)
    return LibraryBatchStrategy(path, name, version, model_dir, json.dumps(config_json),
                                [n.encode() for n in output_names])
