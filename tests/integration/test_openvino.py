"""The OpenVINO backend on the real runtime: ONNX models built here are
converted with OpenVINO's own converter (convert_model + save_model) at
test time and served over HTTP and gRPC to the real tritonclient."""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.testing import add_sub_onnx

from ..sanitizers import skip_openvino_under_asan

ov = pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino "
                                            "(pip install 'pyserver[openvino]')")
pytestmark = skip_openvino_under_asan

WIRE = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.float64): "FP64",
        np.dtype(np.int8): "INT8", np.dtype(np.int16): "INT16", np.dtype(np.int32): "INT32",
        np.dtype(np.int64): "INT64", np.dtype(np.uint8): "UINT8", np.dtype(np.uint16): "UINT16",
        np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64", np.dtype(np.bool_): "BOOL"}
ADD_SUB_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]"""


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


def convert(onnx_blob: bytes, folder: Path, batch_layout: bool = False) -> Path:
    """model.xml + model.bin in ``folder`` from an ONNX model, by OpenVINO's
    converter; ``batch_layout`` marks every input and output "N..." (what
    lets Triton's auto-complete see a batch dimension)."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "source.onnx"
    source.write_bytes(onnx_blob)
    model = ov.convert_model(str(source))
    source.unlink()
    if batch_layout:
        for port in list(model.inputs) + list(model.outputs):
            ov.layout_helpers.set_layout(port, ov.Layout("N..."))
    ov.save_model(model, str(folder / "model.xml"))
    return folder / "model.xml"


def write_model(repo, name, config_body=None, blob=None, batching=True, batch_layout=False,
                onnx_file=False):
    model_dir = Path(repo) / name
    version = model_dir / "1"
    blob = blob if blob is not None else add_sub_onnx(16, batching=batching)
    if onnx_file:
        version.mkdir(parents=True)
        (version / "model.onnx").write_bytes(blob)
    else:
        convert(blob, version, batch_layout)
    if config_body is not None:
        (model_dir / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "openvino"\n'
                                                + config_body)
    return model_dir


def infer(s, protocol, model, inputs, outputs=None):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(s.url if protocol == "http" else s.grpc_url)
    try:
        tensors = []
        for name, value in inputs.items():
            t = module.InferInput(name, list(value.shape), WIRE[value.dtype])
            t.set_data_from_numpy(value)
            tensors.append(t)
        requested = [module.InferRequestedOutput(n) for n in outputs] if outputs else None
        result = client.infer(model, tensors, outputs=requested)
        return {n: result.as_numpy(n) for n in outputs}
    finally:
        client.close()


def add_sub_inputs(rows=1, seed=0):
    rng = np.random.default_rng(seed)
    return {"INPUT0": rng.standard_normal((rows, 16)).astype(np.float32),
            "INPUT1": rng.standard_normal((rows, 16)).astype(np.float32)}


def check_add_sub(s, model, protocol, rows=1, seed=0):
    x = add_sub_inputs(rows, seed)
    got = infer(s, protocol, model, x, ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_allclose(got["OUTPUT0"], x["INPUT0"] + x["INPUT1"], rtol=1e-6)
    np.testing.assert_allclose(got["OUTPUT1"], x["INPUT0"] - x["INPUT1"], rtol=1e-6)


def index_reasons(s):
    client = httpclient.InferenceServerClient(s.url)
    return {m["name"]: (m.get("state"), m.get("reason", "")) for m in
            client.get_model_repository_index()}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_xml_with_config(tmp_path, serve, protocol):
    write_model(tmp_path, "ov", "max_batch_size: 8\n" + ADD_SUB_IO)
    s = serve(tmp_path)
    for rows in (1, 3, 8):
        check_add_sub(s, "ov", protocol, rows, seed=rows)
    meta = httpclient.InferenceServerClient(s.url).get_model_metadata("ov")
    assert meta["platform"] == "openvino"
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}


def test_auto_complete_without_config(tmp_path, serve):
    # No layout: as Triton's backend, no batch dimension is assumed.
    write_model(tmp_path, "plain")
    # "N..." layouts: batching, default max_batch_size and dynamic batching.
    write_model(tmp_path, "batched", batch_layout=True)
    s = serve(tmp_path, default_max_batch_size=4)
    client = httpclient.InferenceServerClient(s.url)
    plain = client.get_model_config("plain")
    assert plain["backend"] == "openvino"
    assert plain["max_batch_size"] == 0
    assert [[int(d) for d in i["dims"]] for i in plain["input"]] == [[-1, 16], [-1, 16]]
    batched = client.get_model_config("batched")
    assert batched["max_batch_size"] == 4
    assert "dynamic_batching" in batched
    assert [o["name"] for o in batched["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert batched["input"][0]["data_type"] == "TYPE_FP32"
    check_add_sub(s, "plain", "http", rows=2)
    check_add_sub(s, "batched", "grpc", rows=4)


def test_model_onnx_through_openvino(tmp_path, serve):
    write_model(tmp_path, "onnx_ov", 'default_model_filename: "model.onnx"\nmax_batch_size: 8\n'
                + ADD_SUB_IO, onnx_file=True)
    s = serve(tmp_path)
    check_add_sub(s, "onnx_ov", "http", rows=5)
    check_add_sub(s, "onnx_ov", "grpc", rows=1)


def test_dynamic_batching_forms_batches_across_two_instances(tmp_path, serve):
    write_model(tmp_path, "ov", "max_batch_size: 8\n" + ADD_SUB_IO
                + "\ndynamic_batching { max_queue_delay_microseconds: 50000 }"
                + "\ninstance_group [ { count: 2 kind: KIND_CPU } ]")
    s = serve(tmp_path)
    version = s.server.models.resolve("ov", "")
    assert len({id(i.backend) for i in version.instances}) == 2

    def one(i):
        check_add_sub(s, "ov", "http" if i % 2 else "grpc", seed=i)
        return i

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(32))) == list(range(32))
    stats = s.run(s.server.model_statistics, "ov")
    assert stats["inference_stats"]["success"]["count"] == 32
    assert stats["execution_count"] < 32  # 8 clients, a 50 ms window


def test_dynamic_dims(tmp_path, serve):
    # A model whose second dimension is dynamic too.
    from onnx import TensorProto, helper
    shape = ["batch", "n"]
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "dyn",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("OUTPUT0", "OUTPUT1")])
    blob = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    blob.ir_version = 8
    write_model(tmp_path, "dyn", "max_batch_size: 4\n" + ADD_SUB_IO.replace("[ 16 ]", "[ -1 ]"),
                blob=blob.SerializeToString())
    s = serve(tmp_path)
    for rows, cols in ((1, 3), (4, 7), (2, 100)):
        a = np.full((rows, cols), 2.0, np.float32)
        b = np.ones((rows, cols), np.float32)
        got = infer(s, "grpc" if cols % 2 else "http", "dyn", {"INPUT0": a, "INPUT1": b},
                    ["OUTPUT0", "OUTPUT1"])
        np.testing.assert_array_equal(got["OUTPUT0"], a + b)
        np.testing.assert_array_equal(got["OUTPUT1"], a - b)


def test_instances_share_one_compiled_model_with_a_stream_each(tmp_path, serve):
    """As Triton's backend, a version's instances share one compiled model
    (one copy of the weights), each with its own infer request; it gets a
    stream per instance unless the config says otherwise. A reload after
    the file changed compiles anew, and the last instance's close lets the
    compiled model go."""
    from pyserver.backends import openvino as backend_module

    two = "\ninstance_group [ { count: 2 kind: KIND_CPU } ]"
    hint = '\nparameters { key: "PERFORMANCE_HINT" value { string_value: "LATENCY" } }'
    write_model(tmp_path, "shared", "max_batch_size: 8\n" + ADD_SUB_IO + two)
    write_model(tmp_path, "hinted", "max_batch_size: 8\n" + ADD_SUB_IO + two + hint)
    s = serve(tmp_path, model_control_mode="explicit", load_models=["shared", "hinted"])

    def backends(name):
        return [i.backend for i in s.server.models.resolve(name, "").instances]

    first, second = backends("shared")
    assert first.compiled is second.compiled and first.request is not second.request
    assert first.compiled.get_property("NUM_STREAMS") == 2
    assert backends("hinted")[0].compiled.get_property("NUM_STREAMS") == 1  # the hint decides
    with ThreadPoolExecutor(8) as pool:  # both instances at once, answers not mixed up
        list(pool.map(lambda i: check_add_sub(s, "shared", "http" if i % 2 else "grpc",
                                              rows=1 + i % 3, seed=i), range(32)))
    shared = backend_module._SHARED._entries
    before = set(shared)
    assert first._key in before
    weights = tmp_path / "shared" / "1" / "model.bin"
    later = weights.stat().st_mtime_ns + 10**9
    os.utime(weights, ns=(later, later))  # the same weights, a newer file
    s.call(s.server.load_model("shared"))
    reloaded = backends("shared")[0]
    assert reloaded._key != first._key
    check_add_sub(s, "shared", "http", rows=2)
    # the old version's instances closed: its compiled model is let go
    assert set(shared) == before - {first._key} | {reloaded._key}


def test_parameters_and_compiled_model_cache(tmp_path, serve):
    cache = tmp_path / "ov_cache"
    params = "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in (
        ("NUM_STREAMS", "2"), ("PERFORMANCE_HINT", "THROUGHPUT"),
        ("INFERENCE_NUM_THREADS", "2"), ("COMPILED_MODEL_CACHE", str(cache))))
    repo = tmp_path / "repo"
    write_model(repo, "tuned", "max_batch_size: 8\n" + ADD_SUB_IO + "\n" + params)
    s = serve(repo)
    check_add_sub(s, "tuned", "http", rows=2)
    backend = s.server.models.resolve("tuned", "").instances[0].backend
    assert backend.compiled.get_property("NUM_STREAMS") == 2
    assert str(backend.compiled.get_property("PERFORMANCE_HINT")) == "THROUGHPUT"
    assert backend.compiled.get_property("INFERENCE_NUM_THREADS") == 2  # streams <= threads
    assert cache.is_dir() and any(cache.iterdir())


def test_bad_parameter_values_fail_the_load_with_tritons_text(tmp_path, serve):
    def param(key, value):
        return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'

    for name, key, value in (("streams", "NUM_STREAMS", "many"),
                             ("hint", "PERFORMANCE_HINT", "fast"),
                             ("threads", "INFERENCE_NUM_THREADS", "-2")):
        write_model(tmp_path, name, "max_batch_size: 8\n" + ADD_SUB_IO + "\n" + param(key, value))
    write_model(tmp_path, "wrong_dims", "max_batch_size: 8\n"
                + ADD_SUB_IO.replace("TYPE_FP32 dims: [ 16 ] },\n        {",
                                     "TYPE_FP32 dims: [ 8 ] },\n        {", 1))
    write_model(tmp_path, "fine", "max_batch_size: 8\n" + ADD_SUB_IO)
    s = serve(tmp_path, exit_on_error=False)
    reasons = index_reasons(s)
    assert "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got many" \
        in reasons["streams"][1]
    assert "expected the parameter 'PERFORMANCE_HINT' to be " \
           "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast" in reasons["hint"][1]
    assert "expected the parameter 'INFERENCE_NUM_THREADS' to be a non-negative number, got -2" \
        in reasons["threads"][1]
    assert "model 'wrong_dims', tensor 'INPUT0': the model expects 2 dimensions (shape " \
           "[-1,16]) but the model configuration specifies 2 dimensions" in reasons["wrong_dims"][1]
    assert reasons["fine"][0] == "READY"
    check_add_sub(s, "fine", "grpc")


DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
          np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def test_every_datatype(tmp_path, serve):
    """One model passing a tensor of each type through (OpenVINO's ONNX
    frontend keeps each input's element type)."""
    import onnx
    from onnx import helper
    from onnx.helper import np_dtype_to_tensor_dtype
    nodes, ins, outs, config = [], [], [], []
    for i, dtype in enumerate(DTYPES):
        elem = np_dtype_to_tensor_dtype(np.dtype(dtype))
        nodes.append(helper.make_node("Identity", [f"IN{i}"], [f"OUT{i}"]))
        ins.append(helper.make_tensor_value_info(f"IN{i}", elem, ["batch", 3]))
        outs.append(helper.make_tensor_value_info(f"OUT{i}", elem, ["batch", 3]))
        config.append((i, WIRE[np.dtype(dtype)]))
    model = helper.make_model(helper.make_graph(nodes, "types", ins, outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    body = "max_batch_size: 4\ninput [ " + ", ".join(
        f'{{ name: "IN{i}" data_type: TYPE_{w} dims: [ 3 ] }}' for i, w in config) + " ]\n"
    body += "output [ " + ", ".join(
        f'{{ name: "OUT{i}" data_type: TYPE_{w} dims: [ 3 ] }}' for i, w in config) + " ]\n"
    write_model(tmp_path, "types", body, blob=model.SerializeToString())
    s = serve(tmp_path)
    rng = np.random.default_rng(1)
    inputs = {}
    for i, dtype in enumerate(DTYPES):
        if dtype is np.bool_:
            inputs[f"IN{i}"] = rng.integers(0, 2, (2, 3)).astype(np.bool_)
        else:
            inputs[f"IN{i}"] = (rng.standard_normal((2, 3)) * 10).astype(dtype)
    for protocol in ("http", "grpc"):
        got = infer(s, protocol, "types", inputs, [f"OUT{i}" for i in range(len(DTYPES))])
        for i, dtype in enumerate(DTYPES):
            assert got[f"OUT{i}"].dtype == np.dtype(dtype)
            np.testing.assert_array_equal(got[f"OUT{i}"], inputs[f"IN{i}"])


def test_bad_input_gets_tritons_error_and_the_server_keeps_serving(tmp_path, serve):
    write_model(tmp_path, "ov", "max_batch_size: 8\n" + ADD_SUB_IO)
    s = serve(tmp_path)
    bad_shape = {"INPUT0": np.ones((1, 5), np.float32), "INPUT1": np.ones((1, 5), np.float32)}
    with pytest.raises(InferenceServerException) as err:
        infer(s, "http", "ov", bad_shape, ["OUTPUT0"])
    assert "unexpected shape for input 'INPUT0' for model 'ov'" in err.value.message()
    assert err.value.status() == "400"
    bad_type = {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)}
    with pytest.raises(InferenceServerException) as err:
        infer(s, "grpc", "ov", bad_type, ["OUTPUT0"])
    assert "inference input 'INPUT0' data-type is 'INT32', but model 'ov' expects 'FP32'" \
        in err.value.message()
    too_big = add_sub_inputs(rows=9)
    with pytest.raises(InferenceServerException) as err:
        infer(s, "http", "ov", too_big, ["OUTPUT0"])
    assert "inference request batch-size must be <= 8 for 'ov'" in err.value.message()
    check_add_sub(s, "ov", "http", rows=2)
    check_add_sub(s, "ov", "grpc", rows=1)
