"""On a real GPU: the per-GPU CUDA memory pool (cudaMalloc'd blocks reused,
the caller's device left as it was) and the NVML-backed GPU metrics."""

import pytest

from tests.gpu.conftest import no_gpu, visible_gpus

if visible_gpus() == 0:
    pytest.skip("no CUDA runtime or GPU visible", allow_module_level=True)


def test_backend_cuda_facade_on_the_real_runtime():
    """What the stand-in runtime checks in tests/unit/test_host_memory.py,
    on the GPU: the stream pool, device buffers, pinned staging, the copy
    round trip and synchronize, and the errors for a GPU that is not there."""
    import os

    from tests.unit.test_host_memory import run_cuda_facade

    run_cuda_facade(visible_gpus(), dict(os.environ))


def test_cuda_memory_pool_on_the_device():
    from pyserver.runtime.device_memory import DeviceMemory

    memory = DeviceMemory({0: 1 << 20})
    pool = memory.pool(0)
    block = pool.allocate(3000)
    assert block.ptr and block.device == 0 and block.pooled
    first = block.ptr
    block.close()
    again = pool.allocate(4000)
    assert again.ptr == first  # the cached block, no second cudaMalloc
    big = pool.allocate(4 << 20)  # past the pool: plain cudaMalloc
    assert not big.pooled and big.ptr
    stats = memory.stats()[0]
    assert stats["reuses"] == 1 and stats["unpooled"] == 1
    del again, big
    memory.trim()
    assert memory.stats()[0]["cached_bytes"] == 0


def test_gpu_metrics_from_nvml():
    from pyserver.frontends.metrics.gpu import GpuSampler

    sampler = GpuSampler(0.0)
    if not sampler.gpus:
        no_gpu(f"NVML gives no GPU metrics: {sampler.reason}")
    families = {name: samples for name, _, samples in sampler.families()}
    assert len(families["nv_gpu_memory_total_bytes"]) == visible_gpus()
    for labels, total in families["nv_gpu_memory_total_bytes"]:
        assert labels["gpu_uuid"].startswith(("GPU-", "MIG-")) and total > 0
    for _, util in families["nv_gpu_utilization"]:
        assert 0.0 <= util <= 1.0
    for _, limit in families["nv_gpu_power_limit"]:
        assert limit >= 0.0
