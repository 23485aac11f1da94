"""The gRPC frontend (native HTTP/2 over nghttp2) driven by the real
tritonclient.grpc and tritonclient.grpc.aio: every RPC of
GRPCInferenceService, grpc.health.v1.Health/Check, unary and streaming infer,
deadlines, cancellation, compression, restricted protocols, shared memory,
a 64 MiB tensor and a graceful stop."""

import asyncio
import contextlib
import gc
import json
import queue
import threading
import time
import urllib.parse

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from pyserver._proto import message_class
from pyserver.frontends.grpc import GrpcFrontend
from pyserver.testing import add_sub_onnx, write_add_sub

# A single request waits this long in the batcher for company (max batch 8):
# long enough for deadlines and cancellation to act first.
SLOW = "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 3000000 }"


@contextlib.contextmanager
def grpc_servers(start_server, **frontend_defaults):
    """start(repo, frontend_kwargs=None, **server_kwargs): a RunningServer
    with a GrpcFrontend on its loop (``s.grpc``, ``s.grpc_url``), made with
    ``frontend_defaults`` unless frontend_kwargs says otherwise."""
    started = []

    def start(repo, frontend_kwargs=None, **server_kwargs):
        s = start_server(repo, **server_kwargs)
        frontend = GrpcFrontend(s.server, "127.0.0.1", 0,
                                **{**frontend_defaults, **(frontend_kwargs or {})})
        s.call(frontend.start())
        s.grpc = frontend
        s.grpc_url = f"127.0.0.1:{frontend.port}"
        started.append(s)
        return s

    yield start
    for s in started:
        s.call(s.grpc.stop(5))


@pytest.fixture
def start_grpc(start_server):
    with grpc_servers(start_server) as start:
        yield start


@pytest.fixture
def add_sub(tmp_path, start_grpc):
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="slow", extra=SLOW)
    return start_grpc(tmp_path)


def make_inputs(a, b, module=grpcclient):
    inputs = [module.InferInput("INPUT0", list(a.shape), "FP32"),
              module.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 3.0, dtype=np.float32)


def expect_error(fn, status, text=None, contains=None):
    with pytest.raises(InferenceServerException) as err:
        fn()
    assert err.value.status() == status, err.value
    if text is not None:
        assert err.value.message() == text
    if contains is not None:
        assert contains in err.value.message(), err.value.message()
    return err.value


def raw_call(url, method, request_bytes, metadata=None, timeout=10):
    """A unary call with pre-serialized bytes (no generated stubs)."""
    with grpc.insecure_channel(url) as channel:
        call = channel.unary_unary(method, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        return call(request_bytes, metadata=metadata, timeout=timeout)


# ---------------------------------------------------------------- health, metadata


def test_health_and_metadata(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("nope")  # ready=false, not an error

    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "triton"
    assert meta["version"] == add_sub.server.metadata()["version"]
    assert "model_repository" in meta["extensions"]
    assert "sequence" in meta["extensions"]  # as Triton lists it

    md = client.get_model_metadata("add_sub", as_json=True)
    assert md["platform"] == "onnxruntime_onnx"
    assert md["versions"] == ["1"]
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}
    assert [o["name"] for o in md["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    expect_error(lambda: client.get_model_metadata("nope"), "StatusCode.NOT_FOUND",
                 "Request for unknown model: 'nope' is not found")

    config = client.get_model_config("add_sub").config
    assert config.name == "add_sub"
    assert config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert list(config.input[0].dims) == [16]
    slow = client.get_model_config("slow", as_json=True)["config"]
    assert slow["dynamic_batching"]["max_queue_delay_microseconds"] == "3000000"
    expect_error(lambda: client.get_model_config("nope"), "StatusCode.NOT_FOUND")
    client.close()


def test_grpc_health_check(add_sub):
    req = message_class("grpc.health.v1.HealthCheckRequest")().SerializeToString()
    resp = message_class("grpc.health.v1.HealthCheckResponse").FromString(
        raw_call(add_sub.grpc_url, "/grpc.health.v1.Health/Check", req))
    assert resp.status == 1  # SERVING
    add_sub.server.begin_shutdown()
    resp = message_class("grpc.health.v1.HealthCheckResponse").FromString(
        raw_call(add_sub.grpc_url, "/grpc.health.v1.Health/Check", req))
    assert resp.status == 2  # NOT_SERVING


def test_unknown_method_is_unimplemented(add_sub):
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, "/inference.GRPCInferenceService/NoSuchCall", b"")
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, "/grpc.health.v1.Health/Watch", b"")
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


# ---------------------------------------------------------------- infer


def test_sync_infer(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    result = client.infer("add_sub", make_inputs(A, B), request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    response = result.get_response()
    assert response.id == "r-1"
    assert response.model_name == "add_sub"
    assert response.model_version == "1"

    # one output asked for; a batch of 3; version named; priority and timeout
    a = np.random.rand(3, 16).astype(np.float32)
    b = np.random.rand(3, 16).astype(np.float32)
    result = client.infer("add_sub", make_inputs(a, b), model_version="1",
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
                          priority=1, timeout=10_000_000)
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
    client.close()


def test_infer_errors_keep_triton_codes_and_texts(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    expect_error(lambda: client.infer("nope", make_inputs(A, B)), "StatusCode.NOT_FOUND",
                 "Request for unknown model: 'nope' is not found")
    expect_error(lambda: client.infer("add_sub", make_inputs(A, B), model_version="7"),
                 "StatusCode.NOT_FOUND")
    expect_error(lambda: client.infer("add_sub", make_inputs(A, B), model_version="x1"),
                 "StatusCode.INVALID_ARGUMENT",
                 "failed to get model version from specified version string 'x1' (details: "
                 "stol), version should be an integral value > 0")  # Triton's text (#21)
    bad = np.zeros((1, 15), np.float32)
    err = expect_error(lambda: client.infer("add_sub", make_inputs(bad, bad)),
                       "StatusCode.INVALID_ARGUMENT",
                       contains="[request id: <id_unknown>] unexpected shape for input 'INPUT0' "
                                "for model 'add_sub'. Expected [-1,16], got [1,15]. NOTE: Setting "
                                "a non-zero max_batch_size in the model config requires a batch "
                                "dimension to be prepended to each input shape.")
    assert err.message().endswith("for more info on max_batch_size.")  # core's whole note
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(A)
    expect_error(lambda: client.infer("add_sub", inputs, request_id="x"),
                 "StatusCode.INVALID_ARGUMENT", contains="missing required input(s) ['INPUT1']")
    ints = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for t in ints:
        t.set_data_from_numpy(np.zeros((1, 16), np.int32))
    expect_error(lambda: client.infer("add_sub", ints), "StatusCode.INVALID_ARGUMENT",
                 contains="data-type is 'INT32', but model 'add_sub' expects 'FP32'")
    expect_error(lambda: client.infer("add_sub", make_inputs(A, B),
                                      parameters={"triton_x": 1}),
                 "StatusCode.INVALID_ARGUMENT", contains="reserved for Triton usage")
    # the connection survives every error
    np.testing.assert_array_equal(client.infer("add_sub", make_inputs(A, B))
                                  .as_numpy("OUTPUT0"), A + B)
    client.close()


@pytest.mark.parametrize("id_length", [20_000, 70_000, 1_000_000])
def test_failing_call_with_a_huge_request_id_is_answered(add_sub, id_length):
    """#27 defect 4: the error text echoes the request id; past ~66 kB its
    trailers were too large to send and the call was never answered. The
    message is bounded (and marked), the code kept, the connection serves on."""
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    bad = np.zeros((1, 15), np.float32)
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as err:
        client.infer("add_sub", make_inputs(bad, bad), request_id="r" * id_length,
                     client_timeout=20)
    assert time.monotonic() - started < 15  # answered, not timed out
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    message = err.value.message()
    assert message.startswith("[request id: rrrr")
    assert message.endswith("...(truncated)")
    assert len(message) <= 4096
    # a multi-byte text is never cut inside an escape
    from pyserver.engine.protocol.http2 import percent_encode
    for limit in range(20, 40):
        encoded = percent_encode("\u00e9" * 50, limit)
        assert len(encoded) <= limit and encoded.endswith(b"...(truncated)")
        assert urllib.parse.unquote(encoded.decode(), errors="strict").startswith("\u00e9")
    np.testing.assert_array_equal(client.infer("add_sub", make_inputs(A, B))
                                  .as_numpy("OUTPUT0"), A + B)
    client.close()


def test_raw_byte_size_mismatch_and_typed_contents(add_sub):
    Request = message_class("inference.ModelInferRequest")
    Response = message_class("inference.ModelInferResponse")
    method = "/inference.GRPCInferenceService/ModelInfer"

    req = Request(model_name="add_sub", id="short")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
    req.raw_input_contents.extend([A.tobytes(), A.tobytes()[:60]])
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, method, req.SerializeToString())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == ("[request id: short] input byte size mismatch for input "
                                   "'INPUT1' for model 'add_sub'. Expected 64, got 60")

    # typed contents instead of raw_input_contents
    req = Request(model_name="add_sub")
    for name, values in (("INPUT0", A), ("INPUT1", B)):
        t = req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        t.contents.fp32_contents.extend(values.ravel().tolist())
    resp = Response.FromString(raw_call(add_sub.grpc_url, method, req.SerializeToString()))
    out = {o.name: np.frombuffer(raw, np.float32).reshape(1, 16)
           for o, raw in zip(resp.outputs, resp.raw_output_contents)}
    np.testing.assert_array_equal(out["OUTPUT0"], A + B)

    # contents of the wrong type, and contents mixed with raw
    req = Request(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16]).contents.int_contents.extend(
            [1] * 16)
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, method, req.SerializeToString())
    assert err.value.details() == ("unexpected explicit tensor data for input tensor 'INPUT0' "
                                   "for model 'add_sub' of type 'INT32', expected datatype "
                                   "'FP32'")
    req.raw_input_contents.append(A.tobytes())
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, method, req.SerializeToString())
    assert err.value.details() == ("contents field must not be specified when using "
                                   "raw_input_contents for 'INPUT0' for model 'add_sub'")
    # an input with no data at all
    req = Request(model_name="add_sub")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, method, req.SerializeToString())
    assert err.value.details() == ("unable to find data for input tensor 'INPUT0' for model "
                                   "'add_sub' in request.")
    # not a ModelInferRequest at all
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, method, b"\x0a\xff\xff")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # the client's mistake (#27)


def test_async_infer_many_in_flight(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    results = queue.Queue()
    values = [np.full((1, 16), i, np.float32) for i in range(64)]
    for i, v in enumerate(values):
        client.async_infer("add_sub", make_inputs(v, B),
                           lambda result, error, i=i: results.put((i, result, error)),
                           request_id=str(i))
    for _ in values:
        i, result, error = results.get(timeout=30)
        assert error is None, error
        assert result.get_response().id == str(i)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values[i] + B)
    client.close()


def test_aio_client(add_sub):
    async def run():
        client = aioclient.InferenceServerClient(add_sub.grpc_url)
        try:
            assert await client.is_server_live()
            assert await client.is_model_ready("add_sub")
            assert (await client.get_model_metadata("add_sub")).name == "add_sub"
            values = [np.full((2, 16), i, np.float32) for i in range(40)]
            results = await asyncio.gather(*[
                client.infer("add_sub", make_inputs(v, np.ones((2, 16), np.float32),
                                                    aioclient))
                for v in values])
            for v, r in zip(values, results):
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), v - 1)
            with pytest.raises(InferenceServerException) as err:
                await client.infer("nope", make_inputs(A, B, aioclient))
            assert err.value.status() == "StatusCode.NOT_FOUND"
        finally:
            await client.close()

    asyncio.run(run())


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(add_sub, algorithm):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    a = np.random.rand(4, 16).astype(np.float32)
    result = client.infer("add_sub", make_inputs(a, a), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    client.close()


# ---------------------------------------------------------------- streaming


def test_stream_infer(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    results = queue.Queue()
    client.start_stream(lambda result, error: results.put((result, error)))
    for i in range(5):
        client.async_stream_infer("add_sub", make_inputs(np.full((1, 16), i, np.float32), B),
                                  request_id=f"s{i}")
    got = {}
    for _ in range(5):
        result, error = results.get(timeout=30)
        assert error is None
        got[result.get_response().id] = result.as_numpy("OUTPUT0")
    for i in range(5):
        np.testing.assert_array_equal(got[f"s{i}"], np.full((1, 16), i, np.float32) + B)

    # an error goes in-stream; the stream stays open
    client.async_stream_infer("nope", make_inputs(A, B), request_id="bad")
    result, error = results.get(timeout=30)
    assert result is None
    assert "Request for unknown model: 'nope' is not found" in str(error)
    bad = np.zeros((1, 15), np.float32)
    client.async_stream_infer("add_sub", make_inputs(bad, bad), request_id="bad2")
    result, error = results.get(timeout=30)
    assert "unexpected shape for input 'INPUT0'" in str(error)
    client.async_stream_infer("add_sub", make_inputs(A, B), request_id="after")
    result, error = results.get(timeout=30)
    assert error is None and result.get_response().id == "after"

    # triton_enable_empty_final_response: the response says it is final
    client.async_stream_infer("add_sub", make_inputs(A, B), request_id="fin",
                              enable_empty_final_response=True)
    result, error = results.get(timeout=30)
    assert error is None
    response = result.get_response()
    assert response.parameters["triton_final_response"].bool_param is True
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    client.stop_stream()
    client.close()


def test_aio_stream_infer(add_sub):
    async def run():
        client = aioclient.InferenceServerClient(add_sub.grpc_url)

        async def requests():
            for i in range(10):
                yield {"model_name": "add_sub", "request_id": str(i),
                       "inputs": make_inputs(np.full((1, 16), i, np.float32), B, aioclient)}
            yield {"model_name": "missing", "inputs": make_inputs(A, B, aioclient),
                   "request_id": "m"}

        seen = {}
        errors = []
        try:
            async for result, error in client.stream_infer(requests()):
                if error is not None:
                    errors.append(str(error))
                else:
                    seen[result.get_response().id] = result.as_numpy("OUTPUT1")
        finally:
            await client.close()
        assert sorted(seen, key=int) == [str(i) for i in range(10)]
        np.testing.assert_array_equal(seen["4"], np.full((1, 16), 4, np.float32) - B)
        assert len(errors) == 1 and "'missing' is not found" in errors[0]

    asyncio.run(run())


# ---------------------------------------------------------------- deadlines, cancellation


def test_deadline_exceeded_and_server_keeps_serving(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    start = time.monotonic()
    expect_error(lambda: client.infer("slow", make_inputs(A, B), client_timeout=0.3),
                 "StatusCode.DEADLINE_EXCEEDED")
    assert time.monotonic() - start < 2.5
    np.testing.assert_array_equal(client.infer("add_sub", make_inputs(A, B))
                                  .as_numpy("OUTPUT0"), A + B)
    # the server ends the call itself when grpc-timeout passes (raw call:
    # the client library would stop waiting on its own)
    Request = message_class("inference.ModelInferRequest")
    req = Request(model_name="slow")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        req.raw_input_contents.append(A.tobytes())
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, "/inference.GRPCInferenceService/ModelInfer",
                 req.SerializeToString(), timeout=0.2)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    client.close()


def test_cancellation_resets_the_stream(add_sub, caplog):
    frontend = add_sub.grpc

    async def run():
        client = aioclient.InferenceServerClient(add_sub.grpc_url)
        try:
            task = asyncio.ensure_future(client.infer("slow", make_inputs(A, B, aioclient)))
            await asyncio.sleep(0.3)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # the server saw RST_STREAM: no stream left open on its side
            for _ in range(100):
                open_streams = add_sub.run(
                    lambda: sum(c.open_streams for c in frontend._connections))
                if open_streams == 0:
                    break
                await asyncio.sleep(0.02)
            assert open_streams == 0
            r = await client.infer("add_sub", make_inputs(A, B, aioclient))
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
        finally:
            await client.close()

    asyncio.run(run())
    # The queued request failed as CANCELLED after its stream was gone:
    # nothing reads that outcome, and nothing may be logged about it.
    add_sub.run(gc.collect)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_cancelled_stream_drops_its_queued_requests_quietly(add_sub, caplog):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    results = queue.Queue()
    client.start_stream(lambda result, error: results.put((result, error)))
    client.async_stream_infer("slow", make_inputs(A, B), request_id="queued")
    mv = add_sub.run(lambda: add_sub.server.models.resolve("slow", ""))
    for _ in range(100):
        if add_sub.run(lambda: mv.scheduler.queued_count) == 1:
            break
        time.sleep(0.02)
    assert add_sub.run(lambda: mv.scheduler.queued_count) == 1
    client.stop_stream(cancel_requests=True)
    # the request left the model's queue, and its outcome is logged nowhere
    for _ in range(100):
        if add_sub.run(lambda: mv.scheduler.queued_count) == 0:
            break
        time.sleep(0.02)
    assert add_sub.run(lambda: mv.scheduler.queued_count) == 0
    add_sub.run(gc.collect)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    client.close()


# ---------------------------------------------------------------- large messages


def test_64_mib_tensors(tmp_path, start_grpc):
    n = 16 * 1024 * 1024  # 64 MiB of FP32 per tensor
    write_add_sub(tmp_path, name="big", size=n, max_batch_size=0)
    s = start_grpc(tmp_path)
    client = grpcclient.InferenceServerClient(s.grpc_url)
    a = np.random.rand(n).astype(np.float32)
    b = np.ones(n, np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [n], "FP32"),
              grpcclient.InferInput("INPUT1", [n], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("big", inputs, client_timeout=120)
    out0 = result.as_numpy("OUTPUT0")
    assert out0.shape == (n,)
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    client.close()


def test_message_size_limit(tmp_path, start_grpc):
    write_add_sub(tmp_path)
    s = start_grpc(tmp_path, frontend_kwargs={"max_message_size": 1000})
    client = grpcclient.InferenceServerClient(s.grpc_url)
    big = np.zeros((8, 16), np.float32)  # 2 x 512 bytes of raw contents
    expect_error(lambda: client.infer("add_sub", make_inputs(big, big)),
                 "StatusCode.RESOURCE_EXHAUSTED", contains="larger than max")
    np.testing.assert_array_equal(client.infer("add_sub", make_inputs(A, B))
                                  .as_numpy("OUTPUT0"), A + B)
    client.close()


# ---------------------------------------------------------------- statistics, repository


def test_statistics(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    for _ in range(3):
        client.infer("add_sub", make_inputs(A, B))
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"]
    assert len(stats) == 1
    assert stats[0]["name"] == "add_sub" and stats[0]["version"] == "1"
    assert int(stats[0]["inference_stats"]["success"]["count"]) == 3
    assert int(stats[0]["inference_count"]) == 3
    proto = client.get_inference_statistics("add_sub").model_stats[0]
    assert proto.inference_stats.success.count == 3
    assert proto.batch_stats[0].batch_size == 1
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {m["name"] for m in everything} == {"add_sub", "slow"}
    expect_error(lambda: client.get_inference_statistics("nope"), "StatusCode.INVALID_ARGUMENT",
                 "requested model 'nope' is not available")
    client.close()


def test_repository_index_load_unload(tmp_path, start_grpc):
    write_add_sub(tmp_path, name="m")
    write_add_sub(tmp_path, name="other")
    s = start_grpc(tmp_path, model_control_mode="explicit", load_models=["m"])
    client = grpcclient.InferenceServerClient(s.grpc_url)
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["m"]["state"] == "READY"
    assert "other" in index and index["other"].get("state") != "READY"
    assert not client.is_model_ready("other")
    # a named repository is refused, as for load and unload
    Index = message_class("inference.RepositoryIndexRequest")
    with pytest.raises(grpc.RpcError) as err:
        raw_call(s.grpc_url, "/inference.GRPCInferenceService/RepositoryIndex",
                 Index(repository_name="elsewhere").SerializeToString())
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert err.value.details() == "'repository_name' specification is not supported"

    client.load_model("other")
    assert client.is_model_ready("other")
    client.unload_model("other")
    assert not client.is_model_ready("other")
    client.unload_model("other", unload_dependents=True)

    config = json.dumps({
        "name": "fresh", "platform": "onnxruntime_onnx", "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                  {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                   {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]}]})
    client.load_model("fresh", config=config, files={"file:1/model.onnx": add_sub_onnx()})
    assert client.get_model_config("fresh").config.max_batch_size == 4
    np.testing.assert_array_equal(client.infer("fresh", make_inputs(A, B)).as_numpy("OUTPUT0"),
                                  A + B)
    expect_error(lambda: client.load_model("missing"), "StatusCode.INTERNAL",
                 contains="failed to poll from model repository")
    client.close()


def test_repository_control_refused_when_not_explicit(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    expect_error(lambda: client.load_model("add_sub"), "StatusCode.UNAVAILABLE",
                 "explicit model load / unload is not allowed if polling is enabled")
    ready = client.get_model_repository_index(as_json=True)["models"]
    assert {m["name"] for m in ready} == {"add_sub", "slow"}
    client.close()


# ---------------------------------------------------------------- settings


def test_trace_and_log_settings(add_sub):
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    trace = client.get_trace_settings(as_json=True)["settings"]
    assert trace["trace_level"]["value"] == ["OFF"]
    assert trace["trace_rate"]["value"] == ["1000"]
    updated = client.update_trace_settings(settings={"trace_rate": "5"}, as_json=True)
    assert updated["settings"]["trace_rate"]["value"] == ["5"]
    per_model = client.update_trace_settings(model_name="add_sub",
                                             settings={"trace_count": "7"}, as_json=True)
    assert per_model["settings"]["trace_count"]["value"] == ["7"]
    assert client.get_trace_settings(as_json=True)["settings"]["trace_count"]["value"] == ["-1"]
    cleared = client.update_trace_settings(model_name="add_sub", settings={"trace_count": None},
                                           as_json=True)
    assert cleared["settings"]["trace_count"]["value"] == ["-1"]
    # a key Triton does not read is passed over, as Triton passes it over
    assert "bogus" not in client.update_trace_settings(settings={"bogus": "1"},
                                                       as_json=True)["settings"]
    expect_error(lambda: client.get_trace_settings(model_name="nope"),
                 "StatusCode.INVALID_ARGUMENT", contains="Request for unknown model : nope")

    logs = client.get_log_settings(as_json=True)["settings"]
    assert logs["log_info"]["bool_param"] is True
    updated = client.update_log_settings({"log_verbose_level": 1, "log_info": True},
                                         as_json=True)["settings"]
    assert updated["log_verbose_level"]["uint32_param"] == 1
    client.update_log_settings({"log_verbose_level": 0})
    # Triton's gRPC answers: a key it does not read passed over, a value of
    # the wrong kind refused in its words
    assert "no_such_setting" not in client.update_log_settings(
        {"no_such_setting": True}, as_json=True)["settings"]
    LogRequest = message_class("inference.LogSettingsRequest")
    wrong = LogRequest()
    wrong.settings["log_verbose_level"].string_param = "x"
    with pytest.raises(grpc.RpcError) as err:
        raw_call(add_sub.grpc_url, "/inference.GRPCInferenceService/LogSettings",
                 wrong.SerializeToString())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "expect int32 for 'log_verbose_level'"
    expect_error(lambda: client.update_log_settings({"log_format": "bogus"}),
                 "StatusCode.INVALID_ARGUMENT", "invalid argument for log_format, got: bogus")
    client.close()


# ---------------------------------------------------------------- restricted protocols


def test_restricted_protocols(tmp_path, start_grpc):
    write_add_sub(tmp_path)
    s = start_grpc(tmp_path, frontend_kwargs={
        "restricted_protocols": ["inference,model-config:infer-key=secret",
                                 "model-repository:admin=yes"]})
    client = grpcclient.InferenceServerClient(s.grpc_url)
    assert client.is_server_live()  # health is not restricted
    # the flag's key names the header triton-grpc-protocol-<key> (Triton's docs, #21): the
    # bare key does not open it
    expect_error(lambda: client.infer("add_sub", make_inputs(A, B),
                                      headers={"infer-key": "secret"}), "StatusCode.UNAVAILABLE")
    expect_error(lambda: client.infer("add_sub", make_inputs(A, B)), "StatusCode.UNAVAILABLE",
                 "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'")
    expect_error(lambda: client.infer("add_sub", make_inputs(A, B),
                                      headers={"triton-grpc-protocol-infer-key": "wrong"}),
                 "StatusCode.UNAVAILABLE")
    result = client.infer("add_sub", make_inputs(A, B), headers={"triton-grpc-protocol-infer-key": "secret"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    expect_error(lambda: client.get_model_config("add_sub"), "StatusCode.UNAVAILABLE")
    assert client.get_model_config("add_sub", headers={"triton-grpc-protocol-infer-key": "secret"}).config.name
    expect_error(lambda: client.get_model_repository_index(), "StatusCode.UNAVAILABLE",
                 "This protocol is restricted, expecting header 'triton-grpc-protocol-admin'")
    assert client.get_model_repository_index(headers={"triton-grpc-protocol-admin": "yes"})

    results = queue.Queue()
    client.start_stream(lambda result, error: results.put((result, error)),
                        headers={"triton-grpc-protocol-infer-key": "secret"})
    client.async_stream_infer("add_sub", make_inputs(A, B))
    result, error = results.get(timeout=30)
    assert error is None
    client.stop_stream()
    # refused as it opens (qa/L0_grpc RestrictedProtocolTest): the error
    # comes with no request sent, and the stream takes none after it
    client.start_stream(lambda result, error: results.put((result, error)))
    result, error = results.get(timeout=30)
    assert "This protocol is restricted" in str(error)
    with pytest.raises(InferenceServerException, match="no longer in valid state"):
        client.async_stream_infer("add_sub", make_inputs(A, B))
    client.stop_stream()
    client.close()


def test_bad_restriction_specs():
    from pyserver.frontends.grpc import parse_restricted_protocols

    assert parse_restricted_protocols(["health,statistics:k=v"]) == {
        "health": ("triton-grpc-protocol-k", "v"), "statistics": ("triton-grpc-protocol-k", "v")}
    with pytest.raises(ValueError):
        parse_restricted_protocols(["nonsense:k=v"])
    with pytest.raises(ValueError):
        parse_restricted_protocols(["health"])
    with pytest.raises(ValueError):
        parse_restricted_protocols(["health:k=v", "health:k2=v"])


# ---------------------------------------------------------------- shutdown


def test_stop_lets_calls_in_flight_finish(tmp_path, start_grpc):
    write_add_sub(tmp_path, name="slowish",
                  extra="dynamic_batching { preferred_batch_size: [ 8 ] "
                        "max_queue_delay_microseconds: 500000 }")
    s = start_grpc(tmp_path)
    client = grpcclient.InferenceServerClient(s.grpc_url)
    box = {}

    def call():
        try:
            box["result"] = client.infer("slowish", make_inputs(A, B))
        except Exception as e:  # noqa: BLE001 (reported by the assert below)
            box["error"] = e

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.2)
    s.call(s.grpc.stop(10))  # GOAWAY; the call in flight completes
    thread.join(10)
    assert "error" not in box, box.get("error")
    np.testing.assert_array_equal(box["result"].as_numpy("OUTPUT0"), A + B)
    assert not s.grpc._connections
    fresh = grpcclient.InferenceServerClient(s.grpc_url)
    with pytest.raises(InferenceServerException):
        fresh.is_server_live(client_timeout=2)
    client.close()
    fresh.close()


def test_deadline_removes_queued_work(tmp_path, start_server):
    """A request whose deadline passes while it waits in the queue never
    runs: it leaves the queue and counts as CANCELED."""
    import tritonclient.grpc as grpcclient

    from pyserver.backends import register_backend
    from pyserver.frontends.grpc import GrpcFrontend
    from tests.integration.test_scheduling import RecordingBackend, write_model

    register_backend("recording", RecordingBackend)
    RecordingBackend.batches = []
    RecordingBackend.release = threading.Event()
    write_model(tmp_path, "q", "", max_batch_size=0)
    s = start_server(tmp_path)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    try:
        url = f"127.0.0.1:{frontend.port}"

        def call(v, timeout=None):
            client = grpcclient.InferenceServerClient(url)
            inp = grpcclient.InferInput("IN", [1], "FP32")
            inp.set_data_from_numpy(np.array([v], np.float32))
            return client.infer("q", [inp], client_timeout=timeout)

        busy = threading.Thread(target=call, args=(999.0,))
        busy.start()
        time.sleep(0.3)  # 999 holds the only instance
        with pytest.raises(Exception) as err:
            call(5.0, timeout=0.3)
        assert "Deadline" in str(err.value) or "DEADLINE" in str(err.value)
        time.sleep(0.2)
        RecordingBackend.release.set()
        busy.join(10)
        time.sleep(0.2)
        assert RecordingBackend.batches == [[999.0]]  # 5.0 never ran
        stats = s.run(s.server.model_statistics, "q")
        assert stats["failure_reasons"]["CANCELED"] == 1
    finally:
        RecordingBackend.release.set()
        s.call(frontend.stop())


def test_shapes_no_array_can_have_are_invalid_argument(add_sub):
    """#27 defect 7 over gRPC: [0, 2^63-1] and a zero-row batch are
    INVALID_ARGUMENT, not INTERNAL."""
    Request = message_class("inference.ModelInferRequest")
    cases = [(shape, text, typed)
             for shape, text in (([0, (1 << 63) - 1], "is larger than any tensor can be"),
                                 ([0, 16], "batch-size must be >= 1 for 'add_sub'"))
             for typed in (False, True)]
    for shape, text, typed in cases:
        req = Request(model_name="add_sub")
        for n in ("INPUT0", "INPUT1"):
            t = req.inputs.add(name=n, datatype="FP32")
            t.shape.extend(shape)
            if typed:
                t.contents.fp32_contents.extend([])
            else:
                req.raw_input_contents.append(b"")
        with pytest.raises(grpc.RpcError) as err:
            raw_call(add_sub.grpc_url, "/inference.GRPCInferenceService/ModelInfer",
                     req.SerializeToString())
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
        assert text in err.value.details(), err.value.details()
    client = grpcclient.InferenceServerClient(add_sub.grpc_url)
    np.testing.assert_array_equal(client.infer("add_sub", make_inputs(A, B))
                                  .as_numpy("OUTPUT0"), A + B)
    client.close()
