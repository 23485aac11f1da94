"""Plain HTTP and gRPC requests to a Python model read straight into their
queue entries (engine/types.pyx PlainPending; http_infer.plain_record,
grpc_codec InferHandler._take_plain): no InferRequest on the way in, no
InferResponse on the way out. Every answer
is compared byte for byte with the one the general path (InferRequest,
InferResponse, the general encoder) gives the same request on the same
server, the model's records switched off between the two."""

import contextlib
import http.client
import json
import shutil
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from pyserver._proto import message_class
from pyserver.backends.base import Capability
from pyserver.frontends.grpc import GrpcFrontend
from tests.integration.test_direct_run import raw_call

MODEL = textwrap.dedent('''
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                if a.reshape(-1)[0] < 0:
                    responses.append(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("negative input: " + request.request_id())))
                    continue
                if a.reshape(-1)[0] == 99:  # a response parameter
                    responses.append(pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("SUM", a + b)],
                        parameters={"seen": "yes"}))
                    continue
                if a.reshape(-1)[0] == 77:  # NaN as JSON data: the general encoder's null
                    a = a.copy()
                    a.reshape(-1)[1] = np.nan
                wanted = request.requested_output_names()
                outputs = [
                    pb_utils.Tensor("SUM", a + b),
                    pb_utils.Tensor("DIFF", a - b),
                    pb_utils.Tensor("ID_LEN", np.full(a.shape[:-1] + (1,),
                                                      len(request.request_id()), np.int32)),
                    # configured FP32, made FP64: the answer names its array's type
                    pb_utils.Tensor("WIDE", (a * 2).astype(np.float64)),
                ]
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[t for t in outputs if t.name() in wanted]))
            return responses
''')

CONFIG = '''name: "{name}"
backend: "python"
max_batch_size: {mbs}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
output [
  {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "ID_LEN" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "WIDE" data_type: TYPE_FP32 dims: [ 4 ] }}
]
{extra}
instance_group [ {{ kind: KIND_CPU }} ]
'''

MODELS = {
    "plain": (0, ""),
    "plain_batched": (8, "dynamic_batching { max_queue_delay_microseconds: 2000 }"),
}


@pytest.fixture
def repo(tmp_path):
    for name, (mbs, extra) in MODELS.items():
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.py").write_text(MODEL)
        (tmp_path / name / "config.pbtxt").write_text(CONFIG.format(name=name, mbs=mbs,
                                                                    extra=extra))
    return tmp_path


def route(server, name):
    return server.run(lambda: server.server.models.resolve(name, "").route)


def post(server, name, body: bytes, header_length=None, headers=None):
    conn = http.client.HTTPConnection(*server.url.split(":"))
    try:
        hdrs = {"Content-Type": "application/octet-stream"}
        if header_length is not None:
            hdrs["Inference-Header-Content-Length"] = str(header_length)
        hdrs.update(headers or {})
        conn.request("POST", f"/v2/models/{name}/infer", body, hdrs)
        r = conn.getresponse()
        return r.status, sorted((k.lower(), v) for k, v in r.getheaders()), r.read()
    finally:
        conn.close()


def request_body(a, b, *, rid=None, outputs=None, binary_inputs=False, params=None,
                 batch=False):
    """A KServe v2 request of add_sub's two inputs; ``outputs``: the
    ``outputs`` list as sent (None: absent)."""
    shape = [1, 4] if batch else [4]
    doc: dict = {}
    if rid is not None:
        doc["id"] = rid
    if params is not None:
        doc["parameters"] = params
    raw = b""
    doc["inputs"] = []
    for name, x in (("INPUT0", a), ("INPUT1", b)):
        x = np.asarray(x, np.float32)
        entry = {"name": name, "shape": shape, "datatype": "FP32"}
        if binary_inputs:
            entry["parameters"] = {"binary_data_size": x.nbytes}
            raw += x.tobytes()
        else:
            entry["data"] = x.tolist()
        doc["inputs"].append(entry)
    if outputs is not None:
        doc["outputs"] = outputs
    header = json.dumps(doc).encode()
    return header + raw, (len(header) if binary_inputs else None)


@contextlib.contextmanager
def records_off(server, r):
    """The model's plain requests as InferRequests while inside (its Route ``r``)."""
    records = r.records
    server.run(setattr, r, "records", None)
    try:
        yield
    finally:
        server.run(setattr, r, "records", records)


def both_ways(server, name, body, hlen, headers=None):
    """The answer with the model's records, then without; asserts the
    record path took the first."""
    r = route(server, name)
    before = r.records_queued
    via_record = post(server, name, body, hlen, headers)
    assert r.records_queued == before + 1, "the record path did not take it"
    with records_off(server, r):
        general = post(server, name, body, hlen, headers)
    return via_record, general


def wait_until_in_flight(server):
    """Until the server holds a request (the one just sent is queued)."""
    for _ in range(500):
        if server.run(lambda: server.server.inflight):
            return
        time.sleep(0.01)


A = [1.5, 2.0, -3.25, 4.0]
B = [0.5, 1.0, 0.25, 8.0]

CASES = {
    "json": dict(),
    "binary inputs": dict(binary_inputs=True),
    "an id": dict(rid="request-17"),
    "outputs named": dict(outputs=[{"name": "DIFF"}, {"name": "SUM"}]),
    "binary outputs": dict(outputs=[{"name": "SUM", "parameters": {"binary_data": True}},
                                    {"name": "WIDE", "parameters": {"binary_data": False}},
                                    {"name": "ID_LEN", "parameters": {}}], rid="x"),
    "binary_data_output": dict(params={"binary_data_output": True}, binary_inputs=True),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("case", CASES)
def test_a_record_is_answered_as_the_general_path_answers(repo, start_server, name, case):
    server = start_server(repo)
    assert route(server, name).records is not None
    body, hlen = request_body(A, B, batch=MODELS[name][0] > 0, **CASES[case])
    via_record, general = both_ways(server, name, body, hlen)
    assert via_record[0] == 200, via_record
    assert via_record == general
    if hlen is None and "binary" not in case:
        doc = json.loads(via_record[2])
        outputs = {o["name"]: o for o in doc["outputs"]}
        if "SUM" in outputs:
            assert outputs["SUM"]["data"] == (np.float32(A) + np.float32(B)).tolist()
        if case == "json":
            # the model saw every output asked for, and the request's id (none)
            assert outputs["WIDE"]["datatype"] == "FP64"
            assert outputs["ID_LEN"]["data"] == [0]
    if case == "an id":
        doc = json.loads(via_record[2])
        assert doc["id"] == "request-17"
        assert {o["name"]: o["data"] for o in doc["outputs"]}["ID_LEN"] == [10]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("first", [-1.0, 99.0, 77.0], ids=["error", "parameters", "nan"])
def test_errors_parameters_and_what_the_writer_declines(repo, start_server, name, first):
    server = start_server(repo)
    body, hlen = request_body([first, 1, 2, 3], B, rid="r1", batch=MODELS[name][0] > 0)
    via_record, general = both_ways(server, name, body, hlen)
    assert via_record == general
    if first < 0:
        assert via_record[0] == 500  # TritonError's default code, INTERNAL
        assert json.loads(via_record[2]) == {"error": "negative input: r1"}
    elif first == 99:
        assert json.loads(via_record[2])["parameters"] == {"seen": "yes"}
    else:
        assert json.loads(via_record[2])["outputs"][0]["data"][1] is None


def test_what_the_rules_decline_takes_the_general_path(repo, start_server):
    server = start_server(repo)
    r = route(server, "plain")
    before = r.records_queued
    # a wrong shape, an unknown output, a priority parameter: the general
    # path's errors and answers, no record
    wrong = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()
    status, _, text = post(server, "plain", wrong)
    assert status == 400 and b"INPUT0" in text
    body, _ = request_body(A, B, outputs=[{"name": "NOPE"}])
    status, _, text = post(server, "plain", body)
    assert status == 400 and b"NOPE" in text
    body, _ = request_body(A, B, params={"priority": 1})
    assert post(server, "plain", body)[0] == 200
    # a compressed answer asked for
    body, _ = request_body(A, B)
    status, headers, _ = post(server, "plain", body, headers={"Accept-Encoding": "gzip"})
    assert status == 200 and ("content-encoding", "gzip") in headers
    assert r.records_queued == before


def test_records_batch_together_and_count_in_the_statistics(repo, start_server):
    server = start_server(repo)
    r = route(server, "plain_batched")
    stats0 = server.run(server.server.model_statistics, "plain_batched")
    before = r.records_queued
    n = 48

    def one(i):
        body, hlen = request_body([i, 1, 2, 3], B, rid=str(i), binary_inputs=i % 2 == 1,
                                  batch=True)
        status, _, data = post(server, "plain_batched", body, hlen)
        assert status == 200
        return i, data

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(n)))
    for i, data in answers:
        doc = json.loads(data)
        assert doc["id"] == str(i)
        sums = {o["name"]: o["data"] for o in doc["outputs"]}["SUM"]
        assert sums == (np.float32([i, 1, 2, 3]) + np.float32(B)).tolist()
    assert r.records_queued == before + n
    stats = server.run(server.server.model_statistics, "plain_batched")

    def counts(m):
        return m["inference_count"], m["execution_count"], m["inference_stats"]["success"]["count"]

    inferences, executions, successes = (x - y for x, y in zip(counts(stats), counts(stats0)))
    assert inferences == successes == n
    assert executions < n  # some of them ran together


def test_a_worker_that_dies_fails_its_records_and_the_model_serves_on(repo, start_server):
    crash = repo / "plain" / "1" / "model.py"
    crash.write_text(MODEL.replace(
        "if a.reshape(-1)[0] < 0:",
        "if a.reshape(-1)[0] == 13:\n" + " " * 16 + "import os; os._exit(3)\n"
        + " " * 12 + "if a.reshape(-1)[0] < 0:"))
    server = start_server(repo)
    r = route(server, "plain")
    body, _ = request_body([13, 1, 2, 3], B)
    status, _, text = post(server, "plain", body)
    assert status == 500 and b"exited with code 3" in text
    # restarted: the next record is answered
    body, _ = request_body(A, B)
    for _ in range(100):
        status, _, text = post(server, "plain", body)
        if status == 200:
            break
    assert status == 200
    assert r.records_queued >= 2


def unload_with_one_queued(server):
    """(status, body) of a request queued (a 3 s batching delay) when its
    model unloads."""
    body, hlen = request_body(A, B, batch=True)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post, server, "plain_batched", body, hlen)
        wait_until_in_flight(server)
        server.call(server.server.unload_model("plain_batched"))
        status, _, text = pending.result(30)
    return status, text


def test_unloading_fails_records_still_queued_as_the_general_path(repo, start_server,
                                                                   monkeypatch):
    (repo / "plain_batched" / "config.pbtxt").write_text(CONFIG.format(
        name="plain_batched", mbs=8,
        extra="dynamic_batching { max_queue_delay_microseconds: 3000000 }"))
    server = start_server(repo, model_control_mode="explicit", load_models=["plain_batched"])
    r = route(server, "plain_batched")
    via_record = unload_with_one_queued(server)
    assert r.records_queued == 1
    monkeypatch.setenv("PYSERVER_PLAIN_RECORDS", "0")
    server = start_server(repo, model_control_mode="explicit", load_models=["plain_batched"])
    assert route(server, "plain_batched").records is None
    general = unload_with_one_queued(server)
    assert via_record == general
    # a request still queued is failed as its model goes (UNAVAILABLE)
    assert via_record[0] == 503, via_record


def test_models_without_records(repo, start_server):
    from tests.integration.test_python_backend import MODELS as PY_MODELS
    shutil.copytree(PY_MODELS / "bytes_echo", repo / "bytes_echo")
    server = start_server(repo)
    assert route(server, "bytes_echo").records is None  # BYTES tensors


def test_records_can_be_switched_off(repo, start_server, monkeypatch):
    monkeypatch.setenv("PYSERVER_PLAIN_RECORDS", "0")
    server = start_server(repo)
    assert route(server, "plain").records is None
    body, _ = request_body(A, B)
    assert post(server, "plain", body)[0] == 200



@pytest.mark.parametrize("io_threads", [0, 2], ids=["loop", "pump"])
def test_records_through_the_infer_lane(repo, start_server, io_threads):
    """Requests after a connection's first take the infer lane (on the loop,
    or read by the socket pump's threads): records there too, answered as
    the general path answers them."""
    from pyserver.frontends.http import HttpFrontend

    server = start_server(repo)
    front = HttpFrontend(server.server, "127.0.0.1", 0, io_threads=io_threads)
    server.call(front.start())
    try:
        r = route(server, "plain_batched")

        def session():
            conn = http.client.HTTPConnection("127.0.0.1", front.port)
            answers = []
            try:
                for i in range(6):
                    body, hlen = request_body([i, 1, 2, 3], B, rid=f"s{i}", batch=True,
                                              binary_inputs=i % 2 == 1,
                                              outputs=[{"name": "SUM"}] if i % 3 else None)
                    hdrs = {} if hlen is None else {"Inference-Header-Content-Length": str(hlen)}
                    conn.request("POST", "/v2/models/plain_batched/infer", body, hdrs)
                    resp = conn.getresponse()
                    answers.append((resp.status, resp.read()))
            finally:
                conn.close()
            return answers

        taken, before = front.lane.taken, r.records_queued
        via_record = session()
        assert front.lane.taken - taken == 5  # all but the connection's first
        assert r.records_queued - before == 6
        with records_off(server, r):
            general = session()
        assert via_record == general
        assert all(status == 200 for status, _ in via_record)
    finally:
        server.call(front.stop())

# -- gRPC ---------------------------------------------------------------------------

@pytest.fixture
def grpc_server(repo, start_server):
    server = start_server(repo)
    frontend = GrpcFrontend(server.server, "127.0.0.1", 0)
    server.call(frontend.start())
    server.grpc_url = f"127.0.0.1:{frontend.port}"
    yield server
    server.call(frontend.stop(5))


def grpc_request(name, first=1.5, rid="", outputs=(), batch=False):
    req = message_class("inference.ModelInferRequest")(model_name=name, id=rid)
    shape = [1, 4] if batch else [4]
    for inp, x in (("INPUT0", [first, 2.0, -3.25, 4.0]), ("INPUT1", B)):
        req.inputs.add(name=inp, datatype="FP32", shape=shape)
        req.raw_input_contents.append(np.asarray(x, np.float32).tobytes())
    for out in outputs:
        req.outputs.add(name=out)
    return req


GRPC_CASES = {
    "all outputs": dict(),  # WIDE is FP64: the general encoder's
    "an id, some outputs": dict(rid="q-5", outputs=("DIFF", "SUM", "ID_LEN")),
    "an error": dict(first=-1.0, rid="bad"),
    "parameters": dict(first=99.0),
    "NaN": dict(first=77.0, outputs=("SUM",)),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("case", GRPC_CASES)
def test_a_grpc_record_is_answered_as_the_general_path_answers(grpc_server, name, case):
    server = grpc_server
    r = route(server, name)
    req = grpc_request(name, batch=MODELS[name][0] > 0, **GRPC_CASES[case])
    before = r.records_queued
    via_record = raw_call(server.grpc_url, req)
    assert r.records_queued == before + 1
    with records_off(server, r):
        general = raw_call(server.grpc_url, req)
    assert via_record == general
    if case == "an error":
        assert via_record == (grpc.StatusCode.INTERNAL, "negative input: bad")
    else:
        assert via_record[0] == "ok"
        answer = message_class("inference.ModelInferResponse").FromString(via_record[1])
        outputs = {o.name: (o.datatype, list(o.shape)) for o in answer.outputs}
        if case == "an id, some outputs":
            assert answer.id == "q-5"
            assert list(outputs) == ["DIFF", "SUM", "ID_LEN"]
            got = dict(zip(outputs, answer.raw_output_contents))
            assert np.frombuffer(got["ID_LEN"], np.int32).tolist() == [3]
        if case == "all outputs":
            assert outputs["WIDE"][0] == "FP64"


@pytest.mark.parametrize("name", MODELS)
def test_a_grpc_call_with_a_deadline_is_read_as_a_record(grpc_server, name):
    server = grpc_server
    r = route(server, name)
    req = grpc_request(name, rid="d-1", batch=MODELS[name][0] > 0)
    before = r.records_queued
    via_record = raw_call(server.grpc_url, req, 30)
    assert r.records_queued == before + 1, "the record path did not take it"
    with records_off(server, r):
        general = raw_call(server.grpc_url, req, 30)
    assert via_record[0] == "ok"
    assert via_record == general


def deadline_passes_in_the_queue(server):
    """A call whose 0.3 s deadline passes while it waits out a 2 s batching
    delay: its outcome, how long it took, and the model's statistics once
    the delay is over (nothing of it ran), with a call after it answered."""
    req = grpc_request("plain_batched", batch=True)
    stats0 = server.run(server.server.model_statistics, "plain_batched")
    start = time.monotonic()
    outcome = raw_call(server.grpc_url, req, 0.3)
    took = time.monotonic() - start
    time.sleep(2.5)  # past the delay: a request still queued would have run by now
    stats = server.run(server.server.model_statistics, "plain_batched")
    assert server.run(lambda: server.server.inflight) == 0
    runs = stats["execution_count"] - stats0["execution_count"]
    canceled = stats["failure_reasons"].get("CANCELED", 0) \
        - stats0["failure_reasons"].get("CANCELED", 0)
    assert raw_call(server.grpc_url, req)[0] == "ok"  # the model serves on
    return outcome, took, runs, canceled


def test_a_record_whose_deadline_passes_leaves_the_queue(repo, start_server):
    """As the general path: DEADLINE_EXCEEDED when grpc-timeout passes, the
    record taken off the queue (never run, counted as CANCELED)."""
    (repo / "plain_batched" / "config.pbtxt").write_text(CONFIG.format(
        name="plain_batched", mbs=8,
        extra="dynamic_batching { max_queue_delay_microseconds: 2000000 }"))
    server = start_server(repo)
    frontend = GrpcFrontend(server.server, "127.0.0.1", 0)
    server.call(frontend.start())
    server.grpc_url = f"127.0.0.1:{frontend.port}"
    try:
        r = route(server, "plain_batched")
        before = r.records_queued
        via_record = deadline_passes_in_the_queue(server)
        assert r.records_queued == before + 2  # the timed call, the raw one after it
        with records_off(server, r):
            general = deadline_passes_in_the_queue(server)
        assert r.records_queued == before + 2
    finally:
        server.call(frontend.stop(5))
    for outcome, took, runs, canceled in (via_record, general):
        assert outcome == (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        assert took < 1.8, took  # ended by the deadline, not by the batch
        assert runs == 0 and canceled == 1


def test_a_full_queue_refuses_a_record_as_it_refuses_a_request(repo, start_server, monkeypatch):
    """max_queue_size: the second request waits behind a long batching delay
    and the third is refused, with the general path's status and text."""
    (repo / "plain_batched" / "config.pbtxt").write_text(CONFIG.format(
        name="plain_batched", mbs=8,
        extra="dynamic_batching { max_queue_delay_microseconds: 1000000 "
              "default_queue_policy { max_queue_size: 1 } }"))

    def refused(server):
        body, hlen = request_body(A, B, batch=True)
        with ThreadPoolExecutor(1) as pool:
            queued = pool.submit(post, server, "plain_batched", body, hlen)
            wait_until_in_flight(server)
            answer = post(server, "plain_batched", body, hlen)
            assert queued.result(30)[0] == 200
        return answer

    server = start_server(repo)
    r = route(server, "plain_batched")
    via_record = refused(server)
    assert r.records_queued == 1  # the refused one was not booked
    assert server.run(lambda: server.server.inflight) == 0
    monkeypatch.setenv("PYSERVER_PLAIN_RECORDS", "0")
    general = refused(start_server(repo))
    assert via_record == general
    assert via_record[0] == 503 and b"queue" in via_record[2], via_record


# -- models whose batches are gathered and cut (RequestPath.scatter) ----------------

BATCH_CONFIG = """
name: "{name}"
backend: "records_test_backend"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
default_model_filename: "model"
"""


class SummingBackend:
    """A backend that takes gathered batches, on its instance thread:
    the sums and differences of each row, as float64 (the config says FP32:
    the answer is typed by the config, as RequestPath.scatter types it); a
    negative first element fails the batch."""

    capabilities = Capability.NONE
    batches: list = []

    def __init__(self, model_path, config, instance_name, device, threads):
        pass

    def execute(self, inputs):
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        type(self).batches.append(len(a))
        if (a[:, 0] < 0).any():
            raise ValueError("negative input")
        return {"SUM": (a + b).astype(np.float64), "DIFF": a - b}


@pytest.fixture
def batch_repo(tmp_path):
    from pyserver.backends import register_backend
    from pyserver.testing import write_add_sub

    register_backend("records_test_backend", SummingBackend)
    SummingBackend.batches = []
    d = tmp_path / "summing"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model").write_text("")
    (d / "config.pbtxt").write_text(BATCH_CONFIG.format(name="summing"))
    write_add_sub(tmp_path, "onnx_dyn", size=4, max_batch_size=8,
                  extra="dynamic_batching { max_queue_delay_microseconds: 20000 }")
    return tmp_path


@pytest.mark.parametrize("name", ["summing", "onnx_dyn"])
def test_batched_records_are_answered_as_the_general_path_answers(batch_repo, start_server,
                                                                  name):
    server = start_server(batch_repo)
    r = route(server, name)
    assert r.records is not None and not r.records.typed_by_arrays
    out = ("SUM", "DIFF") if name == "summing" else ("OUTPUT0", "OUTPUT1")
    cases = [dict(), dict(binary_inputs=True, rid="b"), dict(outputs=[{"name": out[1]}]),
             dict(outputs=[{"name": out[0], "parameters": {"binary_data": True}}], rid="c")]
    for case in cases:
        body, hlen = request_body(A, B, batch=True, **case)
        via_record, general = both_ways(server, name, body, hlen)
        assert via_record[0] == 200, via_record
        assert via_record == general, case
    # several records in one batch, each answered with its rows
    before = r.records_queued

    def one(i):
        body, _ = request_body([i, 1, 2, 3], B, rid=str(i), batch=True)
        status, _, data = post(server, name, body)
        assert status == 200
        doc = json.loads(data)
        assert doc["id"] == str(i)
        return {o["name"]: o["data"] for o in doc["outputs"]}

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(24)))
    for i, outputs in enumerate(answers):
        assert outputs[out[0]] == (np.float32([i, 1, 2, 3]) + np.float32(B)).tolist()
        assert outputs[out[1]] == (np.float32([i, 1, 2, 3]) - np.float32(B)).tolist()
    assert r.records_queued == before + 24
    stats = server.run(server.server.model_statistics, name)
    assert stats["execution_count"] < stats["inference_count"]  # batched together


def test_a_failed_batch_fails_its_records_as_the_general_path(batch_repo, start_server):
    server = start_server(batch_repo)
    body, _ = request_body([-1, 1, 2, 3], B, batch=True)
    via_record, general = both_ways(server, "summing", body, None)
    assert via_record == general
    assert via_record[0] == 500 and b"negative input" in via_record[2]


def test_grpc_batched_records(batch_repo, start_server):
    server = start_server(batch_repo)
    frontend = GrpcFrontend(server.server, "127.0.0.1", 0)
    server.call(frontend.start())
    try:
        url = f"127.0.0.1:{frontend.port}"
        for name in ("summing", "onnx_dyn"):
            r = route(server, name)
            req = grpc_request(name, rid="g", batch=True)
            before = r.records_queued
            via_record = raw_call(url, req)
            assert r.records_queued == before + 1
            with records_off(server, r):
                general = raw_call(url, req)
            assert via_record == general
            assert via_record[0] == "ok"
    finally:
        server.call(frontend.stop(5))
