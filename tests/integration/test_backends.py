"""Framework backends served end to end: ONNX Runtime (add_sub and an MLP
built with onnx.helper) and PyTorch (TorchScript models scripted here on the
CPU), each checked over HTTP and gRPC with tritonclient, with dynamic
batching on and off and with two instances; then the datatypes, shapes and
naming conventions each backend handles, and how they fail."""

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.testing import mlp_reference, mlp_weights, write_add_sub, write_mlp

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'pyserver[torch]')")

# torch.jit.script/load are deprecated in favour of torch.export, yet they are
# what builds and loads the TorchScript files Triton's pytorch backend serves.
# Request tensors reach torch as read-only views (no copy), as the backend
# intends; torch warns about that once.
pytestmark = [pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")]

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


WIRE = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.int8): "INT8",
        np.dtype(np.uint8): "UINT8", np.dtype(np.bool_): "BOOL", np.dtype(np.int32): "INT32",
        np.dtype(np.int64): "INT64", np.dtype(np.object_): "BYTES"}


def infer(s, protocol, model, inputs, outputs=None):
    """One request; returns {output name: array} and closes its client.
    An input given as (array, datatype) is sent as that datatype (BF16 from
    float32, as tritonclient does it)."""
    module = httpclient if protocol == "http" else grpcclient
    url = s.url if protocol == "http" else s.grpc_url
    client = module.InferenceServerClient(url)
    try:
        tensors = []
        for name, value in inputs.items():
            value, datatype = value if isinstance(value, tuple) else (value, WIRE[value.dtype])
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


# ---------------------------------------------------------------- PyTorch


def expect_error(fn, http_status, text):
    with pytest.raises(InferenceServerException) as err:
        fn()
    assert text in err.value.message(), err.value.message()
    if http_status is not None:
        assert err.value.status() == str(http_status)
    return err.value


class NamedArgs(torch.nn.Module):
    def forward(self, left: torch.Tensor, right: torch.Tensor):
        return left * 10 + right, left.to(torch.int32)


class DictInput(torch.nn.Module):
    def forward(self, d: Dict[str, torch.Tensor]) -> torch.Tensor:
        return d["x"] * 2 + d["y"]


class Strings(torch.nn.Module):
    def forward(self, words: List[str]) -> List[str]:
        return [w.upper() for w in words]


class DictOutput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"y": x}


def test_torch_forward_argument_names_and_config_order_outputs(tmp_path, serve):
    # Inputs named after forward()'s arguments (declared in another order);
    # outputs without __<index> follow the config's order.
    write_torch(tmp_path, "named", NamedArgs(), """
input [ { name: "right" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "left" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "combined" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "as_int" data_type: TYPE_INT32 dims: [ 3 ] } ]""")
    s = serve(tmp_path)
    left = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    right = np.array([[0.5, 0.25, 0], [1, 1, 1]], np.float32)
    for protocol in ("http", "grpc"):
        got = infer(s, protocol, "named", {"right": right, "left": left}, ["combined", "as_int"])
        np.testing.assert_array_equal(got["combined"], left * 10 + right)
        np.testing.assert_array_equal(got["as_int"], left.astype(np.int32))


def test_torch_dict_input_and_string_lists(tmp_path, serve):
    write_torch(tmp_path, "dict_in", DictInput(), """
input [ { name: "y" data_type: TYPE_INT64 dims: [ 2 ] },
        { name: "x" data_type: TYPE_INT64 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT64 dims: [ 2 ] } ]""")
    write_torch(tmp_path, "strings", Strings(), """
input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]""", max_batch_size=0)
    s = serve(tmp_path)
    x = np.array([[1, 2]], np.int64)
    y = np.array([[10, 20]], np.int64)
    words = np.array([b"triton", b"py", "\u00e9t\u00e9".encode()], dtype=np.object_)
    for protocol in ("http", "grpc"):
        got = infer(s, protocol, "dict_in", {"x": x, "y": y})
        np.testing.assert_array_equal(got["OUTPUT__0"], x * 2 + y)
        got = infer(s, protocol, "strings", {"INPUT__0": words})
        # (TorchScript's upper() changes ASCII letters only)
        assert list(got["OUTPUT__0"]) == [b"TRITON", b"PY", "\u00e9T\u00e9".encode()]


def test_torch_output_rules_fail_the_request_with_tritons_text(tmp_path, serve):
    write_torch(tmp_path, "dict_out", DictOutput(), """
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]""")
    write_torch(tmp_path, "wrong_type", TorchAddSub(), ADD_SUB_TORCH_IO.replace(
        'name: "OUTPUT__1" data_type: TYPE_FP32', 'name: "OUTPUT__1" data_type: TYPE_INT32'))
    write_torch(tmp_path, "too_many", TorchAddSub(), ADD_SUB_TORCH_IO.replace(
        'name: "OUTPUT__1"', 'name: "OUTPUT__2"'))
    s = serve(tmp_path)
    a = np.ones((1, 2), np.float32)
    ab = {"INPUT__0": np.ones((1, 16), np.float32), "INPUT__1": np.ones((1, 16), np.float32)}
    for protocol in ("http", "grpc"):
        status = 500 if protocol == "http" else "StatusCode.INTERNAL"
        expect_error(lambda: infer(s, protocol, "dict_out", {"INPUT__0": a}), status,
                     "PyTorch execute failure: output must be of type Tensor, List[str] or Tuple "
                     "containing one of these two types. It should not be a List / Dictionary of "
                     "Tensors or a Scalar")
        status = 400 if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
        expect_error(lambda: infer(s, protocol, "wrong_type", ab), status,
                     "configuration expects datatype TYPE_INT32 for output 'OUTPUT__1', model "
                     "provides TYPE_FP32")
        expect_error(lambda: infer(s, protocol, "too_many", ab), status,
                     "The output OUTPUT__2 in the model configuration refers to an output index "
                     "which doesn't exist. This model has 2 outputs")
    # A failed request fails alone: the models stay ready.
    client = httpclient.InferenceServerClient(s.url)
    assert all(client.is_model_ready(m) for m in ("dict_out", "wrong_type", "too_many"))


def index_reasons(s):
    client = httpclient.InferenceServerClient(s.url)
    return {m["name"]: (m.get("state"), m.get("reason", "")) for m in
            client.get_model_repository_index()}


def test_torch_load_errors_keep_the_rest_serving(tmp_path, serve):
    write_torch(tmp_path, "inputs_mismatch", TorchAddSub(), """
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]""")
    gpu = write_torch(tmp_path, "on_gpu", TorchAddSub(), ADD_SUB_TORCH_IO)
    (gpu / "config.pbtxt").write_text((gpu / "config.pbtxt").read_text().replace("KIND_CPU", "KIND_GPU"))
    write_torch(tmp_path, "bf16", DictOutput(), """
input [ { name: "INPUT__0" data_type: TYPE_BF16 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]""")
    write_add_sub(tmp_path, name="fine")
    s = serve(tmp_path, exit_on_error=False)
    reasons = index_reasons(s)
    assert reasons["inputs_mismatch"][0] == "UNAVAILABLE"
    assert "unable to load model 'inputs_mismatch', configuration expects 1 inputs, model provides 2" \
        in reasons["inputs_mismatch"][1]
    assert "unsupported datatype TYPE_BF16 for input 'INPUT__0' for model 'bf16'" in reasons["bf16"][1]
    if not torch.cuda.is_available():
        assert "KIND_GPU but torch sees no CUDA device" in reasons["on_gpu"][1]
    assert reasons["fine"][0] == "READY"
    got = infer(s, "grpc", "fine", {"INPUT0": np.ones((1, 16), np.float32),
                                    "INPUT1": np.ones((1, 16), np.float32)}, ["OUTPUT0"])
    np.testing.assert_array_equal(got["OUTPUT0"], np.full((1, 16), 2, np.float32))


def test_model_pt_without_torch_fails_alone_with_its_reason(tmp_path, serve, monkeypatch):
    write_torch(tmp_path, "needs_torch", TorchAddSub(), ADD_SUB_TORCH_IO)
    write_add_sub(tmp_path, name="fine")
    # As if torch were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "pyserver.backends.pytorch", raising=False)
    s = serve(tmp_path, exit_on_error=False)
    state, reason = index_reasons(s)["needs_torch"]
    assert state == "UNAVAILABLE"
    assert "unable to load backend 'pytorch'" in reason
    assert "the PyTorch backend needs torch, which is not installed" in reason
    assert "pip install 'pyserver[torch]'" in reason
    assert index_reasons(s)["fine"][0] == "READY"
    got = infer(s, "http", "fine", {"INPUT0": np.ones((1, 16), np.float32),
                                    "INPUT1": np.ones((1, 16), np.float32)}, ["OUTPUT1"])
    np.testing.assert_array_equal(got["OUTPUT1"], np.zeros((1, 16), np.float32))


def test_torch_threads_shared_by_instances_unless_configured(tmp_path, serve):
    from pyserver.backends._common import compute_cores

    def threads_in_new_thread():
        # torch's intra-op count is per thread (OpenMP), taken from the
        # process-wide setting when a thread first uses torch, as an
        # instance thread does.
        seen = []
        t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        t.start()
        t.join()
        return seen[0]

    before = torch.get_num_threads()
    try:
        write_torch(tmp_path, "two", TorchAddSub(), ADD_SUB_TORCH_IO, instances=2)
        s = serve(tmp_path)
        backends = [i.backend for i in s.server.models.resolve("two", "").instances]
        assert [b.intra_threads for b in backends] == [max(1, compute_cores() // 2)] * 2
        assert threads_in_new_thread() == max(1, compute_cores() // 2)

        other = tmp_path / "other"
        other.mkdir()
        write_torch(other, "pinned", TorchAddSub(), ADD_SUB_TORCH_IO, instances=2, extra="""
parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "3" } }
parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }""")
        s2 = serve(other)
        backend = s2.server.models.resolve("pinned", "").instances[0].backend
        assert backend.intra_threads == 3 and threads_in_new_thread() == 3
        assert not backend.inference_mode and not backend.optimized_execution
        got = infer(s2, "http", "pinned", {"INPUT__0": np.ones((2, 16), np.float32),
                                           "INPUT__1": np.ones((2, 16), np.float32)})
        np.testing.assert_array_equal(got["OUTPUT__0"], np.full((2, 16), 2, np.float32))
    finally:
        torch.set_num_threads(before)


def test_torch_bad_parameter_value_fails_the_load(tmp_path, serve):
    write_torch(tmp_path, "bad_param", TorchAddSub(), ADD_SUB_TORCH_IO, extra="""
parameters { key: "INFERENCE_MODE" value: { string_value: "maybe" } }""")
    s = serve(tmp_path, exit_on_error=False)
    assert "failed to convert 'maybe' to boolean" in index_reasons(s)["bad_param"][1]


# ---------------------------------------------------------------- ONNX Runtime datatypes and shapes


def onnx_model(nodes, inputs, outputs, initializers=()):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_onnx(repo, name, blob, config_body, max_batch_size=8, extra=""):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(blob)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
        f"{config_body}\n{extra}\n")


def bf16_round(x):
    """float32 values as bfloat16 keeps them (truncated, as tritonclient sends them)."""
    return ((x.astype(np.float32).view(np.uint32) >> 16) << 16).view(np.float32)


def test_onnx_datatypes(tmp_path, serve):
    from onnx import TensorProto as T
    from onnx import helper

    nodes = [helper.make_node("Add", ["F16", "F16"], ["F16_OUT"]),
             helper.make_node("Cast", ["BF16"], ["bf_f"], to=T.FLOAT),
             helper.make_node("Add", ["bf_f", "bf_f"], ["bf_sum"]),
             helper.make_node("Cast", ["bf_sum"], ["BF16_OUT"], to=T.BFLOAT16),
             helper.make_node("Add", ["I8", "I8"], ["I8_OUT"]),
             helper.make_node("Add", ["U8", "U8"], ["U8_OUT"]),
             helper.make_node("Not", ["B"], ["B_OUT"])]
    spec = [("F16", T.FLOAT16, "TYPE_FP16", ["b", 4], "4"),
            ("BF16", T.BFLOAT16, "TYPE_BF16", ["b", 4], "4"),
            ("I8", T.INT8, "TYPE_INT8", ["b", 4], "4"),
            ("U8", T.UINT8, "TYPE_UINT8", ["b", 4], "4"),
            ("B", T.BOOL, "TYPE_BOOL", ["b", 4], "4")]
    blob = onnx_model(nodes, [(n, t, shape) for n, t, _, shape, _ in spec],
                      [(n + "_OUT", t, shape) for n, t, _, shape, _ in spec])
    io = lambda suffix: ", ".join(f'{{ name: "{n}{suffix}" data_type: {c} dims: [ {d} ] }}'
                                  for n, _, c, _, d in spec)
    write_onnx(tmp_path, "types", blob, f"input [ {io('')} ]\noutput [ {io('_OUT')} ]", extra=DYNAMIC)
    # String tensors: BYTES on the wire, variable length, a dynamic dimension.
    write_onnx(tmp_path, "strings", onnx_model(
        [helper.make_node("Identity", ["STR"], ["STR_OUT"])],
        [("STR", T.STRING, ["b", "n"])], [("STR_OUT", T.STRING, ["b", "n"])]),
        'input [ { name: "STR" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "STR_OUT" data_type: TYPE_STRING dims: [ -1 ] } ]', extra=DYNAMIC)
    s = serve(tmp_path)
    meta = httpclient.InferenceServerClient(s.url).get_model_metadata("types")
    assert [(i["name"], i["datatype"]) for i in meta["outputs"]] == [
        ("F16_OUT", "FP16"), ("BF16_OUT", "BF16"), ("I8_OUT", "INT8"),
        ("U8_OUT", "UINT8"), ("B_OUT", "BOOL")]

    def one(i):
        rows = 1 + i % 3
        words = np.array([[f"w{i}-{j}".encode() for j in range(i % 4 + 1)]] * rows, dtype=np.object_)
        f16 = np.full((rows, 4), i + 0.5, np.float16)
        bf = np.linspace(-2, 2, 4 * rows, dtype=np.float32).reshape(rows, 4) * (i + 1)
        i8 = np.full((rows, 4), i - 20, np.int8)
        u8 = np.full((rows, 4), 100 + i, np.uint8)
        b = np.array([[True, False, i % 2 == 0, True]] * rows)
        protocol = "grpc" if i % 2 else "http"
        got = infer(s, protocol, "strings", {"STR": words})
        np.testing.assert_array_equal(got["STR_OUT"], words)
        inputs = {"F16": f16, "BF16": (bf, "BF16"), "I8": i8, "U8": u8, "B": b}
        got = infer(s, protocol, "types", inputs)
        assert got["F16_OUT"].dtype == np.float16
        np.testing.assert_array_equal(got["F16_OUT"], f16 + f16)
        np.testing.assert_array_equal(got["BF16_OUT"], bf16_round(bf16_round(bf) * 2))
        np.testing.assert_array_equal(got["I8_OUT"], (i8 + i8).astype(np.int8))
        np.testing.assert_array_equal(got["U8_OUT"], (u8 + u8).astype(np.uint8))
        np.testing.assert_array_equal(got["B_OUT"], ~b)
        return i

    with ThreadPoolExecutor(6) as pool:
        assert sorted(pool.map(one, range(18))) == list(range(18))


def test_onnx_dynamic_dims_reshape_and_optional_inputs(tmp_path, serve):
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    # Dynamic dimensions: any [rows, cols]; batched only with equal shapes.
    write_onnx(tmp_path, "dyn", onnx_model(
        [helper.make_node("Mul", ["X", "X"], ["Y"])],
        [("X", T.FLOAT, ["b", "r", "c"])], [("Y", T.FLOAT, ["b", "r", "c"])]),
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]', extra=DYNAMIC)
    # reshape: clients send [4], the model takes and returns [2, 2].
    write_onnx(tmp_path, "reshaped", onnx_model(
        [helper.make_node("Transpose", ["X"], ["Y"], perm=[0, 2, 1])],
        [("X", T.FLOAT, ["b", 2, 2])], [("Y", T.FLOAT, ["b", 2, 2])]),
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]',
        extra=DYNAMIC)
    # Optional input: a graph input with an initializer (its default).
    write_onnx(tmp_path, "optional", onnx_model(
        [helper.make_node("Add", ["A", "B"], ["SUM"])],
        [("A", T.FLOAT, ["b", 4]), ("B", T.FLOAT, ["b", 4])], [("SUM", T.FLOAT, ["b", 4])],
        [numpy_helper.from_array(np.full((1, 4), 100, np.float32), "B")]),
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },\n'
        '        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
        'output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]', extra=DYNAMIC)
    s = serve(tmp_path)

    def one(i):
        protocol = "grpc" if i % 2 else "http"
        x = np.arange((i % 3 + 1) * (i % 4 + 2), dtype=np.float32).reshape(1, i % 3 + 1, i % 4 + 2)
        np.testing.assert_array_equal(infer(s, protocol, "dyn", {"X": x})["Y"], x * x)
        flat = np.arange(8, dtype=np.float32).reshape(2, 4) + i
        got = infer(s, protocol, "reshaped", {"X": flat})["Y"]
        assert got.shape == (2, 4)
        np.testing.assert_array_equal(got, flat.reshape(2, 2, 2).transpose(0, 2, 1).reshape(2, 4))
        a = np.full((1, 4), i, np.float32)
        if i % 3:
            got = infer(s, protocol, "optional", {"A": a, "B": a})["SUM"]
            np.testing.assert_array_equal(got, a + a)
        else:
            got = infer(s, protocol, "optional", {"A": a})["SUM"]
            np.testing.assert_array_equal(got, a + 100)
        return i

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(24))) == list(range(24))
    meta = httpclient.InferenceServerClient(s.url).get_model_metadata("reshaped")
    assert meta["outputs"][0]["shape"] == [-1, 4]


def test_onnx_gpu_instance_without_onnxruntime_gpu_fails_alone(tmp_path, serve):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA execution provider")
    gpu = write_add_sub(tmp_path, name="on_gpu")
    (gpu / "config.pbtxt").write_text((gpu / "config.pbtxt").read_text().replace("KIND_CPU", "KIND_GPU"))
    write_add_sub(tmp_path, name="fine")
    s = serve(tmp_path, exit_on_error=False)
    state, reason = index_reasons(s)["on_gpu"]
    assert state == "UNAVAILABLE"
    assert "needs CUDAExecutionProvider, which this onnxruntime does not offer" in reason
    assert index_reasons(s)["fine"][0] == "READY"


# ---------------------------------------------------------------- TensorRT without a GPU


def test_tensorrt_plan_without_gpu_fails_alone_with_its_reason(tmp_path, serve):
    try:
        from pyserver.backends import _cuda
        has_gpu = _cuda.device_count() > 0
    except Exception:
        has_gpu = False
    if has_gpu:
        pytest.skip("a GPU is visible: tests/gpu/test_tensorrt.py serves real plans")
    d = tmp_path / "plan"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.plan").write_bytes(b"not a plan: this machine cannot build one")
    (d / "config.pbtxt").write_text(
        'platform: "tensorrt_plan"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n')
    write_add_sub(tmp_path, name="fine")
    s = serve(tmp_path, exit_on_error=False)
    state, reason = index_reasons(s)["plan"]
    assert state == "UNAVAILABLE"
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        assert "unable to load backend 'tensorrt': the TensorRT backend needs the tensorrt " \
               "package, which is not installed" in reason
    else:
        assert "the TensorRT backend needs" in reason or "GPU(s) are visible" in reason
    assert index_reasons(s)["fine"][0] == "READY"


def test_torch_weight_sharing_between_instances(tmp_path, serve):
    from pyserver.backends import pytorch as backend_module

    write_torch(tmp_path, "shared", TorchAddSub(), ADD_SUB_TORCH_IO, instances=2, extra="""
parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }""")
    write_torch(tmp_path, "separate", TorchAddSub(), ADD_SUB_TORCH_IO, instances=2)
    s = serve(tmp_path)
    shared = [i.backend.module for i in s.server.models.resolve("shared", "").instances]
    separate = [i.backend.module for i in s.server.models.resolve("separate", "").instances]
    assert shared[0] is shared[1] and separate[0] is not separate[1]
    ab = {"INPUT__0": np.ones((1, 16), np.float32), "INPUT__1": np.ones((1, 16), np.float32)}
    np.testing.assert_array_equal(infer(s, "grpc", "shared", ab)["OUTPUT__1"], np.zeros((1, 16)))
    s.call(s.server.models.unload("shared"))
    # Unloaded: the next load reads the file again.
    assert not [k for k in backend_module._shared_modules if "shared" in k[0]]


class TorchMulAdd(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a * b, a + b


def test_torch_weight_sharing_reload_reads_the_new_file(tmp_path, serve):
    """A model.pt replaced and reloaded: the new version's instances load
    the new file, not the module the old version (still serving while the
    new one loads) shares under the same path."""
    d = write_torch(tmp_path, "shared", TorchAddSub(), ADD_SUB_TORCH_IO, instances=2, extra="""
parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }""")
    s = serve(tmp_path)
    ab = {"INPUT__0": np.full((1, 16), 3, np.float32), "INPUT__1": np.full((1, 16), 2, np.float32)}
    np.testing.assert_array_equal(infer(s, "grpc", "shared", ab)["OUTPUT__0"], np.full((1, 16), 5))
    torch.jit.script(TorchMulAdd()).save(str(d / "1" / "model.pt"))
    s.call(s.server.models.load("shared"))
    got = infer(s, "grpc", "shared", ab)
    np.testing.assert_array_equal(got["OUTPUT__0"], np.full((1, 16), 6))
    np.testing.assert_array_equal(got["OUTPUT__1"], np.full((1, 16), 5))
    shared = [i.backend.module for i in s.server.models.resolve("shared", "").instances]
    assert shared[0] is shared[1]


def test_onnx_config_datatype_must_match_the_model(tmp_path, serve):
    bad_in = write_add_sub(tmp_path, name="bad_in")
    text = (bad_in / "config.pbtxt").read_text()
    (bad_in / "config.pbtxt").write_text(text.replace(
        '{ name: "INPUT1" data_type: TYPE_FP32', '{ name: "INPUT1" data_type: TYPE_INT32'))
    bad_out = write_add_sub(tmp_path, name="bad_out")
    (bad_out / "config.pbtxt").write_text(text.replace('name: "bad_in"', 'name: "bad_out"').replace(
        '{ name: "OUTPUT0" data_type: TYPE_FP32', '{ name: "OUTPUT0" data_type: TYPE_FP16'))
    s = serve(tmp_path, exit_on_error=False)
    reasons = index_reasons(s)
    assert "unable to load model 'bad_in', configuration expects datatype TYPE_INT32 for input " \
           "'INPUT1', model provides TYPE_FP32" in reasons["bad_in"][1]
    assert "unable to load model 'bad_out', configuration expects datatype TYPE_FP16 for output " \
           "'OUTPUT0', model provides TYPE_FP32" in reasons["bad_out"][1]
