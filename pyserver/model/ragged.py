"""Ragged batching and batch inputs/outputs, as Triton's core and its
framework backends (onnxruntime, pytorch, tensorrt) treat them:

- An input with ``allow_ragged_batch: true`` is not held to one shape per
  batch; the backend gets it as one 1-D tensor, every request's elements
  back to back.
- ``batch_input`` entries are extra model inputs the server makes for each
  batch, from the shapes of a ``source_input`` (TYPE_INT32 or TYPE_FP32):
  BATCH_ELEMENT_COUNT ([requests]: each request's element count),
  BATCH_ACCUMULATED_ELEMENT_COUNT ([requests]: running totals of them),
  BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO ([requests + 1]: the same after a
  0), BATCH_MAX_ELEMENT_COUNT_AS_SHAPE (shape [largest count], contents
  unset), BATCH_ITEM_SHAPE ([rows, dims]: each batch row's shape without the
  batch dimension) and BATCH_ITEM_SHAPE_FLATTEN (the same, flat).
- A ``batch_output`` BATCH_SCATTER_WITH_INPUT_SHAPE output is one flat
  tensor for the batch; each request gets its share, shaped like the output's
  config dims (batch dimension first) with every -1 taken from its source
  input's shape.
"""

from __future__ import annotations

import numpy as np

from pyserver.kernel.errors import Code, ServerError, invalid_arg

__all__ = ["BatchShaping"]

_INPUT_KINDS = ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT",
                "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
                "BATCH_ITEM_SHAPE", "BATCH_ITEM_SHAPE_FLATTEN")
_OUTPUT_KINDS = ("BATCH_SCATTER_WITH_INPUT_SHAPE",)
_DTYPES = {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32}


def _enum_name(message, field: str) -> str:
    return message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number[
        getattr(message, field)].name


class BatchShaping:
    """A model's ragged inputs, batch inputs and batch outputs. Raises
    ServerError(INVALID_ARG) with Triton's text for a config it refuses."""

    def __init__(self, config):
        name = config.name
        inputs = {t.name for t in config.input}
        outputs = {t.name: t for t in config.output}
        batching = config.max_batch_size > 0
        self.ragged = {t.name for t in config.input if t.allow_ragged_batch and batching}
        self.inputs: list[tuple[str, list[str], type, str]] = []
        for bi in config.batch_input:
            kind = _enum_name(bi, "kind")
            if len(bi.source_input) != 1:
                raise invalid_arg(f"batch input kind '{kind}' expects 1 source input, got "
                                  f"{len(bi.source_input)} for {name}")
            dtype = _DTYPES.get(_enum_name(bi, "data_type"))
            if dtype is None:
                raise invalid_arg(f"batch input data type must be TYPE_INT32 or TYPE_FP32 for "
                                  f"{name}")
            if bi.source_input[0] not in inputs:
                raise invalid_arg(f"unknown source input name '{bi.source_input[0]}' for {name}")
            self.inputs.append((kind, list(bi.target_name), dtype, bi.source_input[0]))
        # target output -> (source input, its dims with the batch dimension)
        self.outputs: dict[str, tuple[str, tuple]] = {}
        for bo in config.batch_output:
            kind = _enum_name(bo, "kind")
            if len(bo.source_input) != 1:
                raise invalid_arg(f"batch output kind '{kind}' expects 1 source input, got "
                                  f"{len(bo.source_input)} for {name}")
            if bo.source_input[0] not in inputs:
                raise invalid_arg(f"unknown source input name '{bo.source_input[0]}' for {name}")
            for target in bo.target_name:
                if target not in outputs:
                    raise invalid_arg(f"unknown target output name '{target}' for {name}")
                if target in self.outputs:
                    raise invalid_arg(f"target output name '{target}' can only be specified "
                                      f"once for {name}")
                dims = tuple(int(d) for d in outputs[target].dims)
                self.outputs[target] = (bo.source_input[0], ((-1,) if batching else ()) + dims)
        self.active = bool(self.ragged or self.inputs or self.outputs)

    # -- into the backend -----------------------------------------------------------

    def gather(self, requests: list, gather_rows) -> dict:
        """The batch's inputs: ragged ones flat and back to back, the others
        by ``gather_rows(name, arrays)``, then the batch inputs."""
        batched = {}
        for name in requests[0].arrays:
            parts = [p.arrays[name] for p in requests]
            if name in self.ragged:
                batched[name] = parts[0].reshape(-1) if len(parts) == 1 else \
                    np.concatenate([a.reshape(-1) for a in parts])
            else:
                batched[name] = parts[0] if len(parts) == 1 else gather_rows(name, parts)
        for kind, targets, dtype, source in self.inputs:
            value = self._batch_input(kind, dtype, [p.arrays[source].shape for p in requests])
            for target in targets:
                batched[target] = value
        return batched

    @staticmethod
    def _batch_input(kind: str, dtype, shapes: list[tuple]) -> np.ndarray:
        counts = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        if kind == "BATCH_ELEMENT_COUNT":
            return np.array(counts, dtype=dtype)
        if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
            return np.cumsum(counts).astype(dtype)
        if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
            return np.concatenate([[0], np.cumsum(counts)]).astype(dtype)
        if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":  # its shape is the message
            return np.zeros(max(counts), dtype=dtype)
        rows = [s[1:] for s in shapes for _ in range(s[0])]  # one per batch row
        items = np.array(rows, dtype=dtype).reshape(len(rows), len(shapes[0]) - 1)
        return items if kind == "BATCH_ITEM_SHAPE" else items.reshape(-1)

    # -- out of the backend -----------------------------------------------------------

    def split_outputs(self, requests: list, outputs: dict) -> dict:
        """Takes the batch outputs out of ``outputs``; returns each one's
        per-request parts, in request order."""
        parts = {}
        for target, (source, dims) in self.outputs.items():
            flat = outputs.pop(target, None)
            if flat is None:
                continue
            flat = flat.reshape(-1)
            offset, mine = 0, []
            for p in requests:
                given = p.arrays[source].shape
                shape = tuple(given[i] if d == -1 and i < len(given) else d
                              for i, d in enumerate(dims))
                size = int(np.prod(shape, dtype=np.int64))
                if offset + size > flat.size:
                    raise ServerError(Code.INTERNAL,
                                      f"batch output '{target}' has {flat.size} elements, fewer "
                                      "than its requests' input shapes need")
                mine.append(flat[offset:offset + size].reshape(shape))
                offset += size
            parts[target] = mine
        return parts
