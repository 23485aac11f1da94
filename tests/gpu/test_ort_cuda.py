"""ONNX Runtime on the GPU: the MLP on CUDA execution provider instances
(KIND_GPU), and with the TensorRT execution provider asked for through
optimization.execution_accelerators."""

import onnxruntime as ort
import pytest

from pyserver.testing import write_mlp
from tests.gpu.conftest import check_mlp, visible_gpus

if "CUDAExecutionProvider" not in ort.get_available_providers():
    pytest.skip("this onnxruntime has no CUDA execution provider (install onnxruntime-gpu in "
                "place of onnxruntime)", allow_module_level=True)
if visible_gpus() == 0:
    pytest.skip("no NVIDIA GPU is visible", allow_module_level=True)

def gpu_config(repo, name, count=2):
    """The model's KIND_CPU instances made KIND_GPU (write_mlp writes CPU ones)."""
    path = repo / name / "config.pbtxt"
    cpu = f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]"
    assert cpu in path.read_text()
    path.write_text(path.read_text().replace(cpu, cpu.replace("KIND_CPU", "KIND_GPU")))


@pytest.mark.parametrize("batching", [True, False], ids=["dynamic", "no_batching"])
def test_ort_cuda_ep(tmp_path, serve, batching):
    weights = write_mlp(tmp_path, name="mlp_cuda", instances=2,
                        extra="dynamic_batching { max_queue_delay_microseconds: 20000 }" if batching else "")
    gpu_config(tmp_path, "mlp_cuda")
    s = serve(tmp_path)
    for instance in s.server.models.resolve("mlp_cuda", "").instances:
        assert instance.backend.providers[0] == "CUDAExecutionProvider"
    check_mlp(s, "mlp_cuda", weights, rtol=1e-2, atol=1e-2)  # cuBLAS may use TF32


def test_ort_tensorrt_ep(tmp_path, serve):
    if "TensorrtExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime has no TensorRT execution provider")
    weights = write_mlp(tmp_path, name="mlp_ort_trt", instances=1, extra="""
optimization { execution_accelerators { gpu_execution_accelerator : [ {
    name : "tensorrt"
    parameters { key: "precision_mode" value: "FP16" }
    parameters { key: "max_workspace_size_bytes" value: "1073741824" }
    parameters { key: "trt_profile_min_shapes" value: "INPUT0:1x64" }
    parameters { key: "trt_profile_opt_shapes" value: "INPUT0:8x64" }
    parameters { key: "trt_profile_max_shapes" value: "INPUT0:64x64" } } ] } }""")
    gpu_config(tmp_path, "mlp_ort_trt", count=1)  # Triton reads the accelerators on GPU only
    s = serve(tmp_path)
    backend = s.server.models.resolve("mlp_ort_trt", "").instances[0].backend
    assert backend.providers[:2] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    check_mlp(s, "mlp_ort_trt", weights, rtol=2e-2, atol=2e-2)  # FP16 inside
