"""Decoupled Python models (model_transaction_policy { decoupled: true })
streamed over gRPC ModelStreamInfer with tritonclient.grpc: 0, 1 and N
responses, responses sent from other threads after execute returned, errors
mid-stream, several requests in flight on one stream, the empty final
response on and off, and the unary endpoints' refusals."""

import queue
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from tests.integration.conftest import use_execution_mode

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


@pytest.fixture
def repeat(tmp_path, start_server, python_mode):
    repo = tmp_path / "models"
    repo.mkdir()
    for name in ("repeat", "repeat_async", "add_sub"):
        shutil.copytree(MODELS / name, repo / name)
    use_execution_mode(repo, python_mode)
    s = start_server(repo)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    s.grpc = frontend
    s.grpc_url = f"127.0.0.1:{frontend.port}"
    yield s
    s.call(frontend.stop(5))


class Stream:
    """A tritonclient stream whose results land in a queue."""

    def __init__(self, url):
        self.client = grpcclient.InferenceServerClient(url)
        self.results = queue.Queue()
        self.client.start_stream(lambda result, error: self.results.put((result, error)))

    def send(self, n, request_id="", mode="", model="repeat", **kwargs):
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([n], np.int32))
        params = {"mode": mode} if mode else None
        self.client.async_stream_infer(model, [inp], request_id=request_id,
                                       parameters=params, **kwargs)

    def get(self, timeout=30):
        return self.results.get(timeout=timeout)

    def take(self, count):
        return [self.get() for _ in range(count)]

    def quiet(self, wait=0.3):
        """True when nothing more arrives within ``wait`` seconds."""
        try:
            self.results.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self):
        self.client.stop_stream()
        self.client.close()


def final_flag(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def idx(result):
    return int(result.as_numpy("IDX")[0])


@pytest.mark.parametrize("n", [0, 1, 5])
def test_n_responses_then_final(repeat, n):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(n, request_id="r")
        got = stream.take(n)
        for i, (result, error) in enumerate(got):
            assert error is None
            assert idx(result) == i
            assert result.as_numpy("OUT").tolist() == [n]
            assert result.get_response().id == "r"
            assert final_flag(result) is False
            # the model's response parameters travel with each response
            params = result.get_response().parameters
            assert params["idx"].int64_param == i
            assert params["last"].bool_param is (i == n - 1)
            assert params["note"].string_param == ""
        # the final flag alone sends nothing unless the client asks for it
        assert stream.quiet()
    finally:
        stream.close()


@pytest.mark.parametrize("n", [0, 3])
def test_empty_final_response_on_request(repeat, n):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(n, request_id="e", enable_empty_final_response=True)
        got = stream.take(n + 1)
        assert [final_flag(r) for r, _ in got] == [False] * n + [True]
        last = got[-1][0].get_response()
        assert last.outputs == [] and last.id == "e" and last.model_name == "repeat"
        assert stream.quiet()
    finally:
        stream.close()


def test_final_flag_on_the_last_response(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(3, mode="last_final", enable_empty_final_response=True)
        got = stream.take(3)
        assert [final_flag(r) for r, _ in got] == [False, False, True]
        assert [idx(r) for r, _ in got] == [0, 1, 2]
        assert stream.quiet()
    finally:
        stream.close()


def test_responses_sent_from_a_thread_after_execute_returned(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(4, mode="thread", enable_empty_final_response=True)
        got = stream.take(5)
        assert [idx(r) for r, _ in got[:4]] == [0, 1, 2, 3]
        assert final_flag(got[4][0]) is True
    finally:
        stream.close()


def test_error_mid_stream_keeps_the_stream_open(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(3, mode="error_mid", request_id="m")
        first, second, third = stream.take(3)
        assert first[1] is None and idx(first[0]) == 0
        assert second[0] is None and "second one failed" in str(second[1])
        assert third[1] is None and idx(third[0]) == 2
        stream.send(1, request_id="after")
        result, error = stream.get()
        assert error is None and result.get_response().id == "after"
    finally:
        stream.close()


def test_execute_raising_ends_the_request_with_its_error(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(3, mode="raise")
        (ok, err1), (bad, err2) = stream.take(2)
        assert err1 is None and idx(ok) == 0
        assert bad is None
        assert "Failed to process the request(s) for model 'repeat_0_0'" in str(err2)
        assert "gave up after one response" in str(err2)
        assert stream.quiet()
    finally:
        stream.close()


def test_execute_must_return_none(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(1, mode="return_list")
        result, error = stream.get()
        assert result is None
        assert ("Python model 'repeat_0_0' is using the decoupled mode and the execute "
                "function must return None.") in str(error)
    finally:
        stream.close()


def test_send_after_final_raises_in_the_model(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(1, mode="after_final")
        result, error = stream.get()
        assert error is None and final_flag(result) is True
        stream.send(1, mode="report")
        result, error = stream.get()
        assert error is None
        assert result.as_numpy("NOTE")[0] == \
            b"Unable to send response. Response sender has been closed."
    finally:
        stream.close()


def test_concurrent_requests_on_one_stream(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        counts = {f"c{i}": i + 1 for i in range(6)}
        for rid, n in counts.items():
            stream.send(n, request_id=rid, mode="thread" if n % 2 else "",
                        enable_empty_final_response=True)
        got = stream.take(sum(counts.values()) + len(counts))
        by_id = {}
        for result, error in got:
            assert error is None
            by_id.setdefault(result.get_response().id, []).append(result)
        assert set(by_id) == set(counts)
        for rid, results in by_id.items():
            n = counts[rid]
            assert [idx(r) for r in results[:-1]] == list(range(n))
            assert [final_flag(r) for r in results] == [False] * n + [True]
        # a non-decoupled model on the same stream: one final response
        inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
                  grpcclient.InferInput("INPUT1", [4], "FP32")]
        for i in inputs:
            i.set_data_from_numpy(np.ones(4, np.float32))
        stream.client.async_stream_infer("add_sub", inputs, request_id="plain")
        result, error = stream.get()
        assert error is None and final_flag(result) is True
        assert result.as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]
    finally:
        stream.close()


def test_unary_calls_are_refused(repeat):
    inp = grpcclient.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.array([1], np.int32))
    client = grpcclient.InferenceServerClient(repeat.grpc_url)
    with pytest.raises(InferenceServerException) as err:
        client.infer("repeat", [inp])
    assert err.value.status() == "StatusCode.UNIMPLEMENTED"
    assert err.value.message() == \
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    hinp = httpclient.InferInput("IN", [1], "INT32")
    hinp.set_data_from_numpy(np.array([1], np.int32))
    with pytest.raises(InferenceServerException) as err:
        httpclient.InferenceServerClient(repeat.url).infer("repeat", [hinp])
    assert err.value.status() == "501"
    assert err.value.message() == \
        "HTTP end point doesn't support models with decoupled transaction policy"


def test_cancelled_stream_is_seen_by_the_model(repeat):
    stream = Stream(repeat.grpc_url)
    stream.send(6, mode="slow")
    result, error = stream.get()
    assert error is None
    stream.client.stop_stream(cancel_requests=True)
    stream.client.close()
    time.sleep(0.6)  # the model's thread reaches its last response
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(1, mode="report")
        result, error = stream.get()
        assert result.as_numpy("NOTE")[0] == b"cancelled"
        stream.send(2, mode="slow")
        got = stream.take(2)
        assert got[1][0].as_numpy("NOTE")[0] == b"not cancelled"
    finally:
        stream.close()


def test_cancelled_unary_request_is_seen_during_execute(tmp_path, start_server):
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "cancellable", repo / "cancellable")
    s = start_server(repo)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{frontend.port}")

        def infer(wait, **kwargs):
            inp = grpcclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([wait], np.int32))
            return client.infer("cancellable", [inp], **kwargs)

        with pytest.raises(InferenceServerException) as err:
            infer(1, client_timeout=0.3)  # the deadline cancels the running request
        assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        time.sleep(0.2)
        cancelled, waited = infer(0).as_numpy("OUT").tolist()
        assert cancelled == 1.0 and waited < 2.0
    finally:
        s.call(frontend.stop(5))


def test_non_decoupled_model_answers_through_its_sender(tmp_path, start_server):
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "sender_plain", repo / "sender_plain")
    s = start_server(repo)
    client = httpclient.InferenceServerClient(s.url)

    def infer(n):
        inp = httpclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([n], np.int32))
        return client.infer("sender_plain", [inp])

    assert infer(4).as_numpy("OUT").tolist() == [40]
    with pytest.raises(InferenceServerException) as err:
        infer(2)
    assert "second send: Unable to send response. Non-decoupled model cannot send more than " \
        "one response." in err.value.message()
    assert infer(1).as_numpy("OUT").tolist() == [10]


@pytest.mark.parametrize("python_mode", ["process"])  # in-process, the exit is the server's
def test_worker_exit_ends_open_requests_with_an_error(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(3, mode="crash_later", request_id="c")
        (ok, err1), (bad, err2) = stream.take(2)
        assert err1 is None and idx(ok) == 0
        assert bad is None
        assert "python model 'repeat' instance 'repeat_0_0': the worker process" in str(err2)
        assert "exited with code 3 before sending the final response" in str(err2)
        # the worker is restarted and serves again
        deadline = time.monotonic() + 30
        while not repeat.server.model_ready("repeat") and time.monotonic() < deadline:
            time.sleep(0.1)
        stream.send(2, request_id="again")
        assert [idx(r) for r, _ in stream.take(2)] == [0, 1]
    finally:
        stream.close()


def test_async_decoupled_execute_runs_in_the_background(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        for rid in ("a", "b", "c"):
            stream.send(5, request_id=rid, model="repeat_async", enable_empty_final_response=True)
        got = stream.take(3 * 6)
        by_id = {}
        for result, error in got:
            assert error is None
            by_id.setdefault(result.get_response().id, []).append(result)
        overlaps = []
        for rid, results in by_id.items():
            assert [idx(r) for r in results[:-1]] == [0, 1, 2, 3, 4]
            assert final_flag(results[-1]) is True
            overlaps.append(int(results[-2].as_numpy("NOTE")[0]))
        # executes overlapped on the one instance (a synchronous one could not)
        assert max(overlaps) >= 2
    finally:
        stream.close()


def test_unloading_ends_unfinished_requests(tmp_path, start_server):
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "repeat", repo / "repeat")
    s = start_server(repo, model_control_mode="explicit", load_models=["repeat"])
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    stream = Stream(f"127.0.0.1:{frontend.port}")
    try:
        stream.send(1, mode="no_final", request_id="open")
        result, error = stream.get()
        assert error is None and idx(result) == 0
        s.call(s.server.unload_model("repeat"))
        result, error = stream.get()
        assert result is None
        assert "python model 'repeat' instance 'repeat_0_0' was unloaded before sending the " \
            "final response" in str(error)
    finally:
        stream.close()
        s.call(frontend.stop(5))


def test_in_stream_errors_name_the_request_and_say_if_final(repeat):
    """What perf_analyzer reads: an error keeps the stream open and its
    infer_response carries the request's id, model and triton_final_response
    (false for an error response the model sent, true for one that ends the
    request)."""
    import grpc

    from pyserver._proto import message_class

    Request = message_class("inference.ModelInferRequest")
    Response = message_class("inference.ModelStreamInferResponse")

    def request(rid, n, mode):
        req = Request(model_name="repeat", id=rid)
        req.parameters["mode"].string_param = mode
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        t = req.inputs.add(name="IN", datatype="INT32", shape=[1])
        t.contents.int_contents.append(n)
        return req

    with grpc.insecure_channel(repeat.grpc_url) as channel:
        call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                     request_serializer=Request.SerializeToString,
                                     response_deserializer=Response.FromString)
        got = list(call(iter([request("m", 3, "error_mid"), request("r", 1, "raise")]),
                        timeout=30))
    by_id = {}
    for msg in got:
        by_id.setdefault(msg.infer_response.id, []).append(msg)
    mid = by_id["m"]
    assert [m.error_message != "" for m in mid] == [False, True, False, False]
    assert mid[1].error_message == "second one failed"
    assert mid[1].infer_response.model_name == "repeat"
    assert [m.infer_response.parameters["triton_final_response"].bool_param for m in mid] == \
        [False, False, False, True]
    raised = by_id["r"]
    assert raised[0].error_message == ""
    assert "gave up after one response" in raised[1].error_message
    assert raised[1].infer_response.parameters["triton_final_response"].bool_param is True
    assert len(raised) == 2


def test_response_statistics_per_response_index(repeat):
    stream = Stream(repeat.grpc_url)
    try:
        for _ in range(2):
            stream.send(3)
        stream.take(6)
        assert stream.quiet()
    finally:
        stream.close()
    # (tritonclient 2.41's protos predate response_stats: read the server's own.)
    stats = repeat.run(repeat.server.statistics, "repeat")["model_stats"][0]
    rs = stats["response_stats"]
    for index in ("0", "1", "2"):  # three responses each, then a final flag alone
        assert int(rs[index]["success"]["count"]) == 2
        assert int(rs[index]["compute_infer"]["count"]) == 2
        assert int(rs[index]["compute_infer"]["ns"]) > 0
    assert int(rs["3"]["empty_response"]["count"]) == 2
    assert "success" not in rs["3"] or int(rs["3"]["success"].get("count", 0)) == 0



def test_statistics_over_grpc_carry_every_response_index(repeat):
    """A request answered with thousands of responses (an LLM's tokens):
    ModelStatistics over gRPC has an entry per response index, the same as
    the server's own document, and other calls are answered meanwhile."""
    import grpc
    from google.protobuf import json_format

    from pyserver._proto import message_class

    n = 3000
    stream = Stream(repeat.grpc_url)
    try:
        stream.send(n)
        # Another model is served while the stream's responses pour in.
        client = httpclient.InferenceServerClient(repeat.url)
        a = httpclient.InferInput("INPUT0", [4], "FP32")
        a.set_data_from_numpy(np.ones(4, np.float32))
        b = httpclient.InferInput("INPUT1", [4], "FP32")
        b.set_data_from_numpy(np.ones(4, np.float32))
        assert client.infer("add_sub", [a, b]).as_numpy("OUTPUT0").tolist() == [2.0] * 4
        results = stream.take(n)  # (the final flag alone is not sent to the client)
        assert all(error is None for _, error in results)
        assert [idx(r) for r, _ in results] == list(range(n))
        assert stream.quiet()
    finally:
        stream.close()
    Request = message_class("inference.ModelStatisticsRequest")
    Response = message_class("inference.ModelStatisticsResponse")
    with grpc.insecure_channel(repeat.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelStatistics",
                                   request_serializer=Request.SerializeToString,
                                   response_deserializer=Response.FromString)
        got = call(Request(name="repeat"), timeout=30)
    entries = got.model_stats[0].response_stats
    assert len(entries) == n + 1  # n responses and the final flag's empty one
    assert entries[str(n - 1)].success.count == 1
    assert entries[str(n)].empty_response.count == 1
    document = repeat.run(repeat.server.statistics, "repeat")
    assert got == json_format.ParseDict(document, Response(), ignore_unknown_fields=True)

PLUS_ONE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]) for r in requests]
'''

FANOUT = """
name: "fanout"
platform: "ensemble"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "NEXT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "N1" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "repeat" model_version: -1
      input_map { key: "IN" value: "N" }
      output_map { key: "OUT" value: "COUNT" } output_map { key: "IDX" value: "idx" } },
    { model_name: "plus_one" model_version: -1
      input_map { key: "X" value: "idx" } output_map { key: "Y" value: "NEXT" } },
    { model_name: "plus_one" model_version: -1
      input_map { key: "X" value: "N" } output_map { key: "Y" value: "N1" } }
  ]
}
"""


def write_fanout(repo, extra: str = "") -> None:
    """The fanout ensemble (``extra`` appended to its config) over the
    decoupled 'repeat' step and 'plus_one'."""
    shutil.copytree(MODELS / "repeat", repo / "repeat")
    (repo / "plus_one" / "1").mkdir(parents=True)
    (repo / "plus_one" / "1" / "model.py").write_text(PLUS_ONE)
    (repo / "plus_one" / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    (repo / "fanout" / "1").mkdir(parents=True)
    (repo / "fanout" / "config.pbtxt").write_text(FANOUT + extra)


def test_ensemble_with_a_decoupled_step_streams_a_response_per_fork(tmp_path, start_server):
    """Each response of the decoupled step runs the step after it; the step
    that does not depend on it runs once; the ensemble is decoupled."""
    repo = tmp_path / "models"
    write_fanout(repo)
    use_execution_mode(repo, "thread")
    s = start_server(repo)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    try:
        stream = Stream(f"127.0.0.1:{frontend.port}")

        def send(n, request_id):
            inp = grpcclient.InferInput("N", [1], "INT32")
            inp.set_data_from_numpy(np.array([n], np.int32))
            stream.client.async_stream_infer("fanout", [inp], request_id=request_id,
                                             enable_empty_final_response=True)

        send(3, "three")
        results = stream.take(4)
        assert all(error is None for _, error in results), results
        answers = [r for r, _ in results if not final_flag(r) or r.as_numpy("NEXT") is not None]
        assert sorted(int(r.as_numpy("NEXT")[0]) for r in answers) == [1, 2, 3]
        assert all(int(r.as_numpy("COUNT")[0]) == 3 and int(r.as_numpy("N1")[0]) == 4
                   for r in answers)
        last = results[-1][0]
        assert final_flag(last) and last.get_response().id == "three"
        send(0, "none")
        result, error = stream.get()
        assert error is None and final_flag(result) and result.as_numpy("NEXT") is None
        assert stream.quiet()
        stream.close()
        # plus_one ran once per response of repeat (3) and once for N1 (2 requests)
        ran = s.run(s.server.model_statistics, "plus_one")["inference_stats"]["success"]["count"]
        assert ran == 3 + 2
        config = httpclient.InferenceServerClient(s.url).get_model_config("fanout")
        assert config["model_transaction_policy"] == {"decoupled": True}  # as Triton marks it
        with pytest.raises(InferenceServerException) as exc:  # unary: refused as decoupled
            client = httpclient.InferenceServerClient(s.url)
            inp = httpclient.InferInput("N", [1], "INT32")
            inp.set_data_from_numpy(np.array([2], np.int32))
            client.infer("fanout", [inp])
        assert "decoupled" in exc.value.message()
    finally:
        s.call(frontend.stop(5))


FLOOD = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sends N responses of 1 MiB as fast as it can, refilling one array
    (each response must carry what it held when sent); counts them in a
    gauge the test reads."""

    def initialize(self, args):
        family = pb_utils.MetricFamily(name="flood_sent", description="responses sent",
                                       kind=pb_utils.MetricFamily.GAUGE)
        self.sent = family.Metric(labels={})

    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "N").as_numpy()[0])
            sender = r.get_response_sender()
            block = np.zeros(1 << 18, np.float32)
            for i in range(n):
                block[:] = i
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", block)]))
                self.sent.set(i + 1)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''


@pytest.mark.parametrize("pool", [0, 2])
def test_max_response_pool_size_holds_a_decoupled_model_back(tmp_path, start_server,
                                                             python_mode, pool):
    """--grpc-max-response-pool-size (Triton 2.56): with the client not
    reading, a decoupled model may get only that many responses ahead of
    what the connection has taken; unbounded (0), all 50 go into memory.
    Every response arrives, in order, with what it held when sent."""
    (tmp_path / "flood" / "1").mkdir(parents=True)
    (tmp_path / "flood" / "1" / "model.py").write_text(FLOOD)
    (tmp_path / "flood" / "config.pbtxt").write_text(
        'backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
        'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 262144 ] } ]\n')
    use_execution_mode(tmp_path, python_mode)
    s = start_server(tmp_path)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0, max_response_pool_size=pool)
    s.call(frontend.start())
    gate = threading.Event()
    got = queue.Queue()

    def on_result(result, error):
        gate.wait(60)  # the client reads nothing until released
        got.put((result, error))

    def sent():
        for name, _, _, samples in s.server.custom_metrics.snapshot():
            if name == "flood_sent" and samples:
                return int(samples[0][1])
        return 0

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{frontend.port}")
    try:
        client.start_stream(on_result)
        inp = grpcclient.InferInput("N", [1], "INT32")
        inp.set_data_from_numpy(np.array([50], np.int32))
        client.async_stream_infer("flood", [inp])
        before, deadline = -1, time.monotonic() + 20
        while time.monotonic() < deadline:  # until the model stops getting ahead
            time.sleep(0.5)
            now = sent()
            if now == before and now > 0:
                break
            before = now
        held_back = sent()
        gate.set()
        results = [got.get(timeout=60) for _ in range(50)]
        assert all(error is None for _, error in results)
        assert [float(r.as_numpy("OUT")[-1]) for r, _ in results] == [float(i) for i in range(50)]
    finally:
        gate.set()
        client.stop_stream()
        client.close()
        s.call(frontend.stop(5))
    if pool:
        assert 0 < held_back < 50  # what the HTTP/2 window and socket take, plus the pool
    else:
        assert held_back == 50
