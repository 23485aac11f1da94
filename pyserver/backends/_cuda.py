"""The parts of the CUDA runtime the engine's csrc loader does not cover,
loaded when first needed (ctypes over libcudart) so a CPU install needs no
CUDA: device memory, async copies, the current device, waiting on a
stream; for backends that drive a GPU themselves (TensorRT). Streams and
pinned host memory come from the engine (pyserver.engine.memory). ctypes
releases the GIL around every call.

libcudart is looked up as the system linker finds it and in the NVIDIA
wheels' folders (nvidia-cuda-runtime-cu12 and friends, which tensorrt and
onnxruntime-gpu bring along).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading

import numpy as np

_MEMCPY_HOST_TO_DEVICE = 1
_MEMCPY_DEVICE_TO_HOST = 2

_lock = threading.Lock()
_lib: list = []  # [CDLL] once loaded
_load_error: list = []


class CudaError(RuntimeError):
    pass


def _candidates() -> list[str]:
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
    for base in sys.path:
        for pattern in ("nvidia/cuda_runtime/lib/libcudart.so*", "nvidia/cu13/lib/libcudart.so*",
                        "nvidia/cu12/lib/libcudart.so*"):
            names.extend(sorted(glob.glob(os.path.join(base, pattern)), reverse=True))
    return names


def runtime() -> ctypes.CDLL:
    """The loaded CUDA runtime; raises CudaError saying why it is not there."""
    if _lib:
        return _lib[0]
    with _lock:
        if _lib:
            return _lib[0]
        if _load_error:
            raise CudaError(_load_error[0])
        tried = []
        for name in _candidates():
            try:
                lib = ctypes.CDLL(name)
            except OSError as err:
                tried.append(f"{name}: {err}")
                continue
            _declare(lib)
            _lib.append(lib)
            return lib
        _load_error.append("the CUDA runtime (libcudart) was not found: " + "; ".join(tried[:4]))
        raise CudaError(_load_error[0])


def _declare(lib) -> None:
    c_int, c_size, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    signatures = {
        "cudaGetDeviceCount": [ctypes.POINTER(c_int)],
        "cudaSetDevice": [c_int],
        "cudaStreamSynchronize": [c_void_p],
        "cudaMalloc": [ctypes.POINTER(c_void_p), c_size],
        "cudaFree": [c_void_p],
        "cudaMemcpyAsync": [c_void_p, c_void_p, c_size, c_int, c_void_p],
    }
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = c_int
    lib.cudaGetErrorString.argtypes = [c_int]
    lib.cudaGetErrorString.restype = ctypes.c_char_p


def check(status: int, what: str) -> None:
    if status != 0:
        text = runtime().cudaGetErrorString(status)
        raise CudaError(f"{what} failed: {text.decode() if text else status}")


def device_count() -> int:
    """GPUs visible to this process (0 when the driver has none)."""
    lib = runtime()
    count = ctypes.c_int(0)
    status = lib.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0:
        return 0
    return count.value


def set_device(device: int) -> None:
    check(runtime().cudaSetDevice(device), f"cudaSetDevice({device})")


def synchronize(stream: int) -> None:
    """Waits for the work queued on a stream (a cudaStream_t handle)."""
    check(runtime().cudaStreamSynchronize(stream), "cudaStreamSynchronize")


class DeviceBuffer:
    """Device memory that grows to the largest size asked for."""

    def __init__(self):
        self.ptr = 0
        self.nbytes = 0

    def reserve(self, nbytes: int) -> int:
        if nbytes > self.nbytes:
            self.close()
            ptr = ctypes.c_void_p()
            check(runtime().cudaMalloc(ctypes.byref(ptr), max(nbytes, 256)), f"cudaMalloc({nbytes})")
            self.ptr, self.nbytes = ptr.value or 0, max(nbytes, 256)
        return self.ptr

    def close(self) -> None:
        if self.ptr:
            runtime().cudaFree(self.ptr)
            self.ptr, self.nbytes = 0, 0


def copy_to_device(dst: int, src: np.ndarray, stream: int) -> None:
    """Queues a copy of a (pinned, for it to be asynchronous) host array to
    device memory on the stream."""
    check(runtime().cudaMemcpyAsync(dst, src.ctypes.data, src.nbytes, _MEMCPY_HOST_TO_DEVICE,
                                    stream), "cudaMemcpyAsync(host to device)")


def copy_to_host(dst: np.ndarray, src: int, stream: int) -> None:
    check(runtime().cudaMemcpyAsync(dst.ctypes.data, src, dst.nbytes, _MEMCPY_DEVICE_TO_HOST,
                                    stream), "cudaMemcpyAsync(device to host)")
