"""Framework backends served end to end: ONNX Runtime (add_sub and an MLP
built with onnx.helper) and PyTorch (TorchScript models scripted here on the
CPU), each checked over HTTP and gRPC with tritonclient, with dynamic
batching on and off and with two instances; then the datatypes, shapes and
naming conventions each backend handles, and how they fail."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.testing import mlp_reference, mlp_weights, write_add_sub, write_mlp

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'pyserver[torch]')")

DYNAMIC = "dynamic_batching { max_queue_delay_microseconds: 20000 }"


@pytest.fixture
def serve(start_server):
    """serve(repo, **server_kwargs): a RunningServer with HTTP and gRPC."""
    started = []

    def start(repo, **kwargs):
        s = start_server(repo, **kwargs)
        s.grpc = GrpcFrontend(s.server, "127.0.0.1", 0)
        s.call(s.grpc.start())
        s.grpc_url = f"127.0.0.1:{s.grpc.port}"
        started.append(s)
        return s

    yield start
    for s in started:
        s.call(s.grpc.stop(5))


# ---------------------------------------------------------------- models


class TorchAddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a + b, a - b


class TorchMLP(torch.nn.Module):
    def __init__(self, weights):
        super().__init__()
        self.l1 = torch.nn.Linear(*weights["w1"].shape)
        self.l2 = torch.nn.Linear(*weights["w2"].shape)
        with torch.no_grad():
            self.l1.weight.copy_(torch.from_numpy(weights["w1"].T.copy()))
            self.l1.bias.copy_(torch.from_numpy(weights["b1"]))
            self.l2.weight.copy_(torch.from_numpy(weights["w2"].T.copy()))
            self.l2.bias.copy_(torch.from_numpy(weights["b2"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


def write_torch(repo, name, module, config_body, max_batch_size=8, instances=1, extra=""):
    """A pytorch_libtorch model folder with the module scripted to model.pt."""
    d = repo / name
    (d / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(d / "1" / "model.pt"))
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: {max_batch_size}\n'
        f"{config_body}\ninstance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n{extra}\n")
    return d


ADD_SUB_TORCH_IO = """
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 16 ] } ]"""

MLP_TORCH_IO = """
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] } ]"""


def add_sub_case(in0="INPUT0", in1="INPUT1", out0="OUTPUT0", out1="OUTPUT1"):
    def make(i):
        rng = np.random.default_rng(i)
        a = rng.standard_normal((1 + i % 3, 16)).astype(np.float32)
        b = rng.standard_normal((1 + i % 3, 16)).astype(np.float32)
        return {in0: a, in1: b}, {out0: a + b, out1: a - b}
    return make


def mlp_case(weights, inp="INPUT0", out="OUTPUT0"):
    def make(i):
        x = np.random.default_rng(i).standard_normal((1 + i % 4, 64)).astype(np.float32)
        return {inp: x}, {out: mlp_reference(x, weights)}
    return make


def build(kind, repo, name, batching, instances):
    extra = DYNAMIC if batching else ""
    if kind == "onnx_add_sub":
        write_add_sub(repo, name=name, instances=instances, extra=extra)
        return add_sub_case()
    if kind == "onnx_mlp":
        weights = write_mlp(repo, name=name, instances=instances, extra=extra)
        return mlp_case(weights)
    if kind == "torch_add_sub":
        write_torch(repo, name, TorchAddSub(), ADD_SUB_TORCH_IO, instances=instances, extra=extra)
        return add_sub_case("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__1")
    weights = mlp_weights()
    write_torch(repo, name, TorchMLP(weights), MLP_TORCH_IO, max_batch_size=64,
                instances=instances, extra=extra)
    return mlp_case(weights, "INPUT__0", "OUTPUT__0")


def infer(s, protocol, model, inputs, outputs=None):
    """One request; returns {output name: array} and closes its client."""
    module = httpclient if protocol == "http" else grpcclient
    url = s.url if protocol == "http" else s.grpc_url
    client = module.InferenceServerClient(url)
    try:
        tensors = []
        for name, value in inputs.items():
            datatype = "BYTES" if value.dtype == np.object_ else \
                {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16",
                 np.dtype(np.int8): "INT8", np.dtype(np.uint8): "UINT8", np.dtype(np.bool_): "BOOL",
                 np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64"}[value.dtype]
            t = module.InferInput(name, list(value.shape), datatype)
            t.set_data_from_numpy(value)
            tensors.append(t)
        requested = [module.InferRequestedOutput(n) for n in outputs] if outputs else None
        result = client.infer(model, tensors, outputs=requested)
        names = outputs or [o["name"] for o in (result.get_response()["outputs"]
                                                if protocol == "http" else
                                                result.get_response(as_json=True)["outputs"])]
        return {n: result.as_numpy(n) for n in names}
    finally:
        client.close()


# ---------------------------------------------------------------- the matrix


@pytest.mark.parametrize("instances", [1, 2])
@pytest.mark.parametrize("batching", [True, False], ids=["dynamic", "no_batching"])
@pytest.mark.parametrize("kind", ["onnx_add_sub", "onnx_mlp", "torch_add_sub", "torch_mlp"])
def test_backend_outputs_over_http_and_grpc(tmp_path, serve, kind, batching, instances):
    make = build(kind, tmp_path, "m", batching, instances)
    s = serve(tmp_path)
    version = s.server.models.resolve("m", "")
    assert len(version.instances) == instances
    assert len({id(i.backend) for i in version.instances}) == instances

    def one(i):
        inputs, expected = make(i)
        got = infer(s, "http" if i % 2 else "grpc", "m", inputs, list(expected))
        for name, want in expected.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
            assert got[name].dtype == want.dtype
        return i

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(32))) == list(range(32))
    stats = s.run(s.server.model_statistics, "m")
    assert stats["inference_stats"]["success"]["count"] == 32
    if batching:  # 8 clients and a 20 ms window: some requests ran together
        assert stats["execution_count"] < 32
    else:
        assert stats["execution_count"] == 32
