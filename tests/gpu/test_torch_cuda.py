"""TorchScript on the GPU: a KIND_GPU PyTorch model runs its instances on
CUDA (inputs moved to the instance's device, outputs back to the host)."""

import pytest

from pyserver.testing import mlp_weights
from tests.gpu.conftest import check_mlp, no_gpu

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'pyserver[torch]')")
if torch.version.cuda is None:
    pytest.skip("this torch is a CPU build", allow_module_level=True)
if not torch.cuda.is_available():
    no_gpu("torch sees no CUDA device")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


@pytest.mark.parametrize("batching", [True, False], ids=["dynamic", "no_batching"])
def test_torch_cuda_mlp(tmp_path, serve, batching):
    from tests.integration.test_backends import MLP_TORCH_IO, TorchMLP, write_torch

    weights = mlp_weights()
    d = write_torch(tmp_path, "mlp_torch_gpu", TorchMLP(weights), MLP_TORCH_IO, max_batch_size=64,
                    instances=2,
                    extra="dynamic_batching { max_queue_delay_microseconds: 20000 }" if batching else "")
    (d / "config.pbtxt").write_text((d / "config.pbtxt").read_text().replace("KIND_CPU", "KIND_GPU"))
    s = serve(tmp_path)
    for instance in s.server.models.resolve("mlp_torch_gpu", "").instances:
        assert instance.backend.device.type == "cuda"
    check_mlp(s, "mlp_torch_gpu", weights, input_name="INPUT__0", output_name="OUTPUT__0")
