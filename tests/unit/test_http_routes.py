"""HttpFrontend's extension routes against a recording fake server: which
Server method each path reaches with which arguments, awaitable results
answered in request order without blocking, restricted API groups, method
checks, and the connection-level limits."""

import asyncio
import json
import socket
import threading

import pytest
import uvloop

from pyserver.frontends.http import HttpFrontend, parse_restricted_api
from pyserver.kernel.errors import Code, ServerError


class RecordingServer:
    def __init__(self):
        self.calls = []

    def is_live(self):
        return True

    def is_ready(self):
        return True

    def metadata(self):
        return {"name": "triton", "version": "0", "extensions": []}

    def model_ready(self, name, version):
        return True

    def model_metadata(self, name, version):
        return {"name": name}

    def model_config(self, name, version):
        return {"name": name}

    def statistics(self, name, version):
        self.calls.append(("statistics", name, version))
        if name == "nope":
            raise ServerError(Code.NOT_FOUND, "Request for unknown model: 'nope' is not found")
        return {"model_stats": [{"name": name, "version": version}]}

    def repository_index(self, ready_only):
        self.calls.append(("index", ready_only))
        return [{"name": "m", "version": "1", "state": "READY", "reason": ""}]

    async def load_model(self, name, config=None, files=None):
        self.calls.append(("load", name, config, files))
        await asyncio.sleep(0.2 if name == "slow" else 0)
        if name == "bad":
            raise ServerError(Code.INVALID_ARG, "failed to load 'bad'")

    async def unload_model(self, name, unload_dependents=False):
        self.calls.append(("unload", name, unload_dependents))

    def trace_settings(self, model, update, network=False):
        assert network  # an update over HTTP says so
        self.calls.append(("trace", model, update))
        return {"trace_level": ["OFF"], "model": model}

    def log_settings(self, update, network=False):
        assert network
        self.calls.append(("log", update))
        return {"log_info": True}

    @property
    def submitter(self):  # what the frontends call per request (Server.submitter)
        return self.submit

    def submit(self, request, future=None):
        self.calls.append(("infer", request.model_name, request.model_version))
        raise ServerError(Code.UNAVAILABLE, "recorded")


@pytest.fixture(scope="module")
def loop():
    lp = uvloop.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(10)
    lp.close()


@pytest.fixture
def front(loop):
    made = []

    def make(**kwargs):
        server = RecordingServer()
        fe = HttpFrontend(server, "127.0.0.1", 0, **kwargs)
        asyncio.run_coroutine_threadsafe(fe.start(), loop).result(10)
        made.append(fe)
        return server, fe

    yield make
    for fe in made:
        asyncio.run_coroutine_threadsafe(fe.stop(), loop).result(10)


def read_response(f):
    line = f.readline()
    status = int(line.split()[1])
    headers = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", 0)))
    return status, headers, json.loads(body) if body else None


def exchange(fe, raw: bytes, count: int = 1):
    s = socket.create_connection(("127.0.0.1", fe.port), timeout=10)
    try:
        f = s.makefile("rb")
        s.sendall(raw)
        return [read_response(f) for _ in range(count)]
    finally:
        s.close()


def req(method, path, body=b"", headers=b""):
    return b"%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s" % (
        method.encode(), path.encode(), headers, len(body), body)


def test_routes_reach_the_server_methods(front):
    server, fe = front()
    cases = [
        (req("GET", "/v2/models/stats"), ("statistics", "", "")),
        (req("GET", "/v2/models/m/stats"), ("statistics", "m", "")),
        (req("GET", "/v2/models/m/versions/3/stats"), ("statistics", "m", "3")),
        (req("GET", "/v2/models/a%20b/stats"), ("statistics", "a b", "")),
        (req("POST", "/v2/repository/index"), ("index", False)),
        (req("POST", "/v2/repository/index", b'{"ready": true}'), ("index", True)),
        (req("POST", "/v2/repository/myrepo/index", b'{}'), ("index", False)),
        (req("POST", "/v2/repository/models/m/load"), ("load", "m", None, None)),
        (req("POST", "/v2/repository/models/m/load",
             b'{"parameters": {"config": "{}", "file:1/model.onnx": "aGVsbG8="}}'),
         ("load", "m", "{}", {"1/model.onnx": b"hello"})),
        (req("POST", "/v2/repository/models/m/unload"), ("unload", "m", False)),
        (req("POST", "/v2/repository/models/m/unload",
             b'{"parameters": {"unload_dependents": true}}'), ("unload", "m", True)),
        (req("GET", "/v2/trace/setting"), ("trace", None, None)),
        (req("POST", "/v2/trace/setting", b'{"trace_rate": "5"}'),
         ("trace", None, {"trace_rate": "5"})),
        (req("POST", "/v2/trace/setting"), ("trace", None, {})),
        (req("GET", "/v2/models/m/trace/setting"), ("trace", "m", None)),
        (req("POST", "/v2/models/m/trace/setting", b'{"trace_count": null}'),
         ("trace", "m", {"trace_count": None})),
        (req("GET", "/v2/logging"), ("log", None)),
        (req("POST", "/v2/logging", b'{"log_info": false}'), ("log", {"log_info": False})),
    ]
    for raw, call in cases:
        server.calls.clear()
        [(status, headers, body)] = exchange(fe, raw)
        assert status == 200, (raw, body)
        assert headers["content-type"] == "application/json"
        assert server.calls == [call], raw
    assert exchange(fe, req("GET", "/v2/models/nope/stats"))[0][::2] == (
        404, {"error": "Request for unknown model: 'nope' is not found"})
    assert exchange(fe, req("POST", "/v2/repository/models/bad/load"))[0][::2] == (
        400, {"error": "failed to load 'bad'"})


def test_unknown_paths_and_methods(front):
    server, fe = front()
    not_found = {"error": "Not Found"}
    not_allowed = {"error": "Method Not Allowed"}
    cases = [
        (req("GET", "/v2/models/m/versions/1/trace/setting"), 404, not_found),
        (req("GET", "/v2/models/m/trace"), 404, not_found),
        (req("GET", "/v2/trace"), 404, not_found),
        (req("GET", "/v2/logging/x"), 404, not_found),
        (req("POST", "/v2/repository"), 404, not_found),
        (req("POST", "/v2/repository/models/m"), 404, not_found),
        (req("POST", "/v2/repository/models/m/reload"), 404, not_found),
        (req("GET", "/v2/systemsharedmemory"), 404, not_found),
        (req("GET", "/v2/systemsharedmemory/region//status"), 404, not_found),
        (req("GET", "/v2/cudasharedmemory/region/r/delete"), 404, not_found),
        (req("POST", "/v2/models/stats"), 405, not_allowed),
        (req("POST", "/v2/models/m/stats"), 405, not_allowed),
        (req("GET", "/v2/repository/index"), 405, not_allowed),
        (req("GET", "/v2/repository/models/m/load"), 405, not_allowed),
        (req("DELETE", "/v2/logging"), 405, not_allowed),
        (req("PUT", "/v2/models/m/trace/setting"), 405, not_allowed),
        (req("POST", "/v2/cudasharedmemory/status"), 405, not_allowed),
        (req("GET", "/v2/cudasharedmemory/unregister"), 405, not_allowed),
        (req("POST", "/v2/logging", b"[]"), 500,  # TritonJson's failures are INTERNAL
         {"error": "attempt to get members for non-object"}),
        # Triton: 500 "unexpected error on creating Triton parameter"; a client mistake (#27)
        (req("POST", "/v2/repository/models/m/load", b'{"parameters": {"other": "x"}}'), 400,
         {"error": "unexpected load parameter 'other': a model load takes 'config' and "
                   "'file:<path>'"}),
        (req("POST", "/v2/repository/models/m/load", b'{"parameters": []}'), 500,
         {"error": "attempt to get members for non-object"}),
    ]
    for raw, status, body in cases:
        [(got, _, got_body)] = exchange(fe, raw)
        assert (raw, got, got_body) == (raw, status, body)
    assert server.calls == []


def test_awaitable_results_keep_pipeline_order(front):
    server, fe = front()
    raw = (req("POST", "/v2/repository/models/slow/load")
           + req("GET", "/v2/health/live")
           + req("GET", "/v2/models/m/stats")
           + req("POST", "/v2/repository/models/bad/load")
           + req("GET", "/v2/logging"))
    responses = exchange(fe, raw, 5)
    assert [r[0] for r in responses] == [200, 200, 200, 400, 200]
    assert responses[2][2]["model_stats"][0]["name"] == "m"
    assert responses[4][2] == {"log_info": True}


def test_restricted_groups(front):
    groups = {
        "health": req("GET", "/v2/health/live"),
        "metadata": req("GET", "/v2"),
        "inference": req("POST", "/v2/models/m/infer", b"{}"),
        "shared-memory": req("GET", "/v2/systemsharedmemory/status"),
        "model-config": req("GET", "/v2/models/m/config"),
        "model-repository": req("POST", "/v2/repository/index"),
        "statistics": req("GET", "/v2/models/stats"),
        "trace": req("GET", "/v2/trace/setting"),
        "logging": req("GET", "/v2/logging"),
    }
    for group, raw in groups.items():
        restrictions = parse_restricted_api([f"{group}:my-key=my-value"])
        server, fe = front(restricted_apis=restrictions)
        [(status, _, body)] = exchange(fe, raw)
        assert (group, status, body) == (
            group, 403, {"error": "This API is restricted, expecting header 'my-key'"})
        # the other groups are open
        for other, other_raw in groups.items():
            if other not in (group, "inference"):
                assert exchange(fe, other_raw)[0][0] == 200, (group, other)
        raw_ok = raw.replace(b"Host: x\r\n", b"Host: x\r\nMY-KEY: my-value\r\n")
        assert exchange(fe, raw_ok)[0][0] != 403
    with pytest.raises(ValueError):
        HttpFrontend(RecordingServer(), restricted_apis={"bogus": ("k", "v")})


def test_shared_memory_routes_without_a_manager_refuse(front):
    server, fe = front()  # the fake server has no shared_memory: client shm disabled
    assert exchange(fe, req("GET", "/v2/systemsharedmemory/status"))[0][::2] == (200, [])
    assert exchange(fe, req("GET", "/v2/cudasharedmemory/status"))[0][::2] == (200, [])
    disabled = {"error": "Client shared memory is disabled. Start the server with "
                         "'--allow-client-shm=true' to enable."}
    for path in ("/v2/systemsharedmemory/region/r/register", "/v2/systemsharedmemory/unregister",
                 "/v2/cudasharedmemory/region/r/register", "/v2/cudasharedmemory/unregister"):
        assert exchange(fe, req("POST", path, b"{}"))[0][::2] == (501, disabled)


def test_header_and_body_limits(front):
    server, fe = front(max_header_size=1024, max_body_size=100)
    [(status, headers, body)] = exchange(
        fe, b"GET /v2 HTTP/1.1\r\nX: " + b"y" * 2000 + b"\r\n\r\n")
    assert status == 431 and headers["connection"] == "close"
    assert body == {"error": "request header fields exceed the maximum allowed size of 1024 bytes"}
    [(status, _, body)] = exchange(fe, req("POST", "/v2/logging", b"{}" * 60))
    assert (status, body) == (413, {"error": "request body of 120 bytes exceeds the maximum "
                                             "allowed size of 100 bytes"})
    chunked = (b"POST /v2/logging HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"40\r\n" + b" " * 64 + b"\r\n" + b"40\r\n" + b" " * 64 + b"\r\n0\r\n\r\n")
    [(status, _, body)] = exchange(fe, chunked)
    assert (status, body) == (413, {"error": "request body exceeds the maximum allowed size of "
                                             "100 bytes"})
    # a request within the limits on a fresh connection is fine
    assert exchange(fe, req("GET", "/v2/logging"))[0][0] == 200


def test_json_body_above_max_input_size(front):
    server, fe = front(max_input_size=16)
    [(status, _, body)] = exchange(fe, req("POST", "/v2/logging", b'{"log_info": true }'))
    assert (status, body) == (400, {"error": (
        "request JSON size of 19 bytes exceeds the maximum allowed input size of 16 bytes. "
        "Use --http-max-input-size to increase the limit.")})


INFER_BODY = b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}'


def test_infer_targets_are_remembered_and_still_checked(front):
    """A repeated infer target skips the routing (HttpFrontend.infer_routes)
    but keeps its model and version, and other methods on it still get 405."""
    server, fe = front()
    for _ in range(2):
        assert exchange(fe, req("POST", "/v2/models/m/versions/2/infer", INFER_BODY))[0][::2] == (
            503, {"error": "recorded"})
        assert exchange(fe, req("POST", "/v2/models/a%20b/infer?x=1", INFER_BODY))[0][0] == 503
    assert server.calls == [("infer", "m", "2"), ("infer", "a b", "")] * 2
    assert exchange(fe, req("GET", "/v2/models/m/versions/2/infer"))[0][::2] == (
        405, {"error": "Method Not Allowed"})
    assert len(fe.infer_routes) == 2


def test_restricted_infer_is_checked_every_time(front):
    restrictions = parse_restricted_api(["inference:my-key=my-value"])
    server, fe = front(restricted_apis=restrictions)
    allowed = req("POST", "/v2/models/m/infer", INFER_BODY, b"my-key: my-value\r\n")
    denied = req("POST", "/v2/models/m/infer", INFER_BODY)
    assert exchange(fe, allowed)[0][0] == 503
    assert exchange(fe, denied)[0][0] == 403
    assert exchange(fe, allowed)[0][0] == 503
    assert server.calls == [("infer", "m", "")] * 2
    assert fe.infer_routes == {}
