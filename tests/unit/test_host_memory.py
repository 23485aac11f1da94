"""csrc's memory pools and CUDA loader through pyserver.engine.memory,
pyserver.runtime.host_memory and pyserver.runtime.device_memory: plain memory
without CUDA, page-locked and device memory accounting with a CUDA runtime
(a stand-in libcudart compiled here from csrc/tests/fake_cudart.cc), blocks
returned when the last view goes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyserver.engine import memory
from pyserver.kernel.errors import Code, ServerError
from pyserver.runtime.device_memory import DeviceMemory, parse_cuda_memory_pool_sizes
from pyserver.runtime.host_memory import HostMemory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fake_cudart(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the stand-in libcudart")
    out = tmp_path_factory.mktemp("cudart") / "libcudart_fake.so"
    subprocess.run([cxx, "-std=c++17", "-shared", "-fPIC", "-O1", "-o", str(out),
                    str(ROOT / "csrc/tests/fake_cudart.cc")], check=True)
    return str(out)


def test_cuda_runtime_info_says_why_not():
    info = memory.cuda_runtime_info("/nonexistent/libcudart.so.99")
    assert info["available"] is False and info["device_count"] == 0
    assert "could not be loaded" in info["reason"] and "libcudart.so.99" in info["reason"]


def test_cuda_runtime_info_from_a_runtime(fake_cudart):
    info = memory.cuda_runtime_info(fake_cudart)
    assert info == {"available": True, "reason": "", "library": fake_cudart, "device_count": 1}


def test_plain_memory_without_cuda():
    host = HostMemory(1 << 20, use_cuda=False)
    assert host.pinned is False
    assert host.gauges() == (0, 0)  # Triton reports no pinned pool without a GPU
    a = host.empty((4, 16), np.float32)
    assert a.shape == (4, 16) and a.dtype == np.float32 and a.flags.writeable
    assert a.ctypes.data % 4096 == 0
    a[:] = 7
    assert host.stats()["in_use_bytes"] == 4096
    view = a[1:]
    del a
    assert host.stats()["in_use_bytes"] == 4096  # the view keeps the block
    assert float(view.sum()) == 7 * 48
    del view
    stats = host.stats()
    assert stats["in_use_bytes"] == 0 and stats["cached_bytes"] == 4096
    b = host.empty((1000,), np.int64)  # 8000 bytes: an 8 KiB block, newly allocated
    c = host.empty((10,), np.uint8)  # 4 KiB class: the cached block
    assert host.stats()["reuses"] == 1
    del b, c
    host.trim()
    assert host.stats()["cached_bytes"] == 0


def test_past_capacity_is_plain_unpooled_memory():
    host = HostMemory(8192, use_cuda=False)
    big = host.empty((1 << 16,), np.float32)  # 256 KiB > the pool
    big[:] = 1
    assert host.stats()["unpooled"] == 1 and host.stats()["in_use_bytes"] == 0
    del big
    assert host.stats()["cached_bytes"] == 0
    with pytest.raises(ValueError, match=">= 0"):
        HostMemory(-1)


def test_pinned_with_a_cuda_runtime(fake_cudart):
    pool = memory.PinnedMemoryPool(1 << 20, True, fake_cudart)
    assert pool.pinned is True
    buf = pool.allocate(10000)
    assert buf.pinned and buf.nbytes == 10000 and len(buf) == 10000
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr[:] = 5
    assert pool.stats()["in_use_bytes"] == 16384
    del buf, arr
    assert pool.stats()["in_use_bytes"] == 0


def test_stream_pool_needs_a_device():
    info = memory.cuda_runtime_info()
    if info["available"]:
        pytest.skip("a CUDA device is present: tests/gpu/test_gpu_memory_and_metrics.py "
                    "runs the stream pool on it")
    with pytest.raises(ServerError) as exc:
        memory.CudaStreamPool(0, 2)
    assert exc.value.code == Code.UNAVAILABLE
    assert str(exc.value) == info["reason"] or info["reason"] in str(exc.value)


# The TensorRT backend's CUDA facade end to end, run in a fresh process (the
# runtime is loaded once per process): on the stand-in libcudart here, on the
# real one in tests/gpu. EXPECTED_GPUS: the devices it must see.
CUDA_FACADE_SCRIPT = r'''
import os
import numpy as np
from pyserver.backends import _cuda
from pyserver.runtime.host_memory import HostMemory
from pyserver.engine.memory import CudaStreamPool, cuda_runtime_info

n = int(os.environ["EXPECTED_GPUS"])
assert cuda_runtime_info()["available"], cuda_runtime_info()
assert _cuda.device_count() == n, (_cuda.device_count(), n)
_cuda.set_device(0)
streams = CudaStreamPool(0, 2)
stream = streams.next()
host = HostMemory(1 << 20)
assert host.pinned
src = host.empty((4, 16), np.float32)
src[:] = np.arange(64, dtype=np.float32).reshape(4, 16)
from pyserver.runtime.device_memory import DeviceMemory
device_memory = DeviceMemory({0: 1 << 20})
buf = _cuda.DeviceBuffer(device_memory.pool(0))
ptr = buf.reserve(src.nbytes)
assert device_memory.stats()[0]["in_use_bytes"] == 4096
_cuda.copy_to_device(ptr, src, stream)
back = host.empty((4, 16), np.float32)
_cuda.copy_to_host(back, ptr, stream)
_cuda.synchronize(stream)
assert (back == src).all()
total, used = host.gauges()
assert total == 1 << 20 and used == 2 * 4096, (total, used)
buf.close()
assert device_memory.stats()[0]["in_use_bytes"] == 0
del src, back
assert host.gauges() == (1 << 20, 0)
assert device_memory.unusable_sizes() == []
assert DeviceMemory({0: 1, n + 1: 5}).unusable_sizes() == [
    f"--cuda-memory-pool-byte-size {n + 1}:5: there is no GPU {n + 1} ({n} visible)"]
try:
    _cuda.set_device(n + 2)
except _cuda.CudaError as err:
    assert f"CUDA device {n + 2} does not exist ({n} visible)" in str(err)
else:
    raise AssertionError("set_device should fail")
print("ok")
'''


def run_cuda_facade(expected_gpus: int, env: dict) -> None:
    env = dict(env, EXPECTED_GPUS=str(expected_gpus))
    out = subprocess.run([sys.executable, "-c", CUDA_FACADE_SCRIPT], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_backend_cuda_facade_on_a_stand_in_runtime(fake_cudart, tmp_path):
    """In a fresh process whose libcudart is the stand-in: the TensorRT
    backend's CUDA facade (device memory, copies on a pool stream, sync),
    the pinned pool and Triton's pinned gauges all run through csrc."""
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libcudart.so").symlink_to(fake_cudart)
    run_cuda_facade(1, dict(os.environ, LD_LIBRARY_PATH=f"{libdir}:"
                                                        f"{os.environ.get('LD_LIBRARY_PATH', '')}"))


def test_cuda_memory_pool_reuses_device_blocks(fake_cudart):
    pool = memory.CudaMemoryPool(0, 1 << 20, fake_cudart)
    assert pool.device == 0
    block = pool.allocate(1000)
    assert block.ptr and block.device == 0 and block.pooled
    assert block.nbytes == 1000 and block.capacity == 4096
    first = block.ptr
    block.close()
    assert block.ptr == 0
    block.close()  # twice is harmless
    again = pool.allocate(900)
    assert again.ptr == first  # the cached block, no second cudaMalloc
    over = pool.allocate(2 << 20)
    assert not over.pooled and over.device == 0  # past the pool's size: plain cudaMalloc
    stats = pool.stats()
    assert (stats["reuses"], stats["allocations"], stats["unpooled"]) == (1, 1, 1)
    assert stats["in_use_bytes"] == 4096 and stats["device"] == 0 and not stats["pinned"]
    del again, over  # collected blocks go back as well
    assert pool.stats()["in_use_bytes"] == 0 and pool.stats()["cached_bytes"] == 4096
    pool.trim()
    assert pool.stats()["cached_bytes"] == 0


def test_device_buffer_grows_within_and_past_its_size_class(fake_cudart):
    from pyserver.backends._cuda import DeviceBuffer
    pool = memory.CudaMemoryPool(0, 1 << 20, fake_cudart)
    buf = DeviceBuffer(pool)
    p = buf.reserve(100)
    assert buf.reserve(4000) == p  # still within the 4 KiB block
    buf.reserve(10000)
    stats = pool.stats()
    assert stats["in_use_bytes"] == 16384 and stats["cached_bytes"] == 4096
    buf.close()
    assert buf.ptr == 0 and pool.stats()["in_use_bytes"] == 0


def test_cuda_memory_pool_needs_cuda_and_the_gpu(fake_cudart):
    with pytest.raises(ServerError) as exc:
        memory.CudaMemoryPool(2, 1 << 20, fake_cudart)
    assert exc.value.code == Code.INVALID_ARG
    assert "CUDA device 2 does not exist (1 visible)" in str(exc.value)
    with pytest.raises(ServerError) as exc:
        memory.CudaMemoryPool(0, 1 << 20, "/nonexistent/libcudart.so.99")
    assert exc.value.code == Code.UNAVAILABLE and "could not be loaded" in str(exc.value)


def test_cuda_memory_pool_sizes_from_the_command_line():
    assert parse_cuda_memory_pool_sizes([]) == {}
    # repeatable; a later value for the same GPU wins, as in Triton
    assert parse_cuda_memory_pool_sizes(["0:1024", "1:0", "0:2048"]) == {0: 2048, 1: 0}
    for bad in ("64MB", "0", "a:1", "0:1.5", "-1:5", "0:-5"):
        with pytest.raises(ValueError, match="cuda-memory-pool-byte-size"):
            parse_cuda_memory_pool_sizes([bad])
    sizes = DeviceMemory({1: 1 << 20})
    assert sizes.pool_bytes(1) == 1 << 20 and sizes.pool_bytes(0) == 64 << 20
    info = memory.cuda_runtime_info()
    if not info["available"]:  # this process's runtime: the reason is said once
        assert DeviceMemory({0: 5}).unusable_sizes() == [
            f"--cuda-memory-pool-byte-size has no effect: {info['reason']}"]
        with pytest.raises(ServerError) as exc:
            sizes.pool(0)
        assert exc.value.code == Code.UNAVAILABLE
    assert DeviceMemory().unusable_sizes() == []  # nothing asked, nothing to say



def test_the_backend_memory_manager_takes_only_pools_over_the_process_runtime(fake_cudart):
    """Triton C backends' memory manager draws on the server's pools; a pool
    over a runtime of its own (which dies with the Python object) is refused."""
    from pyserver.engine import triton_c

    with pytest.raises(ValueError, match="process's CUDA runtime"):
        triton_c.use_pinned_pool(memory.PinnedMemoryPool(4096, True, fake_cudart))
    with pytest.raises(ValueError, match="process's CUDA runtime"):
        triton_c.use_device_pool(0, memory.CudaMemoryPool(0, 4096, fake_cudart))
    pool = memory.PinnedMemoryPool(4096)
    triton_c.use_pinned_pool(pool)
    del pool  # the manager keeps its share: nothing dangles
    triton_c.use_pinned_pool(HostMemory(4096).pool)
