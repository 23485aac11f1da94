"""Host memory for batch tensors that go to a GPU: numpy arrays over blocks of
csrc's pinned memory pool (``pyserver.engine.memory``).

With a usable CUDA device the blocks are page-locked, so a backend's copy to
the device is a DMA at full bus speed; without one the pool hands out plain
page-aligned memory and reports itself unpinned, as Triton reports a pinned
pool of 0 bytes on a machine without a GPU. ``--pinned-memory-pool-byte-size``
(Triton's default 256 MiB) bounds the pooled bytes; allocations beyond it are
served with plain memory instead of failing.
"""

from __future__ import annotations

import glob
import os
import sys

import numpy as np

from pyserver.engine.memory import PinnedMemoryPool, cuda_add_search_paths

__all__ = ["DEFAULT_PINNED_POOL_BYTES", "HostMemory"]

DEFAULT_PINNED_POOL_BYTES = 268435456


def _wheel_cuda_runtimes() -> list[str]:
    """libcudart files that NVIDIA's wheels (nvidia-cuda-runtime-cu12 and
    friends, which torch, tensorrt and onnxruntime-gpu bring along) install,
    newest first."""
    found = []
    for base in sys.path:
        for pattern in ("nvidia/cu13/lib/libcudart.so*", "nvidia/cuda_runtime/lib/libcudart.so*",
                        "nvidia/cu12/lib/libcudart.so*"):
            found.extend(sorted(glob.glob(os.path.join(base, pattern)), reverse=True))
    return found


# Before anything in the process loads CUDA: after the system's libcudart,
# csrc tries the wheels' copies.
cuda_add_search_paths(_wheel_cuda_runtimes())


class HostMemory:
    """The server's pinned pool. ``empty(shape, dtype)`` returns an array
    whose block goes back to the pool when the array (and every view of it)
    is gone."""

    def __init__(self, pool_bytes: int = DEFAULT_PINNED_POOL_BYTES, use_cuda: bool = True):
        if pool_bytes < 0:
            raise ValueError(f"the pinned memory pool size must be >= 0, not {pool_bytes}")
        self._pool = PinnedMemoryPool(pool_bytes, use_cuda)
        self.pool_bytes = pool_bytes

    @property
    def pool(self) -> PinnedMemoryPool:
        """The engine's pool (what a Triton C backend's memory manager draws on)."""
        return self._pool

    @property
    def pinned(self) -> bool:
        """True when blocks are page-locked (a CUDA device is usable)."""
        return self._pool.pinned

    def empty(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = 1
        for d in shape:
            count *= int(d)
        block = self._pool.allocate(count * dtype.itemsize)
        return np.frombuffer(block, dtype=dtype, count=count).reshape(shape)

    def gauges(self) -> tuple[int, int]:
        """(total, used) bytes of pinned memory, for Triton's
        nv_pinned_memory_pool_* gauges: both 0 when nothing can be pinned."""
        if not self._pool.pinned:
            return 0, 0
        stats = self._pool.stats()
        return stats["capacity"], stats["in_use_bytes"]

    def stats(self) -> dict:
        return self._pool.stats()

    def trim(self) -> None:
        self._pool.trim()
