"""Tensors of the in-process API: ``MemoryBuffer`` (where the bytes are and
who owns them), ``Tensor`` (datatype, shape, buffer) with DLPack both ways,
and the two conversions the request path needs: a user's input to the
(wire datatype, numpy array) the server takes, and a response's output to
a Tensor.

On the CPU a Tensor is numpy memory and DLPack goes through the engine's
capsule code (engine/dlpack.pyx); GPU memory goes through CuPy, imported
only when a GPU tensor or device is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pyserver.engine import dlpack
from pyserver.inprocess.enums import DataType, DLDeviceType, MemoryType
from pyserver.inprocess.errors import InvalidArgumentError, UnsupportedError
from pyserver.kernel import dtypes

__all__ = ["MemoryBuffer", "Tensor", "parse_device_or_memory_type"]

# DLPack type codes
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6
_TO_DLPACK = {
    DataType.BOOL: (_BOOL, 8),
    DataType.INT8: (_INT, 8), DataType.INT16: (_INT, 16), DataType.INT32: (_INT, 32),
    DataType.INT64: (_INT, 64),
    DataType.UINT8: (_UINT, 8), DataType.UINT16: (_UINT, 16), DataType.UINT32: (_UINT, 32),
    DataType.UINT64: (_UINT, 64),
    DataType.FP16: (_FLOAT, 16), DataType.FP32: (_FLOAT, 32), DataType.FP64: (_FLOAT, 64),
    DataType.BF16: (_BFLOAT, 16),
}
_FROM_DLPACK = {v: k for k, v in _TO_DLPACK.items()}
_DEVICE_MEMORY = {DLDeviceType.kDLCPU: MemoryType.CPU, DLDeviceType.kDLCUDA: MemoryType.GPU,
                  DLDeviceType.kDLCUDAHost: MemoryType.CPU_PINNED}
_MEMORY_DEVICE = {MemoryType.CPU: DLDeviceType.kDLCPU, MemoryType.CPU_PINNED: DLDeviceType.kDLCPU,
                  MemoryType.GPU: DLDeviceType.kDLCUDA}
_MEMORY_NAMES = {"CPU": MemoryType.CPU, "CPU_PINNED": MemoryType.CPU_PINNED, "GPU": MemoryType.GPU}


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def parse_device_or_memory_type(device) -> tuple[MemoryType, int]:
    """A device as the API takes one: "cpu", "gpu", "gpu:1", a MemoryType,
    (MemoryType, id) or (DLDeviceType, id)."""
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
        if isinstance(kind, MemoryType):
            return kind, int(index)
        if isinstance(kind, DLDeviceType):
            if kind not in _DEVICE_MEMORY:
                raise InvalidArgumentError(f"Unsupported DLPack device type. Can't convert "
                                           f"{kind} to Triton server memory type")
            return _DEVICE_MEMORY[kind], int(index)
        raise InvalidArgumentError(f"Invalid memory type {device}")
    if isinstance(device, MemoryType):
        return device, 0
    if isinstance(device, str):
        parts = device.split(":")
        if len(parts) > 2:
            raise InvalidArgumentError(f"Invalid memory type string {device}")
        kind = _MEMORY_NAMES.get(parts[0].upper())
        if kind is None:
            raise InvalidArgumentError(f"Unsupported Memory Type String. Can't convert "
                                       f"{parts[0].upper()} to Triton server memory type")
        index = 0
        if len(parts) == 2:
            try:
                index = int(parts[1])
            except ValueError:
                raise InvalidArgumentError(f"Invalid memory type string {device}") from None
        return kind, index
    raise InvalidArgumentError(f"Invalid memory type {device}")


@dataclass
class MemoryBuffer:
    """Memory a Tensor uses. It does not own the memory: ``owner`` does, and
    the memory stays valid while the buffer holds it."""

    data_ptr: int
    memory_type: MemoryType
    memory_type_id: int
    size: int
    owner: Any

    @staticmethod
    def from_dlpack(owner: Any) -> MemoryBuffer:
        if not hasattr(owner, "__dlpack__"):
            raise InvalidArgumentError("Object does not support DLpack protocol")
        return _described(owner)[1]


def _described(obj) -> tuple[DataType, MemoryBuffer, list]:
    """(datatype, buffer, shape) of a DLPack object, the object its owner."""
    try:
        device_type, device_id = obj.__dlpack_device__()
        stream = None
        if device_type == DLDeviceType.kDLCUDA:
            cupy = _cupy()
            if cupy is None:
                raise UnsupportedError(f"DLPack synchronization on device "
                                       f"{(device_type, device_id)} not supported")
            stream = 1  # the legacy default stream: the producer syncs to it
        (ptr, device_type, device_id, code, bits, lanes, shape, contiguous,
         size) = dlpack.describe(obj, stream)
    except UnsupportedError:
        raise
    except Exception as e:
        raise InvalidArgumentError(f"Object does not support DLPack protocol: {e}") from None
    data_type = _FROM_DLPACK.get((code, bits)) if lanes == 1 else None
    if data_type is None:
        raise InvalidArgumentError(f"Unsupported DLPack data type. Can't convert {(code, bits)} "
                                   "to Triton server data type")
    memory_type = _DEVICE_MEMORY.get(device_type)
    if memory_type is None:
        raise InvalidArgumentError(f"Unsupported DLPack device type. Can't convert {device_type} "
                                   "to Triton server memory type")
    if not contiguous:
        raise InvalidArgumentError("Only contiguous memory is supported")
    return data_type, MemoryBuffer(ptr, memory_type, device_id, size, obj), list(shape)


@dataclass
class Tensor:
    """A tensor: ``data_type``, ``shape`` and the ``memory_buffer`` holding
    its bytes (BYTES tensors hold Triton's serialization: a 4-byte length
    before each element)."""

    data_type: DataType
    shape: Sequence[int]
    memory_buffer: MemoryBuffer

    @property
    def data_ptr(self) -> int:
        return self.memory_buffer.data_ptr

    @property
    def memory_type(self) -> MemoryType:
        return self.memory_buffer.memory_type

    @property
    def memory_type_id(self) -> int:
        return self.memory_buffer.memory_type_id

    @property
    def size(self) -> int:
        return self.memory_buffer.size

    # -- DLPack ------------------------------------------------------------------

    def __dlpack__(self, *, stream=None, **_ignored):
        """A capsule over this tensor's memory that keeps the tensor alive
        (the consumer's array refers to it, not to a copy)."""
        self._sync_on_requested_stream(stream)
        if self.data_type not in _TO_DLPACK:
            raise InvalidArgumentError(f"Unsupported Triton server data type. Can't convert "
                                       f"{self.data_type} to DLPack data type")
        code, bits = _TO_DLPACK[self.data_type]
        return dlpack.export(self, self.data_ptr, int(_MEMORY_DEVICE[self.memory_type]),
                             self.memory_type_id, code, bits, [int(d) for d in self.shape])

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return _MEMORY_DEVICE[self.memory_type], self.memory_type_id

    def _sync_on_requested_stream(self, stream) -> None:
        if self.memory_type != MemoryType.GPU:  # every CPU export: nothing to wait for
            if stream in (None, 0, -1):
                return
            raise self._unsupported_stream(stream)
        if stream is not None and not isinstance(stream, int):
            raise self._unsupported_stream(stream)
        cupy = _cupy()
        if cupy is None:
            raise self._unsupported_stream(stream)
        if stream == -1:  # the consumer asks for no synchronization
            return
        with cupy.cuda.Device(self.memory_type_id):
            current = cupy.cuda.get_current_stream()
            wanted = {None: cupy.cuda.Stream.null.ptr, 0: cupy.cuda.Stream.null.ptr,
                      1: cupy.cuda.Stream.null.ptr, 2: cupy.cuda.Stream.ptds.ptr}.get(stream, stream)
            if (current.ptr or cupy.cuda.Stream.null.ptr) != wanted:
                # work queued on our stream is done before the consumer's runs
                cupy.cuda.ExternalStream(wanted).wait_event(current.record())

    def _unsupported_stream(self, stream) -> UnsupportedError:
        return UnsupportedError(f"DLPack stream synchronization on memory type "
                                f"{self.memory_type} and stream {stream} not supported")

    @staticmethod
    def from_dlpack(obj: Any) -> Tensor:
        """A tensor over a DLPack object's memory (no copy; ``obj`` is kept)."""
        data_type, buffer, shape = _described(obj)
        return Tensor(data_type, shape, buffer)

    # -- BYTES -----------------------------------------------------------------

    def to_bytes_array(self) -> np.ndarray:
        """A BYTES tensor's elements, an object array of bytes in its shape."""
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Tensor has data type {self.data_type} not {DataType.BYTES}")
        raw = self._host_bytes()
        try:
            return dtypes.deserialize_bytes_tensor(raw).reshape(list(self.shape))
        except ValueError as e:
            raise InvalidArgumentError(f"malformed BYTES tensor: {e}") from None

    def to_string_array(self) -> np.ndarray:
        """The elements as str (UTF-8; numpy's astype(str) would take them
        for ASCII)."""
        items = self.to_bytes_array()
        decoded = [b.decode("utf-8", "replace") for b in items.reshape(-1)]
        return np.array(decoded, dtype=str).reshape(items.shape) if decoded \
            else np.empty(items.shape, dtype=str)

    @staticmethod
    def from_bytes_array(array) -> Tensor:
        tensor = Tensor._from_object(array)
        if tensor.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Unsupported conversion from {array} to Triton BYTES "
                                       f"Tensor. Got {tensor.data_type}")
        return tensor

    @staticmethod
    def from_string_array(array) -> Tensor:
        return Tensor.from_bytes_array(array)

    # -- devices -----------------------------------------------------------------

    def to_host(self) -> Tensor:
        return self.to_device("cpu")

    def to_device(self, device) -> Tensor:
        """This tensor in ``device``'s memory: itself when it is there (CPU
        pinned counts as CPU), else a copy through CuPy."""
        memory_type, memory_type_id = parse_device_or_memory_type(device)
        if self.memory_type == memory_type and self.memory_type_id == memory_type_id:
            return self
        if self.memory_type == MemoryType.CPU_PINNED and memory_type == MemoryType.CPU:
            return self
        if memory_type == MemoryType.CPU and self.memory_type == MemoryType.GPU:
            cupy = _cupy()
            if cupy is not None:
                return Tensor(self.data_type, list(self.shape),
                              _numpy_buffer(cupy.asnumpy(self._raw_gpu(cupy))))
        if memory_type == MemoryType.GPU and self.memory_type != MemoryType.GPU:
            cupy = _cupy()
            if cupy is not None:
                with cupy.cuda.Device(memory_type_id):
                    copy = cupy.asarray(self._raw_host())
                return Tensor(self.data_type, list(self.shape),
                              MemoryBuffer(copy.data.ptr, MemoryType.GPU, memory_type_id,
                                           copy.nbytes, copy))
        raise UnsupportedError(f"Conversion from {(self.memory_type, self.memory_type_id)} to "
                               f"{(memory_type, memory_type_id)} not supported.")

    # -- raw views -----------------------------------------------------------------

    def _raw_host(self) -> np.ndarray:
        """The bytes on the host as a flat uint8 view (no copy)."""
        if self.memory_type not in (MemoryType.CPU, MemoryType.CPU_PINNED):
            raise UnsupportedError(f"Conversion from {self.memory_type} to numpy array not "
                                   "supported.")
        owner = self.memory_buffer.owner
        if isinstance(owner, np.ndarray) and owner.ctypes.data == self.data_ptr \
                and owner.nbytes == self.size and owner.flags.c_contiguous:
            return owner.reshape(-1).view(np.uint8)
        return np.from_dlpack(_RawBytes(self)) if self.size else np.empty(0, np.uint8)

    def _raw_gpu(self, cupy):
        return cupy.from_dlpack(_RawBytes(self))

    def _host_bytes(self) -> np.ndarray:
        if self.memory_type == MemoryType.GPU:
            cupy = _cupy()
            if cupy is None:
                raise UnsupportedError(f"Conversion from {self.memory_type} to numpy array not "
                                       "supported.")
            return cupy.asnumpy(self._raw_gpu(cupy))
        return self._raw_host()

    def host_array(self) -> np.ndarray:
        """The tensor as a numpy array on the host (a view when its memory
        is there; BYTES as an object array of bytes)."""
        if self.data_type == DataType.BYTES:
            return self.to_bytes_array()
        raw = self._host_bytes()
        return raw.view(dtypes.WIRE_TO_NUMPY[self.data_type.name]).reshape(list(self.shape))

    # -- from Python objects -------------------------------------------------------------

    @staticmethod
    def _from_object(obj) -> Tensor:
        if isinstance(obj, Tensor):
            return obj
        if isinstance(obj, (np.ndarray, np.generic)):
            return _from_numpy(np.asarray(obj))
        if isinstance(obj, list):
            try:
                array = np.array(obj)
            except Exception as e:
                raise InvalidArgumentError(f"Conversion from {obj} to tensor not supported.") from e
            return _from_numpy(array)
        if hasattr(obj, "__dlpack__"):
            return Tensor.from_dlpack(obj)
        raise InvalidArgumentError(f"Input type {type(obj)} not supported. Must be one of "
                                   f"[numpy.ndarray, numpy.generic, list] or the type must "
                                   f"support __dlpack__")


class _RawBytes:
    """A tensor's memory as flat bytes, for DLPack consumers (BYTES and
    any datatype read byte-wise)."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor):
        self._tensor = tensor

    def __dlpack__(self, *, stream=None, **_ignored):
        t = self._tensor
        return dlpack.export(t, t.data_ptr, int(_MEMORY_DEVICE[t.memory_type]), t.memory_type_id,
                             _UINT, 8, [t.size])

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def _numpy_buffer(array: np.ndarray) -> MemoryBuffer:
    return MemoryBuffer(array.ctypes.data, MemoryType.CPU, 0, array.nbytes, array)


def _is_bytes_kind(dtype: np.dtype) -> bool:
    return dtype.hasobject or dtype.kind in ("S", "U")


def _from_numpy(array: np.ndarray) -> Tensor:
    shape = list(array.shape)
    if _is_bytes_kind(array.dtype):
        serialized = np.frombuffer(dtypes.serialize_bytes_tensor(array), dtype=np.uint8)
        return Tensor(DataType.BYTES, shape, _numpy_buffer(serialized))
    try:
        data_type = DataType[dtypes.numpy_to_wire(array.dtype)]
    except ValueError:
        raise InvalidArgumentError(f"Unsupported Numpy data type. Can't convert "
                                   f"{array.dtype.type} to Triton server data type") from None
    array = np.ascontiguousarray(array)
    return Tensor(data_type, shape, _numpy_buffer(array))


# -- what the request path uses ---------------------------------------------------------


def input_array(value) -> tuple[str, np.ndarray]:
    """A request input as the server takes it: (wire datatype, numpy array;
    BYTES as an object array of bytes). numpy arrays and lists go straight
    over; Tensors and DLPack objects are viewed (GPU memory is copied to the
    host: the backends read inputs there)."""
    if isinstance(value, (np.ndarray, np.generic, list)):
        array = _list_array(value) if isinstance(value, list) else np.asarray(value)
        if _is_bytes_kind(array.dtype):
            return "BYTES", _bytes_objects(array)
        try:
            return dtypes.numpy_to_wire(array.dtype), array
        except ValueError:
            raise InvalidArgumentError(f"Unsupported Numpy data type. Can't convert "
                                       f"{array.dtype.type} to Triton server data type") from None
    tensor = Tensor._from_object(value)
    return tensor.data_type.name, tensor.host_array()


def _list_array(value: list) -> np.ndarray:
    try:
        return np.array(value)
    except Exception as e:
        raise InvalidArgumentError(f"Conversion from {value} to tensor not supported.") from e


def _bytes_objects(array: np.ndarray) -> np.ndarray:
    flat = array.reshape(-1)
    if array.dtype.hasobject and all(type(x) is bytes for x in flat):
        return array
    out = np.empty(flat.shape[0], dtype=np.object_)
    for i, item in enumerate(flat):
        if isinstance(item, (bytes, bytearray)):  # (np.bytes_ is bytes)
            out[i] = bytes(item)
        else:
            out[i] = str(item).encode("utf-8")
    return out.reshape(array.shape)


def output_tensor(datatype: str, shape, array: np.ndarray) -> Tensor:
    """A response output as a Tensor over the model's numpy array (BYTES
    serialized, as Triton hands them out)."""
    if datatype == "BYTES":
        serialized = np.frombuffer(dtypes.serialize_bytes_tensor(np.asarray(array, dtype=object)),
                                   dtype=np.uint8)
        return Tensor(DataType.BYTES, list(shape), _numpy_buffer(serialized))
    array = np.ascontiguousarray(array)
    return Tensor(DataType[datatype], list(shape), _numpy_buffer(array))

