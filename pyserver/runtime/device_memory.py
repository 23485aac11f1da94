"""Device memory the server keeps on its GPUs (a TensorRT instance's input
and output bindings): one csrc CUDA memory pool per GPU
(``pyserver.engine.memory.CudaMemoryPool``), created on first use, each
bounded by ``--cuda-memory-pool-byte-size <GPU>:<bytes>`` (Triton's default
64 MiB per GPU). Blocks are reused by size class, so a steady workload stops
calling cudaMalloc; past a pool's size, blocks are plain cudaMalloc. As in
Triton, memory the frameworks allocate themselves (ONNX Runtime's and
PyTorch's own CUDA allocators) is not counted here.
"""

from __future__ import annotations

import threading

from pyserver.engine.memory import CudaMemoryPool, cuda_runtime_info
from pyserver.runtime import host_memory  # noqa: F401  (registers the wheels' libcudart first)

__all__ = ["DEFAULT_CUDA_POOL_BYTES", "DeviceMemory", "parse_cuda_memory_pool_sizes"]

DEFAULT_CUDA_POOL_BYTES = 67108864


def parse_cuda_memory_pool_sizes(values: list[str]) -> dict[int, int]:
    """``--cuda-memory-pool-byte-size`` values, ``<GPU device ID>:<bytes>``,
    to {device: bytes}; a later value for the same GPU replaces an earlier
    one, as in Triton. Raises ValueError saying what is wrong."""
    sizes: dict[int, int] = {}
    for value in values:
        device, sep, size = value.partition(":")
        try:
            if not sep:
                raise ValueError
            device_id, size_bytes = int(device), int(size)
        except ValueError:
            raise ValueError(f"--cuda-memory-pool-byte-size expects <GPU device ID>:<pool byte "
                             f"size>, got '{value}'") from None
        if device_id < 0 or size_bytes < 0:
            raise ValueError(f"--cuda-memory-pool-byte-size '{value}': the GPU device ID and the "
                             "size must be >= 0")
        sizes[device_id] = size_bytes
    return sizes


class DeviceMemory:
    """The server's CUDA memory pools, one per GPU. ``sizes``: pool bytes by
    GPU; other GPUs get ``default_bytes``."""

    def __init__(self, sizes: dict[int, int] | None = None,
                 default_bytes: int = DEFAULT_CUDA_POOL_BYTES):
        self.sizes = dict(sizes or {})
        self.default_bytes = default_bytes
        self._pools: dict[int, CudaMemoryPool] = {}
        self._lock = threading.Lock()

    def pool_bytes(self, device: int) -> int:
        return self.sizes.get(device, self.default_bytes)

    def pool(self, device: int) -> CudaMemoryPool:
        """The pool of GPU ``device``; raises ServerError (UNAVAILABLE without
        CUDA, INVALID_ARG for a GPU that does not exist)."""
        pool = self._pools.get(device)
        if pool is None:
            with self._lock:
                pool = self._pools.get(device)
                if pool is None:
                    pool = self._pools[device] = CudaMemoryPool(device, self.pool_bytes(device))
        return pool

    def unusable_sizes(self) -> list[str]:
        """Why each configured size cannot take effect on this machine (no
        CUDA, or a GPU that is not there), for the startup log."""
        if not self.sizes:
            return []
        info = cuda_runtime_info()
        if not info["available"]:
            return [f"--cuda-memory-pool-byte-size has no effect: {info['reason']}"]
        return [f"--cuda-memory-pool-byte-size {device}:{size}: there is no GPU {device} "
                f"({info['device_count']} visible)"
                for device, size in sorted(self.sizes.items()) if device >= info["device_count"]]

    def stats(self) -> dict[int, dict]:
        """Each created pool's stats, by GPU."""
        return {device: pool.stats() for device, pool in sorted(self._pools.items())}

    def trim(self) -> None:
        for pool in list(self._pools.values()):
            pool.trim()
