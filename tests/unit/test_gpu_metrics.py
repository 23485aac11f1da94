"""GPU metrics from NVML (pyserver/frontends/metrics/gpu.py), read through a stand-in
libnvidia-ml compiled here from tests/unit/fake_nvml.c: Triton's families and
texts, GPUs matched by PCI bus ID, energy counted from the start, a reading
NVML refuses reported as 0, and nothing at all without NVML or a GPU."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from pyserver.frontends.metrics import EngineCollector, MetricsConfig, exposition
from pyserver.frontends.metrics.gpu import GpuSampler

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _compile(tmp_path_factory, source: Path, name: str) -> str:
    cc = shutil.which("g++" if source.suffix == ".cc" else "gcc") or shutil.which("c++")
    if cc is None:
        pytest.skip("no compiler to build the stand-in library")
    out = tmp_path_factory.mktemp(name) / f"lib{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(source)], check=True)
    return str(out)


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    return _compile(tmp_path_factory, HERE / "fake_nvml.c", "fake_nvml")


class NoServer:
    def loaded_versions(self):
        return []


def test_triton_families_per_gpu(fake_nvml):
    now = [0.0]
    sampler = GpuSampler(2.0, fake_nvml, ["0000:01:00.0", "0000:02:00.0"], clock=lambda: now[0])
    assert [g.uuid for g in sampler.gpus] == ["GPU-fake-0", "GPU-fake-1"]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(NoServer(), MetricsConfig(allow_cpu_metrics=False),
                                      gpus=sampler))
    text = exposition(registry).decode()
    gpu_part = text[text.index("# HELP nv_gpu_utilization"):]
    assert gpu_part == """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-fake-0"} 0.4
nv_gpu_utilization{gpu_uuid="GPU-fake-1"} 0.41
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-fake-0"} 85899345920
nv_gpu_memory_total_bytes{gpu_uuid="GPU-fake-1"} 85899345920
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-fake-0"} 1073741824
nv_gpu_memory_used_bytes{gpu_uuid="GPU-fake-1"} 2147483648
# HELP nv_gpu_power_usage GPU power usage in watts
# TYPE nv_gpu_power_usage gauge
nv_gpu_power_usage{gpu_uuid="GPU-fake-0"} 150.5
nv_gpu_power_usage{gpu_uuid="GPU-fake-1"} 151.5
# HELP nv_gpu_power_limit GPU power management limit in watts
# TYPE nv_gpu_power_limit gauge
nv_gpu_power_limit{gpu_uuid="GPU-fake-0"} 700
nv_gpu_power_limit{gpu_uuid="GPU-fake-1"} 700
# HELP nv_energy_consumption GPU energy consumption in joules since the Triton Server started
# TYPE nv_energy_consumption counter
nv_energy_consumption{gpu_uuid="GPU-fake-0"} 0
nv_energy_consumption{gpu_uuid="GPU-fake-1"} 0
"""
    # Read again only once the interval has passed: 1500 mJ more each read.
    assert exposition(registry).decode() == text
    now[0] = 2.5
    after = exposition(registry).decode()
    assert 'nv_energy_consumption{gpu_uuid="GPU-fake-0"} 1.5' in after.splitlines()


def test_readings_nvml_refuses_are_zero_with_one_warning(fake_nvml, monkeypatch, caplog):
    monkeypatch.setenv("FAKE_NVML_FAIL_POWER", "1")
    sampler = GpuSampler(0.0, fake_nvml, ["0000:01:00.0", "0000:09:00.0"])
    assert [g.uuid for g in sampler.gpus] == ["GPU-fake-0"]  # bus 9 is not NVML's
    assert "NVML does not find bus 0000:09:00.0 (Not Found)" in caplog.text
    for _ in range(3):
        families = {name: samples for name, _, samples in sampler.families()}
    assert families["nv_gpu_power_usage"] == [({"gpu_uuid": "GPU-fake-0"}, 0.0)]
    assert families["nv_gpu_power_limit"] == [({"gpu_uuid": "GPU-fake-0"}, 700.0)]
    warnings = [r for r in caplog.records if "Unable to get nv_gpu_power_usage" in r.getMessage()]
    assert len(warnings) == 1 and "Not Supported" in warnings[0].getMessage()


def test_nothing_without_nvml_or_a_gpu(fake_nvml):
    missing = GpuSampler(2.0, "/nonexistent/libnvidia-ml.so.1", ["0000:01:00.0"])
    assert missing.gpus == [] and missing.families() == []
    assert missing.reason.startswith("NVML (the driver's libnvidia-ml) could not be loaded")
    none = GpuSampler(2.0, fake_nvml, [])
    assert none.gpus == [] and none.reason == "no GPU is visible to CUDA"


def test_cuda_visible_gpus_found_by_pci_bus_id(fake_nvml, tmp_path_factory):
    """In a process whose libcudart is the stand-in with two devices: the
    sampler asks CUDA for their bus IDs and finds both in NVML."""
    fake_cudart = _compile(tmp_path_factory, ROOT / "csrc/tests/fake_cudart.cc", "fake_cudart")
    libdir = tmp_path_factory.mktemp("cudalib")
    (libdir / "libcudart.so").symlink_to(fake_cudart)
    code = f"""
from pyserver.frontends.metrics.gpu import GpuSampler
sampler = GpuSampler(2.0, {fake_nvml!r})
print(",".join(g.bus_id + "=" + g.uuid for g in sampler.gpus))
"""
    env = dict(os.environ, FAKE_CUDART_DEVICES="2",
               LD_LIBRARY_PATH=f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0000:01:00.0=GPU-fake-0,0000:02:00.0=GPU-fake-1"
