"""Triton datatypes: wire names, config enum names, numpy dtypes, element sizes."""

from __future__ import annotations

import numpy as np

from pyserver._proto import ModelConfig

# wire name -> numpy dtype (BYTES are object arrays of bytes; BF16 has no numpy
# dtype, so it travels as raw uint16 words).
WIRE_TO_NUMPY = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
    "BF16": np.dtype(np.uint16),
}

# TRITONSERVER_DataType numbers (what pb_utils.Tensor.triton_dtype() gives,
# and how the Python backend's messages name datatypes) <-> wire names.
CODE_TO_WIRE = {1: "BOOL", 2: "UINT8", 3: "UINT16", 4: "UINT32", 5: "UINT64", 6: "INT8",
                7: "INT16", 8: "INT32", 9: "INT64", 10: "FP16", 11: "FP32", 12: "FP64",
                13: "BYTES", 14: "BF16"}
WIRE_TO_CODE = {v: k for k, v in CODE_TO_WIRE.items()}
BYTES_CODE = WIRE_TO_CODE["BYTES"]
# ... -> numpy dtype of the data in memory (BF16 as raw uint16 words; BYTES
# has none: it travels serialized)
CODE_TO_NUMPY = {code: WIRE_TO_NUMPY[wire] for code, wire in CODE_TO_WIRE.items()
                 if wire != "BYTES"}

# Size in bytes of one element; BYTES is variable (0 here).
ELEMENT_SIZE = {k: (0 if k == "BYTES" else v.itemsize) for k, v in WIRE_TO_NUMPY.items()}

_NUMPY_TO_WIRE = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.int8): "INT8",
    np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.float16): "FP16",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
    np.dtype(np.object_): "BYTES",
}


def config_to_wire(config_type: str) -> str:
    """'TYPE_FP32' -> 'FP32'; 'TYPE_STRING' -> 'BYTES'."""
    name = config_type[5:] if config_type.startswith("TYPE_") else config_type
    return "BYTES" if name == "STRING" else name


def wire_to_config(wire: str) -> str:
    return "TYPE_STRING" if wire == "BYTES" else "TYPE_" + wire


def numpy_to_wire(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind in ("S", "U"):
        return "BYTES"
    try:
        return _NUMPY_TO_WIRE[dtype]
    except KeyError:
        raise ValueError(f"unsupported numpy dtype {dtype}") from None


def serialize_bytes_tensor(arr: np.ndarray) -> bytes:
    """BYTES elements as 4-byte little-endian length + bytes, row-major."""
    parts = []
    for item in arr.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(len(item).to_bytes(4, "little"))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes_tensor(buf, count: int | None = None) -> np.ndarray:
    """Inverse of serialize_bytes_tensor; raises ValueError on a malformed buffer."""
    mv = memoryview(buf).cast("B")
    out = []
    pos, end = 0, len(mv)
    while pos < end:
        if pos + 4 > end:
            raise ValueError("truncated BYTES element length")
        n = int.from_bytes(mv[pos : pos + 4], "little")
        pos += 4
        if pos + n > end:
            raise ValueError("BYTES element exceeds buffer")
        out.append(bytes(mv[pos : pos + n]))
        pos += n
    if count is not None and len(out) != count:
        raise ValueError(f"expected {count} BYTES elements, got {len(out)}")
    arr = np.empty(len(out), dtype=np.object_)
    arr[:] = out
    return arr


_CONFIG_TYPES = ModelConfig.DESCRIPTOR.file.enum_types_by_name["DataType"]


def config_type_name(number: int) -> str:
    """A config DataType enum number's name ('TYPE_FP32'); the number as text
    when it names no type."""
    value = _CONFIG_TYPES.values_by_number.get(number)
    return value.name if value is not None else str(number)
