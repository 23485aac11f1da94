"""The HTTP infer lane (engine/protocol/http_lane.pyx over csrc's InferLane):
an infer request to a target the connection has routed before is read by a
C reader (on a pump thread with a socket pump, else in the connection's own
data_received) and answered without the connection's parser. What a client
sees must not change: the same answers and errors, byte for byte, in
request order when requests of both kinds are pipelined on one connection,
and the connection's limits and timeouts still apply. Every test runs in
both places.

(test_http_frontend's whole suite runs through the lane on the loop, and
test_socket_pump.py runs it again over a pump, so with the lane there.)"""

import contextlib
import gzip
import json
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.unit.test_http_frontend import (
    _clients,
    add_sub_inputs,
    connect,
    infer_request_bytes,
    random_pair,
    read_response,
    serve_fake,
)


# 0: the readers on the loop; 2: on a socket pump of 2 threads
@pytest.fixture(scope="module", params=[0, 2], ids=["loop", "pump"])
def io_threads(request):
    return request.param


@pytest.fixture(scope="module")
def server(io_threads):
    with serve_fake(io_threads=io_threads) as fake:
        assert fake.frontend.lane is not None
        yield fake


def taken(server) -> int:
    return server.frontend.lane.taken


def forget_routes(server) -> None:
    """Every target unrouted again (as when the route cache is reset)."""
    server.frontend.infer_routes.clear()
    server.frontend.lane.clear_routes()


def _exchange(f, s, data: bytes, count: int) -> list:
    s.sendall(data)
    return [read_response(f) for _ in range(count)]


@contextlib.contextmanager
def routed(server, request: bytes):
    """A new connection that has sent ``request`` once, so its target is
    routed: (socket, its file, the connection's answer)."""
    s, f = connect(server)
    try:
        yield s, f, _exchange(f, s, request, 1)[0]
    finally:
        s.close()


def routed_then_laned(server, request: bytes) -> tuple:
    """``request`` sent twice on a new connection, its target unrouted:
    the connection's answer, then the lane's (checked to be the lane's)."""
    forget_routes(server)
    with routed(server, request) as (s, f, first):
        before = taken(server)
        second = _exchange(f, s, request, 1)[0]
        assert taken(server) == before + 1, request[:60]
        return first, second


def test_repeated_infer_requests_take_the_lane(server):
    client = httpclient.InferenceServerClient(server.url, network_timeout=10)
    _clients.append(client)
    a, b = random_pair()
    before = taken(server)
    for binary in (True, False, True):
        for _ in range(5):
            result = client.infer("add_sub", add_sub_inputs(a, b, binary=binary))
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
            np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    # the connection's first request to the target is routed by the
    # connection; the ones after it are the lane's
    assert taken(server) - before >= 13


def test_the_lane_answers_as_the_connection_does(server):
    """The first request to a target is the connection's, the same request
    again is the lane's: both answers are the same bytes, errors included."""
    a, b = random_pair(2)
    cases = [
        infer_request_bytes("add_sub", a, b, request_id="same"),
        # an input of the wrong shape: the model's error
        infer_request_bytes("add_sub", a[:, :8], b[:, :8], request_id="shape"),
        # a body that is not JSON
        b"POST /v2/models/add_sub/versions/1/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: 5\r\n\r\n{nope",
        # a model nobody serves: its target is routed all the same
        infer_request_bytes("missing", a, b),
        # a binary tensor header longer than the body
        b"POST /v2/models/boom/infer HTTP/1.1\r\nHost: x\r\n"
        b"Inference-Header-Content-Length: 99\r\nContent-Length: 2\r\n\r\n{}",
        # a model whose submit raises
        infer_request_bytes("boom", a, b),
        # a future that resolves with an error
        infer_request_bytes("async_error", a, b),
    ]
    for request in cases:
        first, second = routed_then_laned(server, request)
        assert first == second, request[:60]


def test_pipelined_requests_of_both_kinds_are_answered_in_order(server):
    a, b = random_pair()
    slow = lambda rid: infer_request_bytes("slow_add_sub", a, b, request_id=rid,  # noqa: E731
                                           extra_params={"delay_ms": 30})
    fast = lambda rid: infer_request_bytes("add_sub", a, b, request_id=rid)  # noqa: E731
    ready = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    metadata = b"GET /v2/models/add_sub HTTP/1.1\r\nHost: x\r\n\r\n"
    s, f = connect(server)
    try:
        for round_ in range(3):  # the first routes the targets, the others use the lane
            before = taken(server)
            batch = [slow(f"s{round_}a"), fast(f"f{round_}a"), ready, fast(f"f{round_}b"),
                     metadata, slow(f"s{round_}b"), fast(f"f{round_}c")]
            answers = _exchange(f, s, b"".join(batch), len(batch))
            assert [status for status, _, _ in answers] == [200] * len(batch)
            ids = [json.loads(body).get("id") if body else None for _, _, body in answers]
            assert ids == [f"s{round_}a", f"f{round_}a", None, f"f{round_}b", None,
                           f"s{round_}b", f"f{round_}c"]
            assert json.loads(answers[4][2])["name"] == "add_sub"
            if round_:
                assert taken(server) > before
    finally:
        s.close()


def test_a_request_taken_before_its_route_was_forgotten(server, io_threads):
    """With a pump, a thread of it takes the request and the loop runs it
    later. Routes reset in between (the route cache filled up) leave the
    request's route unknown to the loop: the connection routes the target
    again, the client gets the same answer, and the connection goes on
    (it once waited for an answer the lane never saw)."""
    if not io_threads:
        pytest.skip("on the loop a taken request runs at once: no such window")
    a, b = random_pair(2)
    request = infer_request_bytes("add_sub", a, b, request_id="late")
    forget_routes(server)
    with routed(server, request) as (s, f, first):
        before = taken(server)
        holding = threading.Event()

        def hold_the_loop():
            # the loop waits here while a pump thread takes the request,
            # then forgets the routes before it runs it
            holding.set()
            deadline = time.monotonic() + 10
            while taken(server) == before and time.monotonic() < deadline:
                time.sleep(0.001)
            forget_routes(server)

        server.loop.call_soon_threadsafe(hold_the_loop)
        assert holding.wait(5)
        second = _exchange(f, s, request, 1)[0]
        assert taken(server) == before + 1  # the lane took it ...
        assert second == first  # ... and the connection answered it
        # the connection goes on, and the target was routed again: the lane's
        assert _exchange(f, s, request * 2, 2) == [first, first]
        assert taken(server) == before + 3


def test_compressed_answers(server):
    a, b = random_pair()
    request = infer_request_bytes("add_sub", a, b, request_id="z")
    request = request.replace(b"Host: x\r\n", b"Host: x\r\nAccept-Encoding: gzip\r\n")
    for status, headers, body in routed_then_laned(server, request):
        assert status == 200 and headers["content-encoding"] == "gzip"
        assert json.loads(gzip.decompress(body))["id"] == "z"


def test_connection_close_and_a_half_closed_client(server):
    a, b = random_pair()
    request = infer_request_bytes("add_sub", a, b, request_id="c")
    with routed(server, request) as (s, f, _):
        before = taken(server)
        # the client half-closes after its request: the answer still comes
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        status, _, body = read_response(f)
        assert status == 200 and json.loads(body)["id"] == "c"
        assert f.read() == b""  # then the server closes
        assert taken(server) == before + 1
    with routed(server, request) as (s, f, _):
        # Connection: close is the connection's to answer, and it closes
        closing = infer_request_bytes("add_sub", a, b, request_id="c", connection="close")
        status, headers, body = _exchange(f, s, closing, 1)[0]
        assert status == 200 and headers.get("connection") == "close"
        assert f.read() == b""


def test_a_body_over_the_limit_is_refused_as_before(io_threads):
    with serve_fake(io_threads=io_threads, max_body_size=4096) as fake:
        a, b = random_pair()
        s, f = connect(fake)
        try:
            _exchange(f, s, infer_request_bytes("add_sub", a, b), 1)
            big = np.zeros((64, 16), np.float32)
            status, _, body = _exchange(f, s, infer_request_bytes("add_sub", big, big), 1)[0]
            assert status == 413 and b"exceeds the maximum allowed size" in body
            assert fake.frontend.lane.taken == 0
        finally:
            s.close()


def test_read_timeouts_count_what_the_lane_reads(io_threads):
    with serve_fake(io_threads=io_threads, header_timeout=0.4, idle_timeout=0.8) as fake:
        a, b = random_pair()
        request = infer_request_bytes("add_sub", a, b)
        # a connection kept busy by lane requests for longer than the idle
        # bound stays open
        s, f = connect(fake)
        try:
            _exchange(f, s, request, 1)
            until = time.monotonic() + 2.0
            while time.monotonic() < until:
                assert _exchange(f, s, request, 1)[0][0] == 200
                time.sleep(0.1)
            assert fake.frontend.lane.taken > 5
        finally:
            s.close()
        # a request head the lane holds, never finished: 408, then closed
        s, f = connect(fake)
        try:
            _exchange(f, s, request, 1)
            s.sendall(request[:30])
            start = time.monotonic()
            status, _, body = read_response(f)
            assert status == 408 and b"header" in body
            assert time.monotonic() - start < 5
            assert f.read() == b""
        finally:
            s.close()


def test_the_lane_can_be_turned_off(monkeypatch, io_threads):
    monkeypatch.setenv("PYSERVER_HTTP_LANE", "0")
    with serve_fake(io_threads=io_threads) as fake:
        assert fake.frontend.lane is None
        a, b = random_pair()
        s, f = connect(fake)
        try:
            request = infer_request_bytes("add_sub", a, b, request_id="off")
            for status, _, body in _exchange(f, s, request + request, 2):
                assert status == 200 and json.loads(body)["id"] == "off"
        finally:
            s.close()


def test_a_real_server_traces_and_counts_what_the_lane_takes(tmp_path, start_server, io_threads):
    """ONNX add_sub on a Server: requests through the lane are traced with
    the HTTP frontend's stamps and counted in the model's statistics."""
    from pyserver.frontends.http import HttpFrontend
    from pyserver.testing import write_add_sub
    from tests.integration.test_tracing import HTTP_ORDER, _trace_everything, _written

    write_add_sub(tmp_path / "models")
    s = start_server(tmp_path / "models")
    pumped = HttpFrontend(s.server, "127.0.0.1", 0, io_threads=io_threads)
    s.call(pumped.start())
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{pumped.port}")
        _clients.append(client)
        trace_file = tmp_path / "trace.json"
        _trace_everything(s, client, trace_file)
        a, b = random_pair()
        for rid in ("routed", "laned", "laned again"):
            result = client.infer("add_sub", add_sub_inputs(a, b), request_id=rid)
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        assert pumped.lane.taken == 2
        traces = {t["request_id"]: t for t in _written(client, trace_file)}
        assert set(traces) == {"routed", "laned", "laned again"}
        for t in traces.values():
            names = [x["name"] for x in t["timestamps"]]
            assert names == HTTP_ORDER, names
            stamps = [x["ns"] for x in t["timestamps"]]
            assert stamps == sorted(stamps)
        stats = client.get_inference_statistics("add_sub")["model_stats"][0]
        assert stats["inference_count"] == 3
    finally:
        s.call(pumped.stop())


def test_many_pipelined_requests_answered_at_once_stay_in_order(server):
    """Requests answered as they are submitted (the fake's add_sub) free
    the reader to take the next at once: 1,500 of them in one write are
    answered in order (and without nesting a call per request)."""
    a, b = random_pair()
    request = infer_request_bytes("add_sub", a, b, request_id="p")
    with routed(server, request) as (s, f, _):
        before = taken(server)
        many = b"".join(infer_request_bytes("add_sub", a, b, request_id=f"p{i}")
                        for i in range(1500))
        s.settimeout(30)
        answers = _exchange(f, s, many, 1500)
        assert [json.loads(body)["id"] for _, _, body in answers] == \
            [f"p{i}" for i in range(1500)]
        assert taken(server) - before >= 1000


@pytest.mark.parametrize("kwargs", [
    {"restricted_apis": {"inference": ("key", "value")}},  # no target is ever published
    {"header_forward_pattern": "x-.*"},  # the route reads every header
], ids=["restricted", "forwarding"])
def test_no_lane_where_the_connection_must_see_every_request(kwargs, io_threads):
    with serve_fake(io_threads=io_threads, **kwargs) as fake:
        assert fake.frontend.lane is None


def _binary_request(a, b, request_id: str) -> bytes:
    """add_sub with binary inputs and binary outputs."""
    header = json.dumps({
        "id": request_id,
        "inputs": [{"name": n, "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}
                   for n, x in (("INPUT0", a), ("INPUT1", b))],
        "parameters": {"binary_data_output": True}}).encode()
    body = header + a.tobytes() + b.tobytes()
    return (f"POST /v2/models/big/infer HTTP/1.1\r\nHost: x\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_answers_larger_than_the_socket_takes_arrive_whole_and_in_order(
        tmp_path, start_server, io_threads):
    """A client that reads nothing until every request is answered: the
    first answers fill the socket (the lane's direct send is cut short and
    the transport writes the rest), the later ones queue behind them; each
    arrives whole, in order."""
    from pyserver.frontends.http import HttpFrontend
    from pyserver.testing import write_add_sub

    # 64 KiB per tensor: a request the lane takes (its bodies stay under
    # 256 KiB), an answer of 128 KiB sent as views of the outputs; 48 of
    # them (6 MiB) are more than loopback's socket buffers hold
    size, count = 1 << 14, 48
    write_add_sub(tmp_path / "models", name="big", size=size, max_batch_size=0)
    s = start_server(tmp_path / "models")
    front = HttpFrontend(s.server, "127.0.0.1", 0, io_threads=io_threads)
    s.call(front.start())
    try:
        rng = np.random.default_rng(3)
        pairs = [(rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32))
                 for _ in range(count)]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        sock.settimeout(30)
        sock.connect(("127.0.0.1", front.port))
        f = sock.makefile("rb")
        try:
            # the first routes the target; the rest are the lane's
            sock.sendall(_binary_request(*pairs[0], "r"))
            assert read_response(f)[0] == 200
            before = front.lane.taken
            sender = threading.Thread(target=sock.sendall, args=(b"".join(
                _binary_request(a, b, f"r{i}") for i, (a, b) in enumerate(pairs)),))
            sender.start()
            time.sleep(0.5)  # the answers pile up unread meanwhile
            for i, (a, b) in enumerate(pairs):
                status, headers, body = read_response(f)
                assert status == 200
                hlen = int(headers["inference-header-content-length"])
                assert json.loads(body[:hlen])["id"] == f"r{i}"
                out = np.frombuffer(body[hlen:], np.float32)
                np.testing.assert_array_equal(out[:size], a + b)
                np.testing.assert_array_equal(out[size:], a - b)
            sender.join(10)
            assert front.lane.taken - before == count
        finally:
            f.close()
            sock.close()
    finally:
        s.call(front.stop())
