"""HttpFrontend end to end: a uvloop loop in a background thread, a fake server
object, the real tritonclient.http (sync and aio) and raw sockets."""

import asyncio
import contextlib
import gc
import gzip
import json
import socket
import threading
import zlib

import numpy as np
import pytest
import uvloop

from pyserver.frontends.http import HttpFrontend
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferResponse, InferTensor

httpclient = pytest.importorskip("tritonclient.http")
aioclient = pytest.importorskip("tritonclient.http.aio")
from tritonclient.utils import InferenceServerException  # noqa: E402

ADD_SUB_CONFIG = {
    "name": "add_sub",
    "platform": "",
    "backend": "python",
    "max_batch_size": 0,
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1, 16]},
        {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [-1, 16]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1, 16]},
        {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [-1, 16]},
    ],
}


def unknown_model(name):
    return ServerError(Code.NOT_FOUND, f"Request for unknown model: '{name}' is not found")


class FakeServer:
    """add_sub (INPUT0/INPUT1 FP32 [-1,16] -> OUTPUT0 = sum, OUTPUT1 = difference),
    "slow_add_sub" (same, answered after a delay given by request parameter
    ``delay_ms``), "boom" (non-ServerError exceptions) and "async_error"
    (the future resolves with a ServerError)."""

    MODELS = ("add_sub", "slow_add_sub", "boom", "async_error", "slow_ready")

    def __init__(self):
        self.live = True
        self.ready = True
        self.calls = []  # (method, model, version) of model calls
        self.requests = []

    def is_live(self):
        return self.live

    def is_ready(self):
        return self.ready

    def metadata(self):
        return {"name": "triton", "version": "2.99.0",
                "extensions": ["classification", "binary_tensor_data"]}

    def _check(self, name):
        if name == "boom":
            raise RuntimeError("kaboom in " + name)
        if name not in self.MODELS:
            raise unknown_model(name)

    def model_ready_check(self, name, version):
        self.calls.append(("ready", name, version))
        self._check(name)
        if name == "slow_ready":  # a model whose own is_ready() is asked
            async def later():
                await asyncio.sleep(0.05)
                return version in ("", "1")
            return later()
        return version in ("", "1")

    def model_metadata(self, name, version):
        self.calls.append(("metadata", name, version))
        self._check(name)
        io = lambda items: [{"name": i["name"], "datatype": "FP32", "shape": i["dims"]}
                            for i in items]
        return {"name": name, "versions": ["1"], "platform": "python",
                "inputs": io(ADD_SUB_CONFIG["input"]), "outputs": io(ADD_SUB_CONFIG["output"])}

    def model_config(self, name, version):
        self.calls.append(("config", name, version))
        self._check(name)
        return dict(ADD_SUB_CONFIG, name=name)

    def _compute(self, request):
        by_name = {t.name: t for t in request.inputs}
        if set(by_name) != {"INPUT0", "INPUT1"}:
            raise ServerError(Code.INVALID_ARG, "expected inputs INPUT0 and INPUT1")
        a, b = by_name["INPUT0"], by_name["INPUT1"]
        for t in (a, b):
            if t.datatype != "FP32":
                raise ServerError(
                    Code.INVALID_ARG,
                    f"inference input '{t.name}' data-type is '{t.datatype}', but model "
                    f"'{request.model_name}' expects 'FP32'")
            if len(t.shape) != 2 or t.shape[1] != 16:
                raise ServerError(
                    Code.INVALID_ARG,
                    f"unexpected shape for input '{t.name}' for model '{request.model_name}'. "
                    f"Expected [-1,16], got {t.shape}")
        x, y = a.data, b.data
        outs = {"OUTPUT0": x + y, "OUTPUT1": x - y}
        wanted = [o.name for o in request.outputs] or ["OUTPUT0", "OUTPUT1"]
        return InferResponse(
            request.model_name, "1", request.id,
            [InferTensor(n, "FP32", list(outs[n].shape), outs[n]) for n in wanted])

    @property
    def submitter(self):  # what the frontends call per request (Server.submitter)
        return self.submit

    def submit(self, request, future=None):
        self.requests.append(request)
        name = request.model_name
        if name == "boom":
            raise RuntimeError("submit exploded")
        if name not in self.MODELS:
            raise unknown_model(name)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if name == "async_error":
            loop.call_soon(fut.set_exception,
                           ServerError(Code.UNAVAILABLE, "Exceeds maximum queue size"))
            return fut
        try:
            response = self._compute(request)
        except ServerError as e:
            fut.set_exception(e)
            return fut
        delay = request.parameters.get("delay_ms", 0) / 1000.0
        if delay:
            loop.call_later(delay, fut.set_result, response)
        else:
            fut.set_result(response)
        return fut


# tritonclient.http's sync client is gevent based and its __del__ must run in
# the thread that created it; keep every client alive until the frontend's
# loop thread has stopped, so a garbage collection triggered in that thread
# never finalizes one.
_clients = []


@contextlib.contextmanager
def serve_fake(**frontend_kwargs):
    """A FakeServer behind an HttpFrontend (made with ``frontend_kwargs``) on
    a loop thread of its own."""
    fake = FakeServer()
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    frontend = HttpFrontend(fake, host="127.0.0.1", port=0, **frontend_kwargs)
    fake.frontend = frontend
    fake.loop = loop
    asyncio.run_coroutine_threadsafe(frontend.start(), loop).result(10)
    assert frontend.port != 0
    fake.port = frontend.port
    fake.url = f"127.0.0.1:{frontend.port}"
    yield fake
    asyncio.run_coroutine_threadsafe(frontend.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()
    for c in _clients:
        c.close()
    _clients.clear()
    gc.collect()


@pytest.fixture(scope="module")
def server():
    with serve_fake() as fake:
        yield fake


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=10)
    _clients.append(c)
    return c


def add_sub_inputs(a, b, binary=True, mod=httpclient):
    inputs = [mod.InferInput("INPUT0", list(a.shape), "FP32"),
              mod.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


def random_pair(rows=1, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 16)).astype(np.float32),
            rng.standard_normal((rows, 16)).astype(np.float32))


# ---------------------------------------------------------------- raw socket helpers


def connect(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return s, s.makefile("rb")


def read_response(f):
    """Read one HTTP response: (status, headers with lower-case names, body)."""
    status_line = f.readline()
    assert status_line, "connection closed before a response"
    version, status, _ = status_line.decode("latin-1").split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode("latin-1").split(":", 1)
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", "0")))
    return int(status), headers, body


def infer_request_bytes(model, a, b, request_id="", extra_params=None, version=None,
                        connection=None):
    doc = {"id": request_id,
           "inputs": [{"name": "INPUT0", "shape": list(a.shape), "datatype": "FP32",
                       "data": a.tolist()},
                      {"name": "INPUT1", "shape": list(b.shape), "datatype": "FP32",
                       "data": b.tolist()}]}
    if extra_params:
        doc["parameters"] = extra_params
    body = json.dumps(doc).encode()
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    if connection:
        head += f"Connection: {connection}\r\n"
    return head.encode() + b"\r\n" + body


# ---------------------------------------------------------------- tritonclient (sync)


def test_health_and_server_metadata(server, client):
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    server.ready = False
    try:
        assert client.is_server_ready() is False
        assert client.is_server_live() is True
    finally:
        server.ready = True
    server.live = False
    try:
        assert client.is_server_live() is False
    finally:
        server.live = True
    md = client.get_server_metadata()
    assert md == {"name": "triton", "version": "2.99.0",
                  "extensions": ["classification", "binary_tensor_data"]}


def test_model_metadata_ready_config(server, client):
    md = client.get_model_metadata("add_sub")
    assert md["name"] == "add_sub" and md["versions"] == ["1"]
    assert [i["name"] for i in md["inputs"]] == ["INPUT0", "INPUT1"]
    assert md["inputs"][0]["shape"] == [-1, 16]
    client.get_model_metadata("add_sub", model_version="1")
    assert server.calls[-2:] == [("metadata", "add_sub", ""), ("metadata", "add_sub", "1")]

    assert client.is_model_ready("add_sub") is True
    assert client.is_model_ready("add_sub", model_version="1") is True
    assert client.is_model_ready("add_sub", model_version="2") is False
    assert server.calls[-1] == ("ready", "add_sub", "2")

    cfg = client.get_model_config("add_sub")
    assert cfg == ADD_SUB_CONFIG
    cfg = client.get_model_config("add_sub", model_version="7")
    assert cfg["name"] == "add_sub" and server.calls[-1] == ("config", "add_sub", "7")


def test_unknown_model_errors(client):
    with pytest.raises(InferenceServerException) as ei:
        client.get_model_metadata("nope")
    assert ei.value.status() == "404"
    assert ei.value.message() == "Request for unknown model: 'nope' is not found"
    with pytest.raises(InferenceServerException) as ei:
        client.get_model_config("nope")
    assert ei.value.status() == "404"
    a, b = random_pair()
    with pytest.raises(InferenceServerException) as ei:
        client.infer("nope", add_sub_inputs(a, b))
    assert ei.value.status() == "404"
    assert ei.value.message() == "Request for unknown model: 'nope' is not found"


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False, None])
def test_infer_add_sub(server, client, binary_in, binary_out):
    a, b = random_pair(rows=3, seed=int(binary_in) * 3 + {True: 0, False: 1, None: 2}[binary_out])
    outputs = None
    if binary_out is not None:
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
                   httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out)]
    result = client.infer("add_sub", add_sub_inputs(a, b, binary=binary_in), outputs=outputs,
                          request_id="req-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    resp = result.get_response()
    assert resp["model_name"] == "add_sub" and resp["model_version"] == "1"
    assert resp["id"] == "req-7"
    is_binary = binary_out is not False  # no outputs requested -> binary_data_output
    for out in resp["outputs"]:
        assert out["shape"] == [3, 16] and out["datatype"] == "FP32"
        assert ("data" in out) is (not is_binary)
        assert ("parameters" in out) is is_binary


def test_infer_one_output_and_version_and_params(server, client):
    a, b = random_pair(seed=5)
    result = client.infer("add_sub", add_sub_inputs(a, b), model_version="1",
                          outputs=[httpclient.InferRequestedOutput("OUTPUT1")],
                          priority=3, timeout=2500, parameters={"custom": "v"})
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None
    req = server.requests[-1]
    assert req.model_version == "1"
    assert req.priority == 3 and req.timeout_us == 2500
    assert req.parameters == {"custom": "v"}


def test_infer_errors_through_client(client):
    a, b = random_pair()
    # validation error raised by the model (future resolved with ServerError)
    bad = [httpclient.InferInput("INPUT0", [1, 8], "FP32"),
           httpclient.InferInput("INPUT1", [1, 8], "FP32")]
    bad[0].set_data_from_numpy(a[:, :8])
    bad[1].set_data_from_numpy(b[:, :8])
    with pytest.raises(InferenceServerException) as ei:
        client.infer("add_sub", bad)
    assert ei.value.status() == "400"
    assert "unexpected shape for input 'INPUT0' for model 'add_sub'" in ei.value.message()
    # asynchronous UNAVAILABLE -> 503
    with pytest.raises(InferenceServerException) as ei:
        client.infer("async_error", add_sub_inputs(a, b))
    assert ei.value.status() == "503" and ei.value.message() == "Exceeds maximum queue size"
    # non-ServerError from submit -> 500 with the message, connection still usable
    with pytest.raises(InferenceServerException) as ei:
        client.infer("boom", add_sub_inputs(a, b))
    assert ei.value.status() == "500" and ei.value.message() == "submit exploded"
    with pytest.raises(InferenceServerException) as ei:
        client.get_model_metadata("boom")
    assert ei.value.status() == "500" and ei.value.message() == "kaboom in boom"
    assert client.is_server_live()


def test_infer_compression(client):
    a, b = random_pair(rows=4, seed=9)
    for req_alg, resp_alg in (("gzip", "deflate"), ("deflate", "gzip"), (None, "gzip")):
        result = client.infer("add_sub", add_sub_inputs(a, b),
                              request_compression_algorithm=req_alg,
                              response_compression_algorithm=resp_alg)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# ---------------------------------------------------------------- tritonclient.http.aio


def test_aio_concurrent_infers(server):
    async def run():
        c = aioclient.InferenceServerClient(server.url)
        try:
            assert await c.is_server_live()
            pairs = [random_pair(rows=1 + i % 3, seed=100 + i) for i in range(24)]
            tasks = [c.infer("add_sub", add_sub_inputs(a, b, binary=i % 2 == 0, mod=aioclient),
                             request_id=str(i))
                     for i, (a, b) in enumerate(pairs)]
            results = await asyncio.gather(*tasks)
            for i, ((a, b), r) in enumerate(zip(pairs, results)):
                assert r.get_response()["id"] == str(i)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
            with pytest.raises(InferenceServerException) as ei:
                await c.infer("nope", add_sub_inputs(*pairs[0], mod=aioclient))
            assert "Request for unknown model: 'nope' is not found" in ei.value.message()
        finally:
            await c.close()

    asyncio.run(run())


# ---------------------------------------------------------------- raw sockets


def test_pipelined_responses_keep_request_order(server):
    a, b = random_pair(seed=11)
    s, f = connect(server)
    try:
        s.sendall(
            infer_request_bytes("slow_add_sub", a, b, "first", {"delay_ms": 200})
            + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            + infer_request_bytes("add_sub", b, a, "third")
            + b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n"
            + infer_request_bytes("slow_add_sub", a, a, "fifth", {"delay_ms": 50}))
        responses = [read_response(f) for _ in range(5)]
    finally:
        s.close()
    statuses = [r[0] for r in responses]
    assert statuses == [200, 200, 200, 404, 200]
    first = json.loads(responses[0][2])
    assert first["id"] == "first"
    np.testing.assert_allclose(first["outputs"][0]["data"], (a + b).reshape(-1))
    assert responses[1][2] == b""
    third = json.loads(responses[2][2])
    assert third["id"] == "third"
    np.testing.assert_allclose(third["outputs"][1]["data"], (b - a).reshape(-1))
    assert json.loads(responses[3][2]) == {"error": "Not Found"}
    assert json.loads(responses[4][2])["id"] == "fifth"


def test_a_ready_check_that_waits_keeps_its_place(server, client):
    """A model whose own is_ready() is asked answers later; a pipelined
    request behind it waits its turn."""
    assert client.is_model_ready("slow_ready") is True
    assert client.is_model_ready("slow_ready", model_version="2") is False
    s, f = connect(server)
    try:
        s.sendall(b"GET /v2/models/slow_ready/versions/2/ready HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /v2/models/add_sub/ready HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /v2/models/slow_ready/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        responses = [read_response(f) for _ in range(3)]
    finally:
        s.close()
    assert [r[0] for r in responses] == [400, 200, 200]
    assert json.loads(responses[0][2]) == {"error": "Model version not ready"}
    assert responses[1][2] == b"" and responses[2][2] == b""


def test_not_found_and_method_not_allowed(server):
    cases = [
        (b"GET /v2/nothing HTTP/1.1\r\n\r\n", 404, {"error": "Not Found"}),
        (b"GET /v3 HTTP/1.1\r\n\r\n", 404, {"error": "Not Found"}),
        (b"GET /v2/ HTTP/1.1\r\n\r\n", 404, {"error": "Not Found"}),
        (b"GET /v2/models/add_sub/versions/abc HTTP/1.1\r\n\r\n", 404, {"error": "Not Found"}),
        (b"GET /v2/models/add_sub/versions/1/bogus HTTP/1.1\r\n\r\n", 404,
         {"error": "Not Found"}),
        (b"GET /v2/models//ready HTTP/1.1\r\n\r\n", 404, {"error": "Not Found"}),
        (b"GET /v2/health/sleepy HTTP/1.1\r\n\r\n", 404, {"error": "Not Found"}),
        (b"GET /v2/models/add_sub/infer HTTP/1.1\r\n\r\n", 405,
         {"error": "Method Not Allowed"}),
        (b"POST /v2/health/live HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405,
         {"error": "Method Not Allowed"}),
        (b"DELETE /v2 HTTP/1.1\r\n\r\n", 405, {"error": "Method Not Allowed"}),
        (b"PUT /v2/models/add_sub/config HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405,
         {"error": "Method Not Allowed"}),
        (b"GET /v2/models/nope/ready HTTP/1.1\r\n\r\n", 404,
         {"error": "Request for unknown model: 'nope' is not found"}),
        (b"GET /v2/models/add_sub/versions/3/ready HTTP/1.1\r\n\r\n", 400,
         {"error": "Model version not ready"}),
    ]
    s, f = connect(server)
    try:
        for raw, status, body in cases:
            s.sendall(raw)
            got_status, headers, got_body = read_response(f)
            assert (raw, got_status) == (raw, status)
            assert headers["content-type"] == "application/json"
            assert json.loads(got_body) == body
        # the same connection still serves requests; a query string is ignored
        s.sendall(b"GET /v2/health/ready?x=1 HTTP/1.1\r\n\r\n")
        assert read_response(f)[0] == 200
    finally:
        s.close()


def test_malformed_json_and_binary_errors(server):
    s, f = connect(server)
    try:
        body = b'{"inputs": [ {"name": '
        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        status, headers, payload = read_response(f)
        assert status == 500  # TritonJson's parse failure is INTERNAL in Triton
        assert headers["content-type"] == "application/json"
        assert json.loads(payload)["error"].startswith("failed to parse the request JSON buffer")

        js = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 64}}]}).encode()
        body = js + b"\0" * 10
        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: %d\r\n"
                  b"Inference-Header-Content-Length: %d\r\n\r\n%s" % (len(body), len(js), body))
        status, _, payload = read_response(f)
        assert status == 400
        assert json.loads(payload)["error"] == (
            "unexpected size for input 'INPUT0', expecting 54 additional bytes for model "
            "'add_sub'")
        # still usable afterwards
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\n\r\n")
        assert read_response(f)[0] == 200
    finally:
        s.close()


def test_binary_response_headers_on_the_wire(server):
    a, b = random_pair(seed=3)
    js = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}).encode()
    body = js + a.tobytes() + b.tobytes()
    s, f = connect(server)
    try:
        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: %d\r\n"
                  b"Inference-Header-Content-Length: %d\r\n\r\n%s" % (len(body), len(js), body))
        status, headers, payload = read_response(f)
    finally:
        s.close()
    assert status == 200
    assert headers["content-type"] == "application/octet-stream"
    hlen = int(headers["inference-header-content-length"])
    doc = json.loads(payload[:hlen])
    assert doc["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16],
                               "parameters": {"binary_data_size": 64}}]
    np.testing.assert_array_equal(np.frombuffer(payload[hlen:], np.float32), (a + b)[0])


def test_connection_close_and_http10(server):
    s, f = connect(server)
    try:
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nConnection: close\r\n\r\n"
                  b"GET /v2/health/live HTTP/1.1\r\n\r\n")  # must be ignored
        status, headers, _ = read_response(f)
        assert status == 200 and headers["connection"] == "close"
        assert f.read() == b""  # server closed, second request not answered
    finally:
        s.close()

    a, b = random_pair(seed=4)
    s, f = connect(server)
    try:
        s.sendall(infer_request_bytes("add_sub", a, b, "c", connection="close"))
        status, headers, payload = read_response(f)
        assert status == 200 and headers["connection"] == "close"
        assert json.loads(payload)["id"] == "c"
        assert f.read() == b""
    finally:
        s.close()

    # HTTP/1.0 without keep-alive: answered, then closed
    s, f = connect(server)
    try:
        s.sendall(b"GET /v2 HTTP/1.0\r\n\r\n")
        status, headers, payload = read_response(f)
        assert status == 200 and json.loads(payload)["name"] == "triton"
        assert f.read() == b""
    finally:
        s.close()

    # HTTP/1.0 with keep-alive: connection stays open
    s, f = connect(server)
    try:
        for _ in range(2):
            s.sendall(b"GET /v2/health/ready HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, _ = read_response(f)
            assert status == 200 and headers["connection"] == "keep-alive"
    finally:
        s.close()


def test_malformed_http_gets_400_and_close(server):
    s, f = connect(server)
    try:
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        status, headers, payload = read_response(f)
        assert status == 400 and headers["connection"] == "close"
        assert "error" in json.loads(payload)
        assert f.read() == b""
    finally:
        s.close()


def test_chunked_request_and_expect_continue(server):
    a, b = random_pair(seed=8)
    full = infer_request_bytes("add_sub", a, b, "chunked")
    body = full.split(b"\r\n\r\n", 1)[1]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 100]), body[i:i + 100])
                       for i in range(0, len(body), 100)) + b"0\r\n\r\n"
    s, f = connect(server)
    try:
        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                  b"\r\n" + chunked)
        status, _, payload = read_response(f)
        assert status == 200 and json.loads(payload)["id"] == "chunked"

        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: %d\r\n"
                  b"Expect: 100-continue\r\n\r\n" % len(body))
        assert f.readline() == b"HTTP/1.1 100 Continue\r\n"
        assert f.readline() == b"\r\n"
        s.sendall(body)
        status, _, payload = read_response(f)
        assert status == 200 and json.loads(payload)["id"] == "chunked"
    finally:
        s.close()


def test_gzip_request_body_on_the_wire(server):
    a, b = random_pair(seed=12)
    full = infer_request_bytes("add_sub", a, b, "gz")
    body = gzip.compress(full.split(b"\r\n\r\n", 1)[1])
    s, f = connect(server)
    try:
        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: %d\r\n"
                  b"Content-Encoding: gzip\r\nAccept-Encoding: deflate;q=0.5, gzip;q=0.2\r\n"
                  b"\r\n%s" % (len(body), body))
        status, headers, payload = read_response(f)
        assert status == 200 and headers["content-encoding"] == "deflate"
        doc = json.loads(zlib.decompress(payload))
        assert doc["id"] == "gz"
        np.testing.assert_allclose(doc["outputs"][0]["data"], (a + b).reshape(-1))

        s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 3\r\n"
                  b"Content-Encoding: br\r\n\r\nabc")
        status, _, payload = read_response(f)
        assert status == 501 and json.loads(payload) == {"error": "Unsupported compression type"}
    finally:
        s.close()


def test_percent_encoded_model_name(server, client):
    with pytest.raises(InferenceServerException) as ei:
        client.get_model_metadata("my model")
    assert ei.value.message() == "Request for unknown model: 'my model' is not found"
