"""BLS from Triton C backends: tests/backends_c/bls.c runs each request on
another model of its server through TRITONSERVER_InferenceRequest* and
TRITONSERVER_ServerInferAsync, served over HTTP and gRPC with dynamic
batching and two instances; the target's statistics count the BLS calls."""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .test_grpc import start_grpc  # noqa: F401  (fixture)
from .test_triton_c_backend import CC, IDENTITY, REPEAT, build_backend, infer_in, write_model

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the test backends")


def bls_config(target: str, inputs: str, outputs: str, batching: bool = True,
               own_thread: bool = False, cancel: bool = False, trace: bool = False) -> str:
    if batching:
        head = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n"
    else:
        head = "max_batch_size: 0\n"
    return (f'backend: "bls"\n{head}input [ {inputs} ]\noutput [ {outputs} ]\n'
            'instance_group [ { count: 2 kind: KIND_CPU } ]\n'
            f'parameters {{ key: "target" value {{ string_value: "{target}" }} }}\n'
            + ('parameters { key: "own_thread" value { string_value: "1" } }\n'
               if own_thread else '')
            + ('parameters { key: "cancel" value { string_value: "1" } }\n'
               if cancel else '')
            + ('parameters { key: "trace" value { string_value: "1" } }\n'
               if trace else ''))


FP32_IN = '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }'
FP32_OUT = '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }'


@pytest.fixture
def served(tmp_path, start_grpc):  # noqa: F811
    backends, repo = tmp_path / "backends", tmp_path / "models"
    for name in ("identity", "repeat", "bls"):
        build_backend(backends, name)
    write_model(repo, "identity", IDENTITY)
    write_model(repo, "repeat", REPEAT)
    write_model(repo, "bls", bls_config("identity", FP32_IN, FP32_OUT))
    write_model(repo, "bls_thread", bls_config("identity", FP32_IN, FP32_OUT, own_thread=True))
    write_model(repo, "bls_missing", bls_config("no_such_model", FP32_IN, FP32_OUT))
    write_model(repo, "bls_wrong_input", bls_config(
        "identity", '{ name: "WRONG" data_type: TYPE_FP32 dims: [ -1 ] }', FP32_OUT))
    # a lone request waits a minute in identity_slow's queue for company:
    # cancelled there, it never runs
    write_model(repo, "identity_slow", IDENTITY.replace(
        "max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 60000000"))
    write_model(repo, "bls_cancel", bls_config("identity_slow", FP32_IN, FP32_OUT,
                                               cancel=True))
    write_model(repo, "bls_traced", bls_config("identity", FP32_IN, FP32_OUT, trace=True))
    write_model(repo, "bls_repeat", bls_config(
        "repeat", '{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }',
        '{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }', batching=False))
    return start_grpc(repo, backend_directory=str(backends))


def _success_count(s, model: str) -> int:
    stats = httpclient.InferenceServerClient(s.url).get_inference_statistics(model)
    return stats["model_stats"][0]["inference_stats"]["success"]["count"]


def test_bls_to_identity_over_http_and_grpc(served):
    s = served

    def http_call(i):
        x = np.full((1, 2 + i % 5), float(i), dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = httpclient.InferenceServerClient(s.url).infer("bls", [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, x)

    def grpc_call(i):
        x = np.arange(3 * 4, dtype=np.float32).reshape(3, 4) - i
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = grpcclient.InferenceServerClient(s.grpc_url).infer("bls", [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, x)

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(http_call, range(40)))
        list(pool.map(grpc_call, range(40)))
    # every BLS call went through identity's own scheduler and statistics
    assert _success_count(s, "bls") == 80
    assert _success_count(s, "identity") == 80


def test_bls_from_a_backends_own_thread(served):
    """ServerInferAsync from a thread the backend made (no Python thread state)."""
    s = served

    def call(i):
        x = np.full((1, 4), float(i), dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        client = httpclient.InferenceServerClient(s.url)
        np.testing.assert_array_equal(client.infer("bls_thread", [inp]).as_numpy("OUTPUT0"), x)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(call, range(24)))
    assert _success_count(s, "identity") == 24


def test_bls_errors_come_back_as_the_response_error(served):
    s = served
    x = np.ones((1, 3), dtype=np.float32)
    for model, text in (("bls_missing", "Request for unknown model: 'no_such_model' is not found"),
                        ("bls_wrong_input", "'WRONG'")):
        inp = httpclient.InferInput(model == "bls_missing" and "INPUT0" or "WRONG", [1, 3], "FP32")
        inp.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as err:
            httpclient.InferenceServerClient(s.url).infer(model, [inp])
        assert text in err.value.message()
        ginp = grpcclient.InferInput(inp.name(), [1, 3], "FP32")
        ginp.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as gerr:
            grpcclient.InferenceServerClient(s.grpc_url).infer(model, [ginp])
        assert text in gerr.value.message()
    # the server still serves BLS after the failures
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x)
    out = httpclient.InferenceServerClient(s.url).infer("bls", [inp]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, x)


def test_bls_to_a_decoupled_model_gets_every_response(served):
    s = served
    values = np.array([4, 8, 15, 16, 23, 42], dtype=np.int32)

    def call(i):
        v = values + i
        np.testing.assert_array_equal(infer_in(s.url, "bls_repeat", v).as_numpy("OUT"), v)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(call, range(8)))
    # and over a gRPC stream, as a plain request
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    inp = grpcclient.InferInput("IN", [len(values)], "INT32")
    inp.set_data_from_numpy(values)
    client.async_stream_infer("bls_repeat", [inp])
    result, error = got.get(timeout=30)
    client.stop_stream()
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUT"), values)


def test_a_cancelled_bls_request_leaves_the_targets_queue(served):
    """TRITONSERVER_InferenceRequestCancel right after ServerInferAsync: the
    request, still waiting in the target's batching delay, ends with
    Triton's CANCELLED error as its response (then is released), the
    target never runs it, and IsCancelled says so."""
    s = served
    x = np.ones((1, 3), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as err:
        httpclient.InferenceServerClient(s.url, network_timeout=30).infer("bls_cancel", [inp])
    assert "Request was cancelled" in err.value.message()
    ginp = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
    ginp.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as gerr:
        grpcclient.InferenceServerClient(s.grpc_url).infer("bls_cancel", [ginp], client_timeout=30)
    assert "Request was cancelled" in gerr.value.message()
    stats = httpclient.InferenceServerClient(s.url).get_inference_statistics("identity_slow")
    inference = stats["model_stats"][0]["inference_stats"]
    assert inference["success"]["count"] == 0
    assert stats["model_stats"][0]["execution_count"] == 0
    # the BLS model and the target serve on
    out = httpclient.InferenceServerClient(s.url).infer("bls", [inp]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, x)


def test_a_bls_call_given_a_child_trace_is_traced_under_its_request(served, tmp_path):
    """TRITONBACKEND_RequestTrace gives a traced request's trace, a child
    spawned from it and passed to ServerInferAsync traces the BLS call with
    "parent_id"; an untraced request has no trace to give, and a call
    without one (the "bls" model) is not traced, whatever the sampling."""
    import json

    s = served
    client = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "trace.json"
    s.run(s.server.trace_settings, None, {"trace_file": str(trace_file)})
    client.update_trace_settings(settings={
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
        "log_frequency": "0"})
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(
        client.infer("bls_traced", [inp], request_id="t").as_numpy("OUTPUT0"), x)
    np.testing.assert_array_equal(client.infer("bls", [inp]).as_numpy("OUTPUT0"), x)
    client.update_trace_settings(settings={"trace_level": ["OFF"]})  # writes the file
    np.testing.assert_array_equal(  # untraced: RequestTrace gives none, and it still works
        client.infer("bls_traced", [inp]).as_numpy("OUTPUT0"), x)
    traces = json.loads(trace_file.read_text())
    assert sorted((t["model_name"], "parent_id" in t) for t in traces) == [
        ("bls", False), ("bls_traced", False), ("identity", True)], traces
    child = next(t for t in traces if t["model_name"] == "identity")
    parent = next(t for t in traces if t["model_name"] == "bls_traced")
    assert child["parent_id"] == parent["id"] and parent["request_id"] == "t"
    stamps = {x["name"]: x["ns"] for x in child["timestamps"]}
    outer = {x["name"]: x["ns"] for x in parent["timestamps"]}
    assert outer["COMPUTE_START"] <= stamps["REQUEST_START"] <= stamps["REQUEST_END"] \
        <= outer["COMPUTE_END"]
    # the backend's own activity (TRITONSERVER_InferenceTraceReportActivity), in its request's
    # trace, on the same clock, before the call it names
    assert outer["COMPUTE_START"] <= outer["BLS_SENT"] <= stamps["REQUEST_START"]
