"""TensorRT plans built here from the ONNX MLP (TensorRT's ONNX parser and
builder, with optimization profiles), served on the GPU by the TensorRT
backend: outputs over HTTP and gRPC, dynamic batching on and off, two
instances sharing one engine, profile choice and its error."""

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.testing import mlp_onnx, mlp_weights
from tests.gpu.conftest import check_mlp, visible_gpus

trt = pytest.importorskip("tensorrt", reason="tensorrt is not installed (pip install 'pyserver[tensorrt]')")
if visible_gpus() == 0:
    pytest.skip("no NVIDIA GPU is visible", allow_module_level=True)


def build_plan(onnx_bytes: bytes, profiles) -> bytes:
    """A serialized engine for the ONNX model with one optimization profile
    per (min, opt, max) batch size triple."""
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # TensorRT < 10
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_bytes):
        raise RuntimeError("; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
    config = builder.create_builder_config()
    if hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)  # full FP32, to compare with numpy
    for low, opt, high in profiles:
        profile = builder.create_optimization_profile()
        profile.set_shape("INPUT0", (low, 64), (opt, 64), (high, 64))
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None, "TensorRT could not build the engine"
    return bytes(plan)


@pytest.fixture(scope="module")
def plans():
    weights = mlp_weights()
    onnx_bytes = mlp_onnx(weights)
    return weights, {"one": build_plan(onnx_bytes, [(1, 8, 64)]),
                     "two": build_plan(onnx_bytes, [(1, 2, 4), (1, 32, 64)])}


def write_plan(repo, name, plan, extra="", group="instance_group [ { count: 2 kind: KIND_GPU } ]"):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.plan").write_bytes(plan)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "tensorrt_plan"\nmax_batch_size: 64\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        f"{group}\n{extra}\n")


@pytest.mark.parametrize("batching", [True, False], ids=["dynamic", "no_batching"])
def test_tensorrt_mlp_two_instances(tmp_path, serve, plans, batching):
    weights, built = plans
    write_plan(tmp_path, "mlp_trt", built["one"],
               "dynamic_batching { max_queue_delay_microseconds: 20000 }" if batching else "")
    s = serve(tmp_path)
    instances = s.server.models.resolve("mlp_trt", "").instances
    assert len(instances) == 2
    assert instances[0].backend.engine is instances[1].backend.engine  # one engine per GPU
    assert instances[0].backend.stream != instances[1].backend.stream  # two pool streams
    stats = check_mlp(s, "mlp_trt", weights)
    if batching:
        assert stats["execution_count"] < 48
    # Inputs and outputs were staged in the server's page-locked pool.
    pool = s.server.host_memory.stats()
    assert pool["pinned"] and pool["allocations"] > 0
    assert s.server.host_memory.gauges()[0] > 0
    # Their device bindings are blocks of GPU 0's CUDA memory pool, held by
    # the instances that have run (2 tensors each, taken at an instance's
    # first batch: with batching, one instance may have run them all).
    device_pool = s.server.device_memory.stats()[0]
    assert device_pool["device"] == 0 and not device_pool["pinned"]
    assert device_pool["allocations"] >= 2 and device_pool["in_use_bytes"] >= 2 * 4096


def test_tensorrt_profiles(tmp_path, serve, plans):
    """As Triton's backend: the profiles the instance group lists (a repeat
    reuses the first), and with none listed profile 0 alone, "default"."""
    weights, built = plans
    write_plan(tmp_path, "both", built["two"],
               group='instance_group [ { count: 1 kind: KIND_GPU profile: [ "0", "1", "1" ] } ]')
    write_plan(tmp_path, "small_only", built["two"],
               group='instance_group [ { count: 1 kind: KIND_GPU profile: [ "0" ] } ]')
    write_plan(tmp_path, "unlisted", built["two"],
               group="instance_group [ { count: 1 kind: KIND_GPU } ]")
    s = serve(tmp_path)
    backend = s.server.models.resolve("both", "").instances[0].backend
    assert [p.index for p in backend.profiles] == [0, 1]
    unlisted = s.server.models.resolve("unlisted", "").instances[0].backend
    assert [(p.index, p.label) for p in unlisted.profiles] == [(0, "default")]
    check_mlp(s, "both", weights)
    check_mlp(s, "unlisted", weights)
    client = httpclient.InferenceServerClient(s.url)
    x = np.ones((40, 64), np.float32)  # only profile 1 holds 40 rows
    t = httpclient.InferInput("INPUT0", [40, 64], "FP32")
    t.set_data_from_numpy(x)
    assert client.infer("both", [t]).as_numpy("OUTPUT0").shape == (40, 16)
    for name, among in (("small_only", "[ 0[0]]"), ("unlisted", "[ default[0]]")):
        with pytest.raises(InferenceServerException) as err:
            client.infer(name, [t])
        assert err.value.status() == "400"
        assert f"failed to find any Optimization Profile among {among}" in err.value.message()


def test_tensorrt_kind_cpu_is_refused(tmp_path, serve, plans):
    write_plan(tmp_path, "on_cpu", plans[1]["one"], group="instance_group [ { kind: KIND_CPU } ]")
    s = serve(tmp_path, exit_on_error=False)
    rows = httpclient.InferenceServerClient(s.url).get_model_repository_index()
    reason = next(r["reason"] for r in rows if r["name"] == "on_cpu")
    assert "unable to load model 'on_cpu', TensorRT backend supports only GPU device" in reason


def test_tensorrt_shape_tensor_input_is_refused_at_load(tmp_path, serve):
    """An engine whose input is a shape tensor (its values give another
    tensor's shape; TensorRT keeps it in host memory) fails its load with
    the reason, instead of failing each request on a device pointer."""
    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    network = builder.create_network(0)
    data = network.add_input("INPUT0", trt.float32, (-1, 64))
    shape = network.add_input("SHAPE", trt.int32, (2,))
    reshape = network.add_shuffle(data)
    reshape.set_input(1, shape)
    reshape.get_output(0).name = "OUTPUT0"
    network.mark_output(reshape.get_output(0))
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    profile.set_shape("INPUT0", (1, 64), (8, 64), (64, 64))
    profile.set_shape_input("SHAPE", (1, 64), (8, 64), (64, 64))
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None, "TensorRT could not build the engine"
    d = tmp_path / "shaped"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.plan").write_bytes(bytes(plan))
    (d / "config.pbtxt").write_text(
        'name: "shaped"\nplatform: "tensorrt_plan"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 64 ] },\n'
        '        { name: "SHAPE" data_type: TYPE_INT32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        "instance_group [ { kind: KIND_GPU } ]\n")
    s = serve(tmp_path, exit_on_error=False)
    rows = httpclient.InferenceServerClient(s.url).get_model_repository_index()
    reason = next(r["reason"] for r in rows if r["name"] == "shaped")
    assert "tensor 'SHAPE' is a shape tensor in host memory" in reason
