"""Backends built for Triton's C API (libtriton_NAME.so): C backends in
tests/backends_c compiled at test time against pyserver's tritonbackend.h,
found under --backend-directory as Triton finds them, served over HTTP and
gRPC with dynamic batching and two instances."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.engine import triton_c

from .test_grpc import start_grpc  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "tests" / "backends_c"
HEADERS = ROOT / "csrc" / "include" / "pyserver" / "triton"
# the libtritonserver.so the engine loaded (an ASan build under make sanitize)
ENGINE = Path(triton_c.__file__).parent
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the test backends")


def build_library(source: str, out: Path) -> Path:
    """``out`` compiled from tests/backends_c/SOURCE.c against our headers."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([CC, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Werror", "-shared",
                    "-fPIC", "-pthread", f"-I{HEADERS}",
                    str(SOURCES / f"{source}.c"), "-o", str(out), f"-L{ENGINE}", "-ltritonserver"],
                   check=True)
    return out


def build_backend(backends: Path, name: str) -> Path:
    """backends/NAME/libtriton_NAME.so from tests/backends_c/NAME.c."""
    return build_library(name, backends / name / f"libtriton_{name}.so")


def infer_in(url: str, model: str, values, **kwargs):
    """One HTTP request of IN = values (INT32), what the test backends take."""
    x = np.asarray(values, dtype=np.int32)
    inp = httpclient.InferInput("IN", list(x.shape), "INT32")
    inp.set_data_from_numpy(x)
    return httpclient.InferenceServerClient(url).infer(model, [inp], **kwargs)


def wait_for_log(log_file: Path, *texts: str, timeout_s: float = 30) -> None:
    """Until one of ``texts`` is in the server's log file."""
    deadline = time.monotonic() + timeout_s
    while not any(t in log_file.read_text() for t in texts):
        assert time.monotonic() < deadline, f"none of {texts} in the log"
        time.sleep(0.02)


@contextmanager
def a_held_request(s, log_file: Path):
    """A gRPC call of IN = [-7] to threaded_one, which threaded.c holds on
    its own thread after Execute returned (logging "threaded: holding"),
    with the server's log in ``log_file`` meanwhile; yields the call."""
    s.run(s.server.log_settings, {"log_file": str(log_file)})
    try:
        client = grpcclient.InferenceServerClient(s.grpc_url)
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([-7], dtype=np.int32))
        call = client.async_infer("threaded_one", [inp], callback=lambda result, error: None)
        wait_for_log(log_file, "threaded: holding")
        yield call
    finally:
        s.run(s.server.log_settings, {"log_file": ""})


def write_model(repo: Path, name: str, text: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')


IDENTITY = '''backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
'''
REPEAT = '''backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
'''
FAILING = '''backend: "failing"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
'''

# tests/backends_c/threaded.c: answers from its own threads after Execute
THREADED = '''backend: "threaded"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
'''
THREADED_STREAM = '''backend: "threaded"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''
PARAMS = '''backend: "params"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
'''


@pytest.fixture
def layout(tmp_path):
    backends, repo = tmp_path / "backends", tmp_path / "models"
    for name in ("identity", "repeat", "failing", "threaded"):
        build_backend(backends, name)
    write_model(repo, "identity", IDENTITY)
    write_model(repo, "repeat", REPEAT)
    write_model(repo, "threaded", THREADED)
    write_model(repo, "threaded_stream", THREADED_STREAM)
    write_model(repo, "threaded_one", THREADED.replace("count: 2", "count: 1"))
    for name in ("fail_execute", "fail_response", "fail_output_name"):
        write_model(repo, name, FAILING)
    write_model(repo, "fail_execute_decoupled",
                FAILING + "model_transaction_policy { decoupled: true }\n")
    # Triton's core reports a reshaped output with the config's dims
    write_model(repo, "identity_reshaped", IDENTITY.replace(
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]',
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]').replace(
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]',
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ] '
        'reshape: { shape: [ 4 ] } } ]'))
    return backends, repo


def test_identity_over_http_and_grpc_with_batching(layout, start_grpc):  # noqa: F811
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))

    def http_call(i):
        client = httpclient.InferenceServerClient(s.url)
        x = np.full((1, 3 + i % 4), float(i), dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("identity", [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, x)

    def grpc_call(i):
        client = grpcclient.InferenceServerClient(s.grpc_url)
        x = np.arange(2 * 5, dtype=np.float32).reshape(2, 5) + i
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("identity", [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, x)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(http_call, range(64)))
        list(pool.map(grpc_call, range(64)))
    stats = httpclient.InferenceServerClient(s.url).get_inference_statistics("identity")
    model = stats["model_stats"][0]
    assert model["inference_stats"]["success"]["count"] == 128
    assert model["execution_count"] <= 128


def test_decoupled_repeat_streams_each_value(layout, start_grpc):  # noqa: F811
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    values = np.array([4, 8, 15, 16, 23, 42], dtype=np.int32)
    inp = grpcclient.InferInput("IN", [len(values)], "INT32")
    inp.set_data_from_numpy(values)
    client.async_stream_infer("repeat", [inp], enable_empty_final_response=True)
    seen = []
    while True:
        result, error = got.get(timeout=30)
        assert error is None
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
        seen.append(int(result.as_numpy("OUT")[0]))
    client.stop_stream()
    assert seen == values.tolist()


def test_a_response_sent_inside_execute_reaches_the_client_before_execute_ends(
        layout, start_grpc):  # noqa: F811
    """repeat.c sends 7, waits 400 ms inside ModelInstanceExecute (-2), then
    sends 8: 7 must reach the client during the wait (Triton hands each
    response on at TRITONBACKEND_ResponseSend), not with 8 once Execute
    returned."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((time.monotonic(), result, error)))
    inp = grpcclient.InferInput("IN", [3], "INT32")
    inp.set_data_from_numpy(np.array([7, -2, 8], dtype=np.int32))
    client.async_stream_infer("repeat", [inp])
    arrivals = {}
    for _ in range(2):
        at, result, error = got.get(timeout=30)
        assert error is None
        arrivals[int(result.as_numpy("OUT")[0])] = at
    client.stop_stream()
    assert arrivals[8] - arrivals[7] > 0.2  # apart by the wait (400 ms), not together


def test_response_statistics_the_backend_reports(layout, start_grpc):  # noqa: F811
    """repeat.c reports each response (TRITONBACKEND_ModelInstanceReport-
    ResponseStatistics): the statistics extension counts them per response
    index as Triton does: successes with compute infer and output, the
    final flag alone as an empty response, an error response as a failure
    without compute output."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    for values in ([5, 6], [7, -1]):
        inp = grpcclient.InferInput("IN", [2], "INT32")
        inp.set_data_from_numpy(np.array(values, dtype=np.int32))
        client.async_stream_infer("repeat", [inp], enable_empty_final_response=True)
        for _ in range(3):  # two responses (one an error), then the final flag
            got.get(timeout=30)
    client.stop_stream()
    # (tritonclient's protos may predate response_stats: read the server's own.)
    rs = s.run(s.server.statistics, "repeat")["model_stats"][0]["response_stats"]
    assert sorted(rs) == ["0", "1", "2"]
    assert int(rs["0"]["success"]["count"]) == 2
    assert int(rs["0"]["compute_infer"]["count"]) == 2
    assert int(rs["0"]["compute_output"]["count"]) == 2
    assert int(rs["0"]["success"]["ns"]) > 0
    assert int(rs["1"]["success"]["count"]) == 1 and int(rs["1"]["fail"]["count"]) == 1
    assert int(rs["1"]["compute_infer"]["count"]) == 2
    assert int(rs["1"]["compute_output"]["count"]) == 1  # the error computed no output
    assert int(rs["2"]["empty_response"]["count"]) == 2
    assert int(rs["2"]["compute_infer"]["count"]) == 2
    assert int(rs["2"].get("compute_output", {}).get("count", 0)) == 0


def test_responses_sent_from_backend_threads_after_execute_returned(layout, start_grpc):  # noqa: F811
    """threaded.c returns from Execute at once and answers each request from
    a thread of its own, which waits until two requests run side by side:
    two streams on the model's one instance both finish, each in order, and
    the non-decoupled model answers concurrent requests."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    got: dict[int, queue.Queue] = {0: queue.Queue(), 1: queue.Queue()}
    clients = []
    for k in (0, 1):
        client = grpcclient.InferenceServerClient(s.grpc_url)
        client.start_stream(callback=lambda result, error, k=k: got[k].put((result, error)))
        clients.append(client)
    values = {0: np.array([1, 2, 3], dtype=np.int32), 1: np.array([7, 8, 9, 10], dtype=np.int32)}
    for k, client in enumerate(clients):
        inp = grpcclient.InferInput("IN", [len(values[k])], "INT32")
        inp.set_data_from_numpy(values[k])
        client.async_stream_infer("threaded_stream", [inp], enable_empty_final_response=True)
    for k, client in enumerate(clients):
        seen = []
        while True:
            result, error = got[k].get(timeout=30)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
            seen.append(int(result.as_numpy("OUT")[0]))
        client.stop_stream()
        assert seen == values[k].tolist()

    def call(i):
        x = np.arange(i + 1, dtype=np.int32)
        np.testing.assert_array_equal(infer_in(s.url, "threaded", x).as_numpy("OUT"), x)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(call, range(4)))


def test_an_instance_takes_its_next_batch_while_its_backend_still_answers_the_last(
        layout, start_grpc):  # noqa: F811
    """threaded.c's requests each wait on their own thread for a partner
    (up to 10 s, else they fail "ran alone"): on a model with one instance,
    two requests pair up only if the instance runs the second batch while
    the backend still holds the first's request, as Triton frees an instance
    when Execute returns. Both answer, over HTTP and gRPC."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    x, y = np.array([4, 5], dtype=np.int32), np.array([6], dtype=np.int32)

    def over_grpc(values):
        inp = grpcclient.InferInput("IN", [len(values)], "INT32")
        inp.set_data_from_numpy(values)
        return grpcclient.InferenceServerClient(s.grpc_url).infer("threaded_one", [inp])

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(infer_in, s.url, "threaded_one", x)
        second = pool.submit(over_grpc, y)
        np.testing.assert_array_equal(first.result(timeout=30).as_numpy("OUT"), x)
        np.testing.assert_array_equal(second.result(timeout=30).as_numpy("OUT"), y)
    stats = httpclient.InferenceServerClient(s.url).get_inference_statistics("threaded_one")
    assert stats["model_stats"][0]["execution_count"] == 2
    # an error the backend sends from its thread is the request's answer,
    # with its code, over both protocols
    with pytest.raises(InferenceServerException) as err:
        infer_in(s.url, "threaded_one", [-8])
    assert err.value.status() == "400" and "threaded: -8 refused" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        over_grpc(np.array([-8], dtype=np.int32))
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "threaded: -8 refused" in err.value.message()


def test_a_request_its_backend_holds_after_execute_still_sees_its_cancellation(
        layout, start_grpc, tmp_path):  # noqa: F811
    """threaded.c with IN[0] = -7 keeps its request on its own thread after
    Execute returned and polls TRITONBACKEND_RequestIsCancelled: a gRPC
    client that cancels the call is seen there (the scheduler keeps the
    request watched until its backend releases it), and the model's one
    instance, free meanwhile, serves a pair of requests side by side."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    log_file = tmp_path / "server.log"
    with a_held_request(s, log_file) as call:
        x, y = np.array([1], dtype=np.int32), np.array([2, 3], dtype=np.int32)
        with ThreadPoolExecutor(2) as pool:  # while it is held
            pair = [pool.submit(infer_in, s.url, "threaded_one", v) for v in (x, y)]
            for future, v in zip(pair, (x, y)):
                np.testing.assert_array_equal(future.result(timeout=30).as_numpy("OUT"), v)
        call.cancel()
        wait_for_log(log_file, "threaded: cancelled while held", "threaded: never cancelled")
        assert "threaded: cancelled while held" in log_file.read_text()


def test_an_unload_waits_for_the_requests_the_backend_still_holds(tmp_path, start_grpc):  # noqa: F811
    """Triton finalizes a model's instances only once its requests are done:
    a model unloaded while threaded.c holds a request after Execute returned
    keeps its instance until the backend released it (cancelled here, which
    the backend sees)."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "threaded")
    write_model(repo, "threaded_one", THREADED.replace("count: 2", "count: 1"))
    s = start_grpc(repo, backend_directory=str(backends), model_control_mode="explicit",
                   load_models=["threaded_one"])
    log_file = tmp_path / "server.log"
    with a_held_request(s, log_file) as call:
        with ThreadPoolExecutor(1) as pool:
            unloading = pool.submit(httpclient.InferenceServerClient(s.url).unload_model,
                                    "threaded_one")
            time.sleep(0.5)
            assert "threaded: instance finalized" not in log_file.read_text()
            call.cancel()
            wait_for_log(log_file, "threaded: instance finalized")
            unloading.result(timeout=30)
        text = log_file.read_text()
        assert text.index("threaded: cancelled while held") < \
            text.index("threaded: instance finalized")


def test_sigterm_does_not_wait_past_the_exit_timeout_for_a_request_the_backend_holds(tmp_path):
    """A lone request to threaded.c waits 10 s on the backend's thread for a
    partner, whatever the server says: SIGTERM with --exit-timeout-secs 2
    answers it UNAVAILABLE with the reason at 2 s and the process exits then,
    leaving the held request (and its instance, unfinalized) to the backend,
    as Triton exits without unloading."""
    import signal

    from .test_cli import start_cli, wait_until_ready

    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "threaded")
    write_model(repo, "threaded_one", THREADED.replace("count: 2", "count: 1"))
    proc, client, ports = start_cli(["--model-repository", str(repo), "--backend-directory",
                                     str(backends), "--exit-timeout-secs", "2"])
    try:
        wait_until_ready(client, proc)
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(infer_in, f"127.0.0.1:{ports[0]}", "threaded_one", [5])
            time.sleep(1.0)  # running: held by the backend's thread
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=40)
            took = time.monotonic() - started
            with pytest.raises(InferenceServerException) as err:
                call.result(timeout=10)
        assert err.value.status() == "503"
        assert "its exit timeout (2 s) passed before this request completed" in \
            err.value.message()
        assert proc.returncode == 0, out
        assert took < 2 + 4, f"exit took {took:.1f} s\n{out}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_statistics_take_the_times_the_backend_reported(layout, start_grpc):  # noqa: F811
    """threaded.c reports 5 ms of input preparation before a 1 ms compute:
    the server's compute_input shows it (its own stamps would put the whole
    Execute in compute_infer)."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda i: infer_in(s.url, "threaded", [i]), range(4)))
    client = httpclient.InferenceServerClient(s.url)
    stats = client.get_inference_statistics("threaded")["model_stats"][0]
    assert stats["execution_count"] == 4
    inference = stats["inference_stats"]
    assert inference["compute_input"]["ns"] >= 4 * 5_000_000
    assert inference["compute_infer"]["ns"] >= 4 * 1_000_000


def test_memory_usage_the_backend_reports(layout, start_grpc):  # noqa: F811
    """identity.c reports its model's memory (a second report replacing the
    first) and each instance's: the statistics extension's memory_usage sums
    them by memory type and id, the model's once for its two instances, over
    HTTP and gRPC."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    expected = [{"type": "CPU", "id": 0, "byte_size": 4096 + 2 * 1024},
                {"type": "CPU_PINNED", "id": 0, "byte_size": 512}]
    stats = httpclient.InferenceServerClient(s.url).get_inference_statistics("identity")
    assert stats["model_stats"][0]["memory_usage"] == expected
    gstats = grpcclient.InferenceServerClient(s.grpc_url).get_inference_statistics(
        "identity", as_json=True)
    assert [{**u, "id": int(u.get("id", 0)), "byte_size": int(u["byte_size"])}
            for u in gstats["model_stats"][0]["memory_usage"]] == expected
    # a model whose backend reports nothing has none
    assert httpclient.InferenceServerClient(s.url).get_inference_statistics(
        "repeat")["model_stats"][0]["memory_usage"] == []


def test_a_backend_answers_readiness_itself(tmp_path, start_grpc):  # noqa: F811
    """ready.c exports TRITONBACKEND_ModelInstanceReady: each model-ready
    request asks it, over HTTP and gRPC, and the model is not ready while
    it returns an error; a backend without it (identity.c) is ready once
    loaded."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    for name in ("ready", "identity"):
        build_backend(backends, name)
    marker = tmp_path / "not-ready"
    write_model(repo, "ready", f"""backend: "ready"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
parameters {{ key: "not_ready_file" value {{ string_value: "{marker}" }} }}
""")
    write_model(repo, "identity", IDENTITY)
    s = start_grpc(repo, backend_directory=str(backends))
    http = httpclient.InferenceServerClient(s.url)
    grpc = grpcclient.InferenceServerClient(s.grpc_url)
    assert http.is_model_ready("ready") and grpc.is_model_ready("ready")
    marker.write_text("")
    assert not http.is_model_ready("ready") and not grpc.is_model_ready("ready")
    assert http.is_model_ready("identity")  # other models are not touched
    marker.unlink()
    assert http.is_model_ready("ready") and grpc.is_model_ready("ready")
    grpc.close()


def test_request_properties_and_response_parameters(tmp_path, start_grpc):  # noqa: F811
    """params.c echoes what TRITONBACKEND_Request* tell it as response
    parameters: the client's own parameters with their types, the
    correlation ID (string or number), the sequence flags, the timeout,
    cancellation; over gRPC and HTTP."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "params")
    write_model(repo, "params", PARAMS)
    write_model(repo, "params_seq", PARAMS + "sequence_batching { }\n")
    write_model(repo, "params_on_model", PARAMS + "instance_group [ { kind: KIND_MODEL } ]\n")
    write_model(repo, "params_bf16", PARAMS.replace("TYPE_INT32", "TYPE_BF16"))
    s = start_grpc(repo, backend_directory=str(backends))
    x = np.arange(3, dtype=np.int32)
    inp = grpcclient.InferInput("IN", [3], "INT32")
    inp.set_data_from_numpy(x)
    client = grpcclient.InferenceServerClient(s.grpc_url)
    result = client.infer("params", [inp], parameters={"n": 7, "s": "text", "b": True},
                          timeout=250000)
    np.testing.assert_array_equal(result.as_numpy("OUT"), x)
    got = result.get_response().parameters
    assert got["n"].int64_param == 7
    assert got["s"].string_param == "text"
    assert got["b"].bool_param is True
    assert got["correlation_id"].int64_param == 0
    assert got["flags"].int64_param == 0
    assert got["timeout_us"].int64_param == 250000
    assert got["cancelled"].bool_param is False
    assert got["instance_kind"].string_param == "CPU"
    on_model = client.infer("params_on_model", [inp]).get_response().parameters
    assert on_model["instance_kind"].string_param == "MODEL"  # TRITONBACKEND_ModelInstanceKind
    assert got["input_datatype"].string_param == "INT32"
    bf16 = grpcclient.InferInput("IN", [3], "BF16")
    bf16.set_data_from_numpy(np.ones(3, np.float32))
    told = client.infer("params_bf16", [bf16]).get_response().parameters
    assert told["input_datatype"].string_param == "BF16"  # not the uint16 numpy holds
    for corr, start, end, flags in (("seq-a", True, False, 1), ("seq-a", False, True, 2)):
        got = client.infer("params_seq", [inp], sequence_id=corr, sequence_start=start,
                           sequence_end=end).get_response().parameters
        assert got["correlation_id"].string_param == corr
        assert got["flags"].int64_param == flags
        assert "sequence_id" not in got and "sequence_start" not in got
    got = client.infer("params_seq", [inp], sequence_id=42, sequence_start=True,
                       sequence_end=True).get_response().parameters
    assert got["correlation_id"].int64_param == 42
    assert got["flags"].int64_param == 3

    params = infer_in(s.url, "params", x, parameters={"n": 5, "f": 0.5}).get_response()[
        "parameters"]
    assert params["n"] == 5 and params["f"] == 0.5 and params["cancelled"] is False


CONTROL = '''backend: "control"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
'''


def test_a_backend_loads_and_unloads_models_of_its_server(tmp_path, start_server):
    """control.c calls TRITONSERVER_ServerLoadModelWithParameters and
    ServerUnloadModel on its own server (explicit model control): the
    identity model comes and goes, a config passed as the load's "config"
    parameter is the one used, a model no repository holds is the call's
    error, and in a mode that is not explicit Triton's refusal comes back."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    for name in ("control", "identity"):
        build_backend(backends, name)
    write_model(repo, "control", CONTROL)
    write_model(repo, "identity", IDENTITY)
    s = start_server(repo, backend_directory=str(backends), model_control_mode="explicit",
                     load_models=["control"])
    client = httpclient.InferenceServerClient(s.url)
    assert not client.is_model_ready("identity")

    def control(**parameters):
        return infer_in(s.url, "control", [3], parameters=parameters).as_numpy("OUT")

    assert control(load="identity").tolist() == [3]
    assert client.is_model_ready("identity")
    config = ('{"backend": "identity", "max_batch_size": 2, "input": [{"name": "INPUT0", '
              '"data_type": "TYPE_FP32", "dims": [-1]}], "output": [{"name": "OUTPUT0", '
              '"data_type": "TYPE_FP32", "dims": [-1]}]}')
    control(load="identity", config=config)
    assert client.get_model_config("identity")["max_batch_size"] == 2
    control(unload="identity")
    assert not client.is_model_ready("identity")
    with pytest.raises(InferenceServerException) as err:
        control(load="no_such_model")
    assert "no_such_model" in err.value.message()
    assert client.is_model_ready("control")  # the caller keeps serving


def test_model_control_from_a_backend_needs_explicit_mode(tmp_path, start_server):
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "control")
    write_model(repo, "control", CONTROL)
    s = start_server(repo, backend_directory=str(backends))
    with pytest.raises(InferenceServerException) as err:
        infer_in(s.url, "control", [3], parameters={"unload": "control"})
    assert "explicit model load / unload is not allowed" in err.value.message()


METRICS = '''backend: "metrics"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
'''


def test_custom_metrics_a_backend_makes_are_on_the_metrics_endpoint(tmp_path, start_server):
    """metrics.c keeps a counter and a histogram (TRITONSERVER_Metric*):
    /metrics shows them with their labels beside the server's own, and they
    go when the model unloads (its ModelFinalize deletes them)."""
    from pyserver.frontends.metrics import MetricsConfig
    from pyserver.frontends.metrics.endpoint import MetricsFrontend

    from .test_metrics import parse, value
    from .test_python_services import scrape

    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "metrics")
    write_model(repo, "metrics", METRICS)
    s = start_server(repo, backend_directory=str(backends), model_control_mode="explicit",
                     load_models=["metrics"])
    endpoint = MetricsFrontend(s.server, MetricsConfig.from_cli(metrics_address="127.0.0.1",
                                                                metrics_port=0))
    s.call(endpoint.start())
    try:
        client = httpclient.InferenceServerClient(s.url)
        for v in (0.5, 5.0, 50.0):
            inp = httpclient.InferInput("IN", [1], "FP32")
            inp.set_data_from_numpy(np.array([v], dtype=np.float32))
            client.infer("metrics", [inp])
        text = scrape(endpoint.port)
        samples = parse(text)
        assert "# HELP c_requests Requests the C backend executed" in text
        assert "# TYPE c_values histogram" in text
        assert value(samples, "c_requests", model="metrics") == 3
        assert value(samples, "c_values_count", model="metrics") == 3
        assert value(samples, "c_values_sum", model="metrics") == 55.5
        assert value(samples, "c_values_bucket", model="metrics", le="1") == 1
        assert value(samples, "c_values_bucket", model="metrics", le="10") == 2
        assert value(samples, "c_values_bucket", model="metrics", le="+Inf") == 3
        assert value(samples, "nv_inference_request_success", model="metrics", version="1") == 3
        client.unload_model("metrics")
        assert "c_requests" not in scrape(endpoint.port)
    finally:
        s.call(endpoint.stop())


ACCUMULATE = '''backend: "accumulate"
max_batch_size: 0
sequence_batching {
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32
            dims: [ 1 ] initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true
                                        name: "zero" } } ]
}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
'''


def check_running_sums(add) -> None:
    """accumulate.c's sums over two sequences side by side, ``add(corr,
    value, start=..., end=..., **parameters)`` sending one request."""
    assert add(7, 1, start=True) == 1
    assert add(8, 10, start=True) == 10
    assert add(7, 2) == 3
    assert add(8, 5) == 15
    assert add(7, 100, skip_update=True) == 103  # the state stays 3


def test_implicit_state_through_the_state_api(tmp_path, start_server):
    """accumulate.c keeps a running sum in an implicit state
    (TRITONBACKEND_StateNew/StateBuffer/StateUpdate): each sequence has its
    own, a request that does not update it leaves it as it was, the state is
    not an output the client sees, and an unknown state name is the
    request's error with Triton's text."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "accumulate")
    write_model(repo, "accumulate", ACCUMULATE)
    s = start_server(repo, backend_directory=str(backends))

    def add(corr, value, start=False, end=False, **parameters):
        result = infer_in(s.url, "accumulate", [value], sequence_id=corr, sequence_start=start,
                          sequence_end=end, parameters=parameters or None)
        assert result.as_numpy("OUTPUT_STATE") is None
        return int(result.as_numpy("OUT")[0])

    check_running_sums(add)
    assert add(7, 4) == 7
    with pytest.raises(InferenceServerException) as err:
        add(7, 1, bad_state=True)
    assert "state 'NOPE' is not a valid state name." in err.value.message()
    assert add(7, 1, end=True) == 8  # the failed request left the state
    assert add(7, 5, start=True) == 5  # a new sequence starts from zero


def test_implicit_state_of_a_decoupled_model(tmp_path, start_grpc):  # noqa: F811
    """The same backend as a decoupled model, over a gRPC stream: the states
    it updates during Execute carry to each sequence's next request, as
    they do for a model that is not decoupled (they were dropped before)."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "accumulate")
    write_model(repo, "accumulate", ACCUMULATE + "model_transaction_policy { decoupled: true }\n")
    s = start_grpc(repo, backend_directory=str(backends))
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        def add(corr, value, start=False, end=False, **parameters):
            inp = grpcclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([value], np.int32))
            client.async_stream_infer("accumulate", [inp], sequence_id=corr,
                                      sequence_start=start, sequence_end=end,
                                      parameters=parameters or None)
            result, error = answers.get(timeout=30)
            if error is not None:
                raise error
            assert result.as_numpy("OUTPUT_STATE") is None
            return int(result.as_numpy("OUT")[0])

        check_running_sums(add)
        assert add(7, 4, end=True) == 7
        assert add(7, 5, start=True) == 5  # a new sequence starts from zero
    finally:
        client.stop_stream()
        client.close()


def test_failures_reach_the_client_as_triton_shapes_them(layout, start_grpc):  # noqa: F811
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    x = np.ones((1, 1), dtype=np.float32)
    for model, text, http_status in (
            ("fail_execute", "execute failed on purpose", 503),
            ("fail_response", "bad request on purpose", 400),
            ("fail_output_name", "unexpected inference output 'NOT_IN_CONFIG' for model "
                                 "'fail_output_name'", 400)):
        inp = httpclient.InferInput("IN", [1, 1], "FP32")
        inp.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as err:
            httpclient.InferenceServerClient(s.url).infer(model, [inp])
        assert text in err.value.message()
        assert err.value.status() == str(http_status)
        ginp = grpcclient.InferInput("IN", [1, 1], "FP32")
        ginp.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException) as gerr:
            grpcclient.InferenceServerClient(s.grpc_url).infer(model, [ginp])
        assert text in gerr.value.message()


def test_initialize_failures_fail_the_load(tmp_path, start_server):
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "failing")
    write_model(repo, "fail_model_init", FAILING)
    write_model(repo, "fail_instance_init", FAILING)
    write_model(repo, "fine", FAILING)
    s = start_server(repo, backend_directory=str(backends), exit_on_error=False)
    client = httpclient.InferenceServerClient(s.url)
    assert client.is_model_ready("fine")
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert "model init failed on purpose" in index["fail_model_init"]["reason"]
    assert "instance init failed on purpose" in index["fail_instance_init"]["reason"]
    assert not client.is_model_ready("fail_model_init")


def test_a_backend_completes_a_config_that_declares_nothing(tmp_path, start_server):
    """identity.c completes a config naming only its backend
    (TRITONBACKEND_ModelAutoCompleteConfig, then ModelSetConfig), as
    Triton's identity backend does: the model serves with what the backend
    set (inputs, outputs, max_batch_size and dynamic batching). With
    auto-complete off, the backend is told so and the load fails."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    write_model(repo, "bare", 'backend: "identity"\n')
    s = start_server(repo, backend_directory=str(backends))
    client = httpclient.InferenceServerClient(s.url)
    config = client.get_model_config("bare")
    assert config["max_batch_size"] == 8
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [-1])]
    assert [t["name"] for t in config["output"]] == ["OUTPUT0"]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inp = httpclient.InferInput("INPUT0", [2, 3], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("bare", [inp]).as_numpy("OUTPUT0"), x)

    strict_repo = tmp_path / "strict"  # (a model folder's instances share one backend model)
    write_model(strict_repo, "bare", 'backend: "identity"\n')
    strict = start_server(strict_repo, backend_directory=str(backends),
                          auto_complete_config=False, exit_on_error=False)
    index = {m["name"]: m for m in httpclient.InferenceServerClient(
        strict.url).get_model_repository_index()}
    assert index["bare"]["state"] == "UNAVAILABLE"
    assert "config has no INPUT0" in index["bare"]["reason"]


def test_a_backend_may_not_change_the_configs_scheduler(tmp_path, start_server):
    """As Triton's core: a scheduler the backend sets is taken only when the
    config chose none."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    write_model(repo, "sequenced", 'backend: "identity"\nsequence_batching { }\n')
    s = start_server(repo, backend_directory=str(backends), exit_on_error=False)
    index = {m["name"]: m for m in httpclient.InferenceServerClient(
        s.url).get_model_repository_index()}
    assert index["sequenced"]["state"] == "UNAVAILABLE"
    assert "changed the scheduler from sequence_batching to dynamic_batching" in \
        index["sequenced"]["reason"]


def test_classification_of_a_c_backend_output(tmp_path, start_grpc):  # noqa: F811
    """Triton's classification extension on what a C backend computed: the
    top-k of each batch row as "value:index:label" over HTTP and gRPC."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    write_model(repo, "identity", IDENTITY.replace(
        'dims: [ -1 ] } ]\ndynamic', 'dims: [ -1 ] label_filename: "labels.txt" } ]\ndynamic'))
    (repo / "identity" / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    s = start_grpc(repo, backend_directory=str(backends))
    x = np.array([[0.5, 3.0, 1.0, 2.0], [9.0, 0.0, 8.0, 1.0]], dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = httpclient.InferRequestedOutput("OUTPUT0", class_count=2)
    got = httpclient.InferenceServerClient(s.url).infer("identity", [inp], outputs=[out])
    assert got.as_numpy("OUTPUT0").tolist() == [[b"3.000000:1:one", b"2.000000:3:three"],
                                                [b"9.000000:0:zero", b"8.000000:2:two"]]
    ginp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    ginp.set_data_from_numpy(x)
    gout = grpcclient.InferRequestedOutput("OUTPUT0", class_count=1)
    got = grpcclient.InferenceServerClient(s.grpc_url).infer("identity", [ginp], outputs=[gout])
    assert got.as_numpy("OUTPUT0").tolist() == [[b"3.000000:1:one"], [b"9.000000:0:zero"]]


def test_a_reshaped_output_reads_with_the_configs_dims(layout, start_grpc):  # noqa: F811
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    got = httpclient.InferenceServerClient(s.url).infer("identity_reshaped", [inp])
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x.reshape(2, 2, 2))
    ginp = grpcclient.InferInput("INPUT0", [2, 4], "FP32")
    ginp.set_data_from_numpy(x)
    got = grpcclient.InferenceServerClient(s.grpc_url).infer("identity_reshaped", [ginp])
    assert got.as_numpy("OUTPUT0").shape == (2, 2, 2)


def test_bf16_reaches_the_backend_and_the_client_as_bf16(layout, start_grpc):  # noqa: F811
    """numpy holds BF16 as uint16 words; the backend is told BF16 (the
    config's type), and its BF16 output reaches the client as BF16."""
    backends, repo = layout
    write_model(repo, "identity_bf16", IDENTITY.replace("TYPE_FP32", "TYPE_BF16"))
    s = start_grpc(repo, backend_directory=str(backends))
    x = np.array([[1.0, -2.0, 0.5, 384.0]], dtype=np.float32)  # exact in bfloat16
    inp = httpclient.InferInput("INPUT0", [1, 4], "BF16")
    inp.set_data_from_numpy(x, binary_data=True)
    got = httpclient.InferenceServerClient(s.url).infer("identity_bf16", [inp])
    assert got.get_output("OUTPUT0")["datatype"] == "BF16"
    np.testing.assert_array_equal(got.as_numpy("OUTPUT0"), x)
    ginp = grpcclient.InferInput("INPUT0", [1, 4], "BF16")
    ginp.set_data_from_numpy(x)
    result = grpcclient.InferenceServerClient(s.grpc_url).infer("identity_bf16", [ginp])
    assert result.get_output("OUTPUT0").datatype == "BF16"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_a_decoupled_execute_that_fails_answers_its_stream_with_the_error(
        layout, start_grpc):  # noqa: F811
    """The backend did not take the requests (Execute returned an error):
    each stream gets the error once, and the model and server go on."""
    backends, repo = layout
    s = start_grpc(repo, backend_directory=str(backends))
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    for _ in range(3):
        inp = grpcclient.InferInput("IN", [1, 1], "FP32")
        inp.set_data_from_numpy(np.ones((1, 1), np.float32))
        client.async_stream_infer("fail_execute_decoupled", [inp])
        result, error = got.get(timeout=30)
        assert result is None and "execute failed on purpose" in str(error)
    values = np.array([1, 2], dtype=np.int32)
    inp = grpcclient.InferInput("IN", [2], "INT32")
    inp.set_data_from_numpy(values)
    client.async_stream_infer("repeat", [inp])
    assert [int(got.get(timeout=30)[0].as_numpy("OUT")[0]) for _ in values] == [1, 2]
    client.stop_stream()
    assert got.empty()  # nothing more came for the failed requests


def serve_params(tmp_path, start_grpc, values):  # noqa: F811
    """A server of params.c's model, a gRPC client of it and an IN of
    ``values``."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "params")
    write_model(repo, "params", PARAMS)
    s = start_grpc(repo, backend_directory=str(backends))
    inp = grpcclient.InferInput("IN", [len(values)], "INT32")
    inp.set_data_from_numpy(np.array(values, dtype=np.int32))
    return s, grpcclient.InferenceServerClient(s.grpc_url), inp


def test_backends_log_what_the_servers_logging_settings_let_through(tmp_path, start_grpc):  # noqa: F811
    """TRITONSERVER_LogIsEnabled follows --log-verbose and the logging
    extension: params.c answers whether verbose logs are on."""
    s, client, inp = serve_params(tmp_path, start_grpc, [0, 1, 2])

    def verbose():
        return client.infer("params", [inp]).get_response().parameters["log_verbose"].bool_param

    assert verbose() is False
    try:
        s.run(s.server.log_settings, {"log_verbose_level": 1})
        assert verbose() is True
    finally:
        s.run(s.server.log_settings, {"log_verbose_level": 0})
    assert verbose() is False


def test_backends_log_to_the_log_file_in_tritons_layout(tmp_path, start_grpc):  # noqa: F811
    """A backend's log lines (TRITONSERVER_LogMessage) go to the --log-file
    once one is set, in Triton's layout (--log-format), the message a JSON
    string; levels the settings turn off are not written."""
    s, client, inp = serve_params(tmp_path, start_grpc, [0, 1, 2])
    log_file = tmp_path / "server.log"
    try:
        s.run(s.server.log_settings, {"log_file": str(log_file)})
        client.infer("params", [inp])
        s.run(s.server.log_settings, {"log_format": "ISO8601", "log_verbose_level": 1})
        client.infer("params", [inp])
    finally:
        s.run(s.server.log_settings, {"log_file": "", "log_format": "default",
                                      "log_verbose_level": 0})
    client.infer("params", [inp])  # to stderr again
    lines = [line for line in log_file.read_text().splitlines() if "params.c" in line]
    pid = os.getpid()
    assert len(lines) == 3, lines
    assert re.fullmatch(r'I\d{4} \d\d:\d\d:\d\d\.\d{6} %d params\.c:\d+\] '
                        r'"params: a \\"batch\\""' % pid, lines[0]), lines[0]
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I %d params\.c:\d+\] '
                        r'"params: a \\"batch\\""' % pid, lines[1]), lines[1]
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ V %d params\.c:\d+\] '
                        r'"params: verbose"' % pid, lines[2]), lines[2]


def test_a_running_request_sees_its_cancellation(tmp_path, start_grpc):  # noqa: F811
    """params.c with IN[0] = -7 polls TRITONBACKEND_RequestIsCancelled inside
    Execute: a gRPC client that cancels the call while it runs (RST_STREAM)
    is seen there at once, as in Triton, not only at the batch's start."""
    s, client, inp = serve_params(tmp_path, start_grpc, [-7])
    log_file = tmp_path / "server.log"
    s.run(s.server.log_settings, {"log_file": str(log_file)})
    try:
        call = client.async_infer("params", [inp], callback=lambda result, error: None)
        wait_for_log(log_file, 'params: a \\"batch\\"')  # logged as its Execute begins
        call.cancel()
        wait_for_log(log_file, "params: cancelled while running", "params: never cancelled")
        assert "params: cancelled while running" in log_file.read_text()
    finally:
        s.run(s.server.log_settings, {"log_file": ""})


def test_an_instance_reads_its_host_policy(tmp_path, start_server, capfd):
    """TRITONBACKEND_ModelInstanceHostPolicy gives the policy --host-policy
    set for the instance (its group's, or the default 'cpu'), which
    identity.c logs as it initializes; an instance with no policy set gets
    its kind's default name with no settings, and its thread runs anywhere."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    write_model(repo, "identity", IDENTITY.replace(
        "count: 2 kind: KIND_CPU", 'count: 1 kind: KIND_CPU host_policy: "numa0"'))
    write_model(repo, "identity_default", IDENTITY.replace("count: 2", "count: 1"))
    cpu = min(os.sched_getaffinity(0))
    s = start_server(repo, backend_directory=str(backends),
                     host_policies={"numa0": {"numa-node": "0", "cpu-cores": f"{cpu}-{cpu}"}})
    logged = capfd.readouterr().err  # the backend's log, in Triton's format on stderr
    # in Triton's layout (nvidia-pytriton's tritonserver logs the same line for this backend)
    assert ('identity: host policy {\\"numa0\\":{\\"cpu-cores\\":\\"%d-%d\\",'
            '\\"numa-node\\":\\"0\\"}}' % (cpu, cpu)) in logged
    assert 'identity: host policy {\\"cpu\\":{}}' in logged
    x = np.ones(3, dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x[None])
    out = httpclient.InferenceServerClient(s.url).infer("identity", [inp]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, x[None])
