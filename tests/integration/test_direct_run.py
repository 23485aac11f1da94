"""A request to a model on the event loop that would run alone runs as it
is read (engine/batch_execution.pyx DirectRoute): from the gRPC reader's
views (engine/protocol/grpc_codec.pyx InferHandler._run_direct), or, for
any protocol, once Admission.submit has validated it. The same answers,
errors and statistics as through the queue; a request that needs more
takes the general path and queues."""

import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from pyserver._proto import message_class
from pyserver.backends import register_backend
from pyserver.backends.base import Capability
from pyserver.frontends.grpc import GrpcFrontend
from pyserver.model import inline as inline_instance
from pyserver.testing import write_add_sub

METHOD = "/inference.GRPCInferenceService/ModelInfer"
A = np.arange(16, dtype=np.float32)
B = np.full(16, 3.0, dtype=np.float32)

CHEAP_CONFIG = """
name: "{name}"
backend: "direct_test_backend"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
default_model_filename: "model"
"""


class DoublingBackend:
    """Doubles its input; fails a negative one; sleeps ``pause`` seconds."""

    capabilities = Capability.RUNS_INLINE
    runs: list = []  # the thread of each run
    pause = 0.0

    def __init__(self, model_path, config, instance_name, device, threads):
        pass

    def execute(self, inputs):
        x = inputs["IN"]
        type(self).runs.append(threading.current_thread().name)
        if self.pause:
            time.sleep(self.pause)
        if (x < 0).any():
            raise ValueError("negative input")
        return {"OUT": x * 2}


@pytest.fixture(autouse=True)
def cheap_means_under_1ms(monkeypatch):
    # as in test_inline_execution: a slow machine still moves cheap models
    monkeypatch.setattr(inline_instance, "CHEAP_NS", 1_000_000)


@pytest.fixture
def repo(tmp_path):
    register_backend("direct_test_backend", DoublingBackend)
    DoublingBackend.runs = []
    DoublingBackend.pause = 0.0
    write_add_sub(tmp_path, "add_sub", max_batch_size=0)
    write_add_sub(tmp_path, "add_sub_batching", max_batch_size=8)
    write_add_sub(tmp_path, "add_sub_dyn", max_batch_size=8, extra="dynamic_batching { }")
    for name, mbs in (("doubling", 4), ("doubling_unbatched", 0)):
        d = tmp_path / name
        (d / "1").mkdir(parents=True)
        (d / "1" / "model").write_text("")
        (d / "config.pbtxt").write_text(CHEAP_CONFIG.format(name=name, max_batch_size=mbs))
    return tmp_path


class Served:
    def __init__(self, srv, frontend):
        self.srv = srv
        self.frontend = frontend
        self.url = f"127.0.0.1:{frontend.port}"
        self.client = grpcclient.InferenceServerClient(self.url)

    def model(self, name):
        return self.srv.run(lambda: self.srv.server.models.resolve(name, ""))

    def runs(self, name):
        direct = self.model(name).route.direct
        return None if direct is None else direct.runs

    def stats(self, name):
        return self.srv.run(self.srv.server.model_statistics, name)

    def add_sub(self, name, a=A, b=B, **kwargs):
        shape = list(a.shape)
        inputs = [grpcclient.InferInput("INPUT0", shape, "FP32"),
                  grpcclient.InferInput("INPUT1", shape, "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        return self.client.infer(name, inputs, **kwargs)

    def double(self, name, x):
        inp = grpcclient.InferInput("IN", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return self.client.infer(name, [inp]).as_numpy("OUT")

    def move_to_loop(self, name, call):
        """Requests until the model runs on the loop (model/inline.py)."""
        for _ in range(4 * inline_instance.SAMPLES):
            call()
            if self.model(name).inline.inline:
                return
        pytest.fail(f"{name} never moved to the loop")


@pytest.fixture
def serve(start_server):
    started = []

    def start(repo):
        srv = start_server(repo)
        frontend = GrpcFrontend(srv.server, "127.0.0.1", 0)
        srv.call(frontend.start())
        served = Served(srv, frontend)
        started.append(served)
        return served

    yield start
    for served in started:
        served.client.close()
        served.srv.call(served.frontend.stop(5))


def raw_call(url, request, timeout=None):
    """ModelInfer with a request built by hand (``timeout``: its deadline,
    grpc-timeout): ("ok", bytes) or (code, details)."""
    with grpc.insecure_channel(url) as channel:
        call = channel.unary_unary(METHOD, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        try:
            return "ok", call(request.SerializeToString(), timeout=timeout)
        except grpc.RpcError as err:
            return err.code(), err.details()


def test_plain_requests_run_as_they_are_read(repo, serve):
    s = serve(repo)
    s.move_to_loop("add_sub", lambda: s.add_sub("add_sub"))
    before, stats0 = s.runs("add_sub"), s.stats("add_sub")
    for i in range(10):
        r = s.add_sub("add_sub", A + i, B, request_id=f"r{i}")
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + i + B)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A + i - B)
        assert r.get_response().id == f"r{i}"
        assert r.get_response().model_version == "1"
    # only what was asked for, in the order asked
    r = s.add_sub("add_sub", outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in r.get_response().outputs] == ["OUTPUT1"]
    assert s.runs("add_sub") == before + 11
    # counted as the queue would count a request run alone
    stats = s.stats("add_sub")
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert stats["inference_stats"][key]["count"] == \
            stats0["inference_stats"][key]["count"] + 11, key
    assert stats["inference_count"] == stats0["inference_count"] + 11
    assert stats["execution_count"] == stats0["execution_count"] + 11
    assert stats["inference_stats"]["success"]["ns"] > stats0["inference_stats"]["success"]["ns"]
    assert stats["pending_count"] == 0
    # the readers check a request by the rules the model's request path holds
    mv = s.model("add_sub")
    assert mv.route.direct.spec is mv.plain_spec is not None


def test_a_batching_model_without_dynamic_batching(repo, serve):
    s = serve(repo)
    two = np.stack([A, A + 1])
    s.move_to_loop("add_sub_batching", lambda: s.add_sub("add_sub_batching", two, two))
    before, stats0 = s.runs("add_sub_batching"), s.stats("add_sub_batching")
    r = s.add_sub("add_sub_batching", two, two)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), two * 2)
    assert r.as_numpy("OUTPUT0").shape == (2, 16)
    assert s.runs("add_sub_batching") == before + 1
    stats = s.stats("add_sub_batching")
    assert stats["inference_count"] == stats0["inference_count"] + 2
    assert stats["execution_count"] == stats0["execution_count"] + 1
    assert any(b["batch_size"] == 2 for b in stats["batch_stats"])


def test_dynamic_batching_always_queues(repo, serve):
    s = serve(repo)
    one = A.reshape(1, 16)
    for _ in range(2 * inline_instance.SAMPLES):
        np.testing.assert_array_equal(s.add_sub("add_sub_dyn", one, one).as_numpy("OUTPUT0"),
                                      one * 2)
    assert s.model("add_sub_dyn").route.direct is None  # the batcher forms its batches


def test_requests_the_grpc_reader_declines_still_run_unqueued(repo, serve):
    """What the gRPC reader leaves to the full decode (a parameter,
    classification) is still run as the queue would run it alone
    (Admission.submit); a call with a deadline is run as read (it ends
    before the deadline can pass); a version named goes the general way and
    queues."""
    s = serve(repo)
    s.move_to_loop("add_sub", lambda: s.add_sub("add_sub"))
    before, queued0 = s.runs("add_sub"), s.stats("add_sub")["inference_stats"]["queue"]["ns"]
    r = s.add_sub("add_sub", priority=1)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    r = s.add_sub("add_sub", client_timeout=30)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
    r = s.add_sub("add_sub", outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=1)])
    assert r.as_numpy("OUTPUT0")[0].decode().startswith("18")  # the top class: 15 + 3
    assert s.runs("add_sub") == before + 3
    r = s.add_sub("add_sub", model_version="1")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    assert s.runs("add_sub") == before + 3
    # the server stopping: its own path says so
    ledger = s.srv.server._ledger
    s.srv.run(setattr, ledger, "stopping", True)
    try:
        assert s.srv.run(s.srv.server.route, "add_sub") is None
    finally:
        s.srv.run(setattr, ledger, "stopping", False)
    assert s.srv.run(lambda: s.srv.server.route("add_sub").runnable()) is not None
    assert s.stats("add_sub")["inference_stats"]["queue"]["ns"] >= queued0


def test_http_requests_run_unqueued(repo, serve):
    """Over HTTP (the infer lane), binary and JSON tensors alike."""
    s = serve(repo)
    url = s.srv.url
    s.move_to_loop("add_sub", lambda: s.add_sub("add_sub"))
    before = s.runs("add_sub")
    client = httpclient.InferenceServerClient(url)
    try:
        for binary in (True, False):
            inputs = [httpclient.InferInput("INPUT0", [16], "FP32"),
                      httpclient.InferInput("INPUT1", [16], "FP32")]
            inputs[0].set_data_from_numpy(A, binary_data=binary)
            inputs[1].set_data_from_numpy(B, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]
            r = client.infer("add_sub", inputs, outputs=outputs, request_id="h")
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
            assert r.get_response()["id"] == "h"
            assert [o["name"] for o in r.get_response()["outputs"]] == ["OUTPUT1"]
        with pytest.raises(InferenceServerException) as err:
            bad = [httpclient.InferInput("INPUT0", [8], "FP32"),
                   httpclient.InferInput("INPUT1", [16], "FP32")]
            bad[0].set_data_from_numpy(A[:8])
            bad[1].set_data_from_numpy(B)
            client.infer("add_sub", bad)
        assert err.value.status() == "400"
        assert "unexpected shape for input 'INPUT0'" in err.value.message()
    finally:
        client.close()
    assert s.runs("add_sub") == before + 2


def test_a_queued_request_is_looked_up_once(repo, start_server, monkeypatch):
    """The readers ask which route a plain request takes (Admission.route),
    and a request that cannot run as it is read (dynamic batching queues
    it) goes to submit with that route, not looked up by name again."""
    from pyserver.engine.admission import Admission
    from pyserver.server import server as server_module

    looked_up, handed = [], []

    class Recording(Admission):
        def route(self, name):
            looked_up.append(name)
            return super().route(name)

        def submit(self, request, future=None, route=None):
            handed.append(route)
            return super().submit(request, future, route)

    monkeypatch.setattr(server_module, "Admission", Recording)
    # as InferRequests (as records they never reach submit: test_plain_records)
    monkeypatch.setenv("PYSERVER_PLAIN_RECORDS", "0")
    srv = start_server(repo)
    frontend = GrpcFrontend(srv.server, "127.0.0.1", 0)
    srv.call(frontend.start())
    s = Served(srv, frontend)
    one = A.reshape(1, 16)
    http = httpclient.InferenceServerClient(srv.url)
    try:
        np.testing.assert_array_equal(s.add_sub("add_sub_dyn", one, one).as_numpy("OUTPUT0"),
                                      one * 2)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        for binary in (True, False):
            for i in inputs:
                i.set_data_from_numpy(one, binary_data=binary)
            np.testing.assert_array_equal(
                http.infer("add_sub_dyn", inputs).as_numpy("OUTPUT1"), one * 0)
        # a deadline, records off: the general path, still looked up once
        s.add_sub("add_sub_dyn", one, one, client_timeout=30)
        assert looked_up == ["add_sub_dyn"] * 4
        model = s.model("add_sub_dyn")
        assert len(handed) == 4 and all(r is model.route for r in handed)
        # a version named: no route to hand, the general path looks it up
        looked_up.clear(), handed.clear()
        s.add_sub("add_sub_dyn", one, one, model_version="1")
        assert looked_up == [] and handed == [None]
    finally:
        http.close()
        s.client.close()
        srv.call(frontend.stop(5))


def _bad_requests():
    """(description, request) pairs the general path refuses, and good ones."""
    Request = message_class("inference.ModelInferRequest")

    def request(model="add_sub", inputs=(("INPUT0", "FP32", [16]), ("INPUT1", "FP32", [16])),
                raw=None, outputs=(), rid="x"):
        req = Request(model_name=model, id=rid)
        for name, datatype, shape in inputs:
            req.inputs.add(name=name, datatype=datatype, shape=shape)
        req.raw_input_contents.extend(raw if raw is not None else
                                      [np.ones(16, np.float32).tobytes()] * len(inputs))
        for name in outputs:
            req.outputs.add(name=name)
        return req

    two = np.ones((2, 16), np.float32).tobytes()
    return [
        ("good", request()),
        ("good, one output", request(outputs=["OUTPUT1"])),
        ("good, batching", request("add_sub_batching",
                                   (("INPUT0", "FP32", [2, 16]), ("INPUT1", "FP32", [2, 16])),
                                   [two, two])),
        ("wrong shape", request(inputs=(("INPUT0", "FP32", [8]), ("INPUT1", "FP32", [16])),
                                raw=[np.ones(8, np.float32).tobytes(),
                                     np.ones(16, np.float32).tobytes()])),
        ("wrong datatype", request(inputs=(("INPUT0", "INT32", [16]),
                                           ("INPUT1", "FP32", [16])))),
        ("unknown input", request(inputs=(("INPUT0", "FP32", [16]), ("NOPE", "FP32", [16])))),
        ("input twice", request(inputs=(("INPUT0", "FP32", [16]), ("INPUT0", "FP32", [16])))),
        ("input missing", request(inputs=(("INPUT0", "FP32", [16]),))),
        ("byte size", request(raw=[np.ones(16, np.float32).tobytes(), b"\0" * 60])),
        ("unknown output", request(outputs=["NOPE"])),
        ("output twice", request(outputs=["OUTPUT0", "OUTPUT0"])),
        ("no batch dim", request("add_sub_batching")),
        ("batch too large", request(
            "add_sub_batching", (("INPUT0", "FP32", [9, 16]), ("INPUT1", "FP32", [9, 16])),
            [np.ones((9, 16), np.float32).tobytes()] * 2)),
        ("batch of none", request(
            "add_sub_batching", (("INPUT0", "FP32", [0, 16]), ("INPUT1", "FP32", [0, 16])),
            [b"", b""])),
        ("batch sizes differ", request(
            "add_sub_batching", (("INPUT0", "FP32", [2, 16]), ("INPUT1", "FP32", [1, 16])),
            [two, np.ones((1, 16), np.float32).tobytes()])),
        ("no such model", request("nope")),
    ]


def direct_and_queued(repo, serve, monkeypatch):
    """A server whose add_sub models run on the loop, and one whose
    requests all queue (PYSERVER_DIRECT_RUN=0)."""
    direct = serve(repo)
    two = np.stack([A, A])
    for name, call in (("add_sub", lambda: direct.add_sub("add_sub")),
                       ("add_sub_batching", lambda: direct.add_sub("add_sub_batching", two, two))):
        direct.move_to_loop(name, call)
    monkeypatch.setenv("PYSERVER_DIRECT_RUN", "0")
    return direct, serve(repo)


def test_answers_and_errors_are_the_general_paths(repo, serve, monkeypatch):
    """The same requests against a server whose requests all queue
    (PYSERVER_DIRECT_RUN=0): the same answers, byte for byte, and the same
    errors, code and text."""
    direct, queued = direct_and_queued(repo, serve, monkeypatch)
    assert queued.frontend._infer is not None
    cases = _bad_requests()
    before = direct.runs("add_sub") + direct.runs("add_sub_batching")
    for what, req in cases:
        got, want = raw_call(direct.url, req), raw_call(queued.url, req)
        assert got == want, what
    # the good ones ran directly; none of the others did
    assert direct.runs("add_sub") + direct.runs("add_sub_batching") == before + 3
    assert queued.runs("add_sub") is None


def test_a_failed_run_fails_only_its_request(repo, serve):
    s = serve(repo)
    x = np.ones((1, 2), np.float32)
    s.move_to_loop("doubling", lambda: s.double("doubling", x))
    before, stats0 = s.runs("doubling"), s.stats("doubling")
    with pytest.raises(InferenceServerException) as err:
        s.double("doubling", -x)
    assert err.value.status() == "StatusCode.INTERNAL"
    assert "ValueError: negative input" in err.value.message()
    np.testing.assert_array_equal(s.double("doubling", x), 2 * x)
    assert s.runs("doubling") == before + 2
    assert DoublingBackend.runs[-1] == s.srv.thread.name  # on the loop
    stats = s.stats("doubling")
    assert stats["inference_stats"]["fail"]["count"] == stats0["inference_stats"]["fail"]["count"] + 1
    assert stats["failure_reasons"]["BACKEND"] == stats0["failure_reasons"]["BACKEND"] + 1
    assert stats["inference_stats"]["success"]["count"] == \
        stats0["inference_stats"]["success"]["count"] + 1


def test_a_model_that_gets_costly_goes_back_to_its_threads(repo, serve):
    s = serve(repo)
    x = np.ones(2, np.float32)
    s.move_to_loop("doubling_unbatched", lambda: s.double("doubling_unbatched", x))
    DoublingBackend.pause = 0.003  # 3 ms a run: too long for the loop
    for _ in range(12):
        np.testing.assert_array_equal(s.double("doubling_unbatched", x), 2 * x)
    assert not s.model("doubling_unbatched").inline.inline
    assert DoublingBackend.runs[-1] != s.srv.thread.name  # its instance thread now
    runs = s.runs("doubling_unbatched")
    s.double("doubling_unbatched", x)
    assert s.runs("doubling_unbatched") == runs  # queued, not run as read


def _http_cases():
    """(description, model, headers, body) HTTP infer requests, good and bad."""
    import json

    def binary(doc, *arrays):
        header = json.dumps(doc).encode()
        return {"Inference-Header-Content-Length": str(len(header))}, \
            header + b"".join(a.tobytes() for a in arrays)

    def tensor(name, shape, n, datatype="FP32"):
        return {"name": name, "shape": shape, "datatype": datatype,
                "parameters": {"binary_data_size": n}}

    ones = np.ones(16, np.float32)
    inf = np.full(16, np.inf, np.float32)
    cases = [
        ("json data", "add_sub", {}, json.dumps({"id": "j", "inputs": [
            {"name": "INPUT0", "shape": [16], "datatype": "FP32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [16], "datatype": "FP32", "data": [1] * 16}]}).encode()),
        ("json data, outputs {}", "add_sub", {}, json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [16], "datatype": "FP32", "data": [2] * 16},
            {"name": "INPUT1", "shape": [16], "datatype": "FP32", "data": [1] * 16}],
            "outputs": [{"name": "OUTPUT1", "parameters": {}}]}).encode()),
    ]
    for what, doc, arrays in (
        ("binary, all outputs binary", {"inputs": [tensor("INPUT0", [16], 64),
                                                    tensor("INPUT1", [16], 64)],
                                         "parameters": {"binary_data_output": True}},
         (ones, ones)),
        ("binary in, JSON out", {"id": "b", "inputs": [tensor("INPUT0", [16], 64),
                                                        tensor("INPUT1", [16], 64)]},
         (ones, ones)),
        ("mixed outputs", {"inputs": [tensor("INPUT0", [16], 64), tensor("INPUT1", [16], 64)],
                           "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}},
                                       {"name": "OUTPUT0", "parameters": {"binary_data": False}}]},
         (ones, ones)),
        ("NaN as JSON", {"inputs": [tensor("INPUT0", [16], 64), tensor("INPUT1", [16], 64)],
                         "outputs": [{"name": "OUTPUT1"}]}, (inf, inf)),
        ("wrong shape", {"inputs": [tensor("INPUT0", [8], 32), tensor("INPUT1", [16], 64)]},
         (ones[:8], ones)),
        ("wrong datatype", {"inputs": [tensor("INPUT0", [16], 64, "INT32"),
                                       tensor("INPUT1", [16], 64)]}, (ones, ones)),
        ("unknown input", {"inputs": [tensor("INPUT0", [16], 64), tensor("NOPE", [16], 64)]},
         (ones, ones)),
        ("input missing", {"inputs": [tensor("INPUT0", [16], 64)]}, (ones,)),
        ("binary size", {"inputs": [tensor("INPUT0", [16], 64), tensor("INPUT1", [16], 60)]},
         (ones, ones[:15])),
        ("unknown output", {"inputs": [tensor("INPUT0", [16], 64), tensor("INPUT1", [16], 64)],
                            "outputs": [{"name": "NOPE"}]}, (ones, ones)),
        ("output twice", {"inputs": [tensor("INPUT0", [16], 64), tensor("INPUT1", [16], 64)],
                          "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}, (ones, ones)),
    ):
        headers, body = binary(doc, *arrays)
        cases.append((what, "add_sub", headers, body))
    headers, body = binary({"inputs": [tensor("INPUT0", [2, 16], 128),
                                       tensor("INPUT1", [2, 16], 128)]},
                           np.ones((2, 16), np.float32), np.ones((2, 16), np.float32))
    cases.append(("batching", "add_sub_batching", headers, body))
    headers, body = binary({"inputs": [tensor("INPUT0", [16], 64), tensor("INPUT1", [16], 64)]},
                           ones, ones)
    cases.append(("no batch dim", "add_sub_batching", headers, body))
    cases.append(("not JSON", "add_sub", {}, b"{nope"))
    return cases


def _http_call(url, model, headers, body):
    import http.client
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
        r = conn.getresponse()
        return r.status, sorted((k, v) for k, v in r.getheaders() if k.lower() != "date"), \
            r.read()
    finally:
        conn.close()


def test_http_answers_and_errors_are_the_general_paths(repo, serve, monkeypatch):
    """As over gRPC: the same HTTP requests against a server whose requests
    all queue, the same status, headers and bytes (a NaN asked for as JSON
    data goes through the general encoder after the run)."""
    direct, queued = direct_and_queued(repo, serve, monkeypatch)
    before = direct.runs("add_sub") + direct.runs("add_sub_batching")
    for what, model, headers, body in _http_cases():
        got = _http_call(direct.srv.url, model, headers, body)
        want = _http_call(queued.srv.url, model, headers, body)
        assert got == want, what
    # the five good ones and the NaN ran directly; none of the others did
    assert direct.runs("add_sub") + direct.runs("add_sub_batching") == before + 7
    assert queued.runs("add_sub") is None


# ---------------------------------------------------------------- fuzzed pairs

_NAMES = ["INPUT0", "INPUT1", "NOPE"]
_DATATYPES = ["FP32", "INT32", "FP64", "BYTES"]
_SHAPES = [[16], [1, 16], [2, 16], [8], [0, 16], [9, 16], [], [16, 1], [-1, 16]]
_OUTPUTS = ["OUTPUT0", "OUTPUT1", "NOPE"]


@st.composite
def _near_plain(draw):
    """A plain request with up to two of its fields changed: (model,
    [(name, datatype, shape, byte size sent)], requested outputs,
    parameters)."""
    model = draw(st.sampled_from(["add_sub", "add_sub_batching"]))
    shape = [16] if model == "add_sub" else [draw(st.integers(1, 3)), 16]
    inputs = [["INPUT0", "FP32", shape, None], ["INPUT1", "FP32", shape, None]]
    outputs = draw(st.sampled_from([[], ["OUTPUT1"], ["OUTPUT0", "OUTPUT1"]]))
    for _ in range(draw(st.integers(0, 2))):
        change = draw(st.sampled_from(["name", "datatype", "shape", "size", "drop", "twice",
                                       "output"]))
        i = draw(st.integers(0, len(inputs) - 1)) if inputs else None
        if change == "name" and inputs:
            inputs[i][0] = draw(st.sampled_from(_NAMES))
        elif change == "datatype" and inputs:
            inputs[i][1] = draw(st.sampled_from(_DATATYPES))
        elif change == "shape" and inputs:
            inputs[i][2] = draw(st.sampled_from(_SHAPES))
        elif change == "size" and inputs:
            inputs[i][3] = draw(st.sampled_from([0, 60, 68, 128]))
        elif change == "drop" and inputs:
            inputs.pop(i)
        elif change == "twice" and inputs:
            inputs.append(list(inputs[i]))
        elif change == "output":
            outputs = outputs + [draw(st.sampled_from(_OUTPUTS))]
    cases = []
    for name, datatype, shape, size in inputs:
        if size is None:
            size = max(0, int(np.prod(shape))) * (8 if datatype == "FP64" else 4)
        cases.append((name, datatype, shape, size))
    parameters = draw(st.sampled_from([{}, {}, {}, {"binary_data_output": True},
                                       {"binary_data_output": False}, {"priority": 1}]))
    return model, cases, outputs, parameters


def _grpc_request(model, inputs, outputs, parameters):
    req = message_class("inference.ModelInferRequest")(model_name=model, id="f")
    for name, datatype, shape, size in inputs:
        req.inputs.add(name=name, datatype=datatype, shape=shape)
        req.raw_input_contents.append(bytes(range(256)) * (size // 256) + bytes(size % 256))
    for name in outputs:
        req.outputs.add(name=name)
    for key, value in parameters.items():
        if key == "priority":
            req.parameters[key].int64_param = value
        else:
            req.parameters[key].bool_param = value
    return req


def _http_request(model, inputs, outputs, parameters):
    import json
    doc = {"id": "f", "inputs": [
        {"name": name, "datatype": datatype, "shape": shape,
         "parameters": {"binary_data_size": size}} for name, datatype, shape, size in inputs]}
    if outputs:
        doc["outputs"] = [{"name": name, "parameters": {"binary_data": i % 2 == 0}}
                          for i, name in enumerate(outputs)]
    if parameters:
        doc["parameters"] = parameters
    header = json.dumps(doc).encode()
    body = header + b"".join(bytes(size) for *_, size in inputs)
    return model, {"Inference-Header-Content-Length": str(len(header))}, body


def test_fuzzed_requests_get_the_general_paths_answers(repo, serve, monkeypatch):
    """Requests near the plain case (names, datatypes, shapes, byte sizes,
    outputs and parameters drawn), over gRPC and HTTP, against a server
    whose requests all queue: the same answer or error every time."""
    direct, queued = direct_and_queued(repo, serve, monkeypatch)

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(_near_plain())
    def check(case):
        req = _grpc_request(*case)
        assert raw_call(direct.url, req) == raw_call(queued.url, req), case
        model, headers, body = _http_request(*case)
        assert _http_call(direct.srv.url, model, headers, body) == \
            _http_call(queued.srv.url, model, headers, body), case

    before = direct.runs("add_sub") + direct.runs("add_sub_batching")
    check()
    ran = direct.runs("add_sub") + direct.runs("add_sub_batching") - before
    assert ran >= 20, ran  # a fair share were plain and ran directly
