"""The CUDA runtime for backends that drive a GPU themselves (TensorRT):
device count, current device, device buffers from the server's CUDA memory
pools, asynchronous copies and stream synchronization, over csrc's
CudaRuntime (``pyserver.engine.memory``), the same loaded libcudart that
gives the server its pinned memory pool and stream pools. Nothing here
needs CUDA at build or import time; every call that waits releases the GIL.
"""

from __future__ import annotations

import numpy as np

from pyserver.engine import memory
from pyserver.kernel.errors import ServerError

# Imported first: it registers the NVIDIA wheels' libcudart with csrc
# before anything loads the runtime.
from pyserver.runtime import host_memory  # noqa: F401


class CudaError(RuntimeError):
    """A CUDA call failed, or no CUDA runtime or device is usable."""


def _call(fn, *args):
    try:
        return fn(*args)
    except ServerError as err:
        raise CudaError(str(err)) from None


def device_count() -> int:
    """GPUs visible to this process; raises CudaError saying why there is
    none usable (no runtime library, no driver, no device)."""
    info = memory.cuda_runtime_info()
    if not info["available"]:
        raise CudaError(info["reason"])
    return int(info["device_count"])


def visible_gpus() -> int:
    """GPUs visible to this process, 0 where none is usable."""
    try:
        return device_count()
    except CudaError:
        return 0


def set_device(device: int) -> None:
    """Makes ``device`` current for the calling thread."""
    _call(memory.cuda_set_device, device)


def synchronize(stream: int) -> None:
    """Waits for the work queued on a stream (a cudaStream_t handle)."""
    _call(memory.cuda_stream_synchronize, stream)


class DeviceBuffer:
    """Device memory from a GPU's pool (``DeviceMemory.pool(device)``) that
    grows to the largest size asked for and is held between executions, so
    a steady workload neither allocates nor frees."""

    def __init__(self, pool):
        self._pool = pool
        self._block = None

    @property
    def ptr(self) -> int:
        return self._block.ptr if self._block is not None else 0

    def reserve(self, nbytes: int) -> int:
        block = self._block
        if block is None or nbytes > block.capacity:
            self.close()  # first: the pool may reuse its room for the larger block
            self._block = _call(self._pool.allocate, max(nbytes, 256))
        return self._block.ptr

    def close(self) -> None:
        block, self._block = self._block, None
        if block is not None:
            block.close()


def copy_to_device(dst: int, src: np.ndarray, stream: int) -> None:
    """Queues a copy of a (pinned, for it to be asynchronous) host array to
    device memory on the stream."""
    _call(memory.cuda_copy_to_device, dst, np.ascontiguousarray(src).reshape(-1).view(np.uint8),
          stream)


def copy_to_host(dst: np.ndarray, src: int, stream: int) -> None:
    """Queues a copy from device memory into a (contiguous) host array."""
    _call(memory.cuda_copy_to_host, dst.reshape(-1).view(np.uint8), src, stream)
