"""gRPC keepalive and ping policing (grpc_keepalive.py), seen from a raw
HTTP/2 client (the h2 package): the server's PINGs and what it does when
they go unanswered, a client that PINGs too often, and the connection age
limit, each with short timers."""

import time

import h2.errors
import h2.events
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from pyserver.frontends.grpc_keepalive import KeepaliveOptions
from pyserver.testing import write_add_sub
from tests.integration.test_grpc import SLOW, start_grpc  # noqa: F401 (fixture)
from tests.integration.test_grpc_h2 import Client, frame, infer_message

pytest.importorskip("h2")


def serve(tmp_path, start_grpc, **options):  # noqa: F811
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="slow", extra=SLOW)
    return start_grpc(tmp_path, frontend_kwargs={"keepalive": KeepaliveOptions(**options)})


def pings(client):
    return [e for e in client.events if isinstance(e, h2.events.PingReceived)]


def terminated(client):
    return [e for e in client.events if isinstance(e, h2.events.ConnectionTerminated)]


def still_serving(s):
    client = grpcclient.InferenceServerClient(s.grpc_url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for inp in inputs:
        inp.set_data_from_numpy(a)
    assert (client.infer("add_sub", inputs).as_numpy("OUTPUT0") == 2 * a).all()
    client.close()


def test_server_pings_and_keeps_a_client_that_answers(tmp_path, start_grpc):  # noqa: F811
    s = serve(tmp_path, start_grpc, time_ms=100, timeout_ms=300, permit_without_calls=True,
              max_pings_without_data=0)
    c = Client(s.grpc.port)
    assert c.pump(lambda: len(pings(c)) >= 3, timeout=5), c.events
    assert not c.closed and not terminated(c)  # each ACK came in time
    sid = c.request(body=frame(infer_message()))
    headers, _, _ = c.result(sid)
    assert headers["grpc-status"] == "0"
    c.close()


def test_unanswered_ping_closes_the_connection(tmp_path, start_grpc):  # noqa: F811
    s = serve(tmp_path, start_grpc, time_ms=100, timeout_ms=200, permit_without_calls=True)
    c = Client(s.grpc.port)
    c.flush = lambda: None  # from here on the client answers nothing, PINGs included
    started = time.monotonic()
    assert c.pump(lambda: False, timeout=5) is False and c.closed
    assert pings(c) and 0.2 <= time.monotonic() - started < 3
    assert s.run(lambda: len(s.grpc._connections)) == 0
    still_serving(s)


def test_no_pings_without_calls_unless_permitted(tmp_path, start_grpc):  # noqa: F811
    s = serve(tmp_path, start_grpc, time_ms=50, timeout_ms=1000)
    c = Client(s.grpc.port)
    c.pump(lambda: False, timeout=0.5)
    assert not pings(c) and not c.closed
    # With a call in flight it pings, at most max_pings_without_data (2)
    # while nothing else goes out.
    sid = c.request(path="/inference.GRPCInferenceService/ModelInfer",
                    body=frame(infer_message("slow")))
    c.pump(lambda: False, timeout=0.4)
    assert 1 <= len(pings(c)) <= 2, c.events
    headers, _, _ = c.result(sid)
    assert headers["grpc-status"] == "0"
    c.close()


def test_too_many_client_pings_get_goaway(tmp_path, start_grpc):  # noqa: F811
    s = serve(tmp_path, start_grpc, permit_without_calls=True,
              min_recv_ping_interval_without_data_ms=60000, max_ping_strikes=1)
    # A call between PINGs wipes the slate.
    polite = Client(s.grpc.port)
    for i in range(4):
        polite.conn.ping(b"%08d" % i)
        sid = polite.request(body=frame(infer_message()))
        headers, _, _ = polite.result(sid)
        assert headers["grpc-status"] == "0"
    assert not terminated(polite) and not polite.closed
    polite.close()
    # Three PINGs in a row: the second and third are strikes, one too many.
    rude = Client(s.grpc.port)
    for i in range(3):
        rude.conn.ping(b"%08d" % i)
        rude.flush()
    assert rude.pump(lambda: bool(terminated(rude)), timeout=5), rude.events
    goaway = terminated(rude)[0]
    assert goaway.error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
    assert goaway.additional_data == b"too_many_pings"
    assert rude.pump(lambda: False, timeout=5) is False and rude.closed
    still_serving(s)


def test_connection_age_goaway_then_grace(tmp_path, start_grpc):  # noqa: F811
    s = serve(tmp_path, start_grpc, max_connection_age_ms=200, max_connection_age_grace_ms=300)
    c = Client(s.grpc.port)
    # A call still running at the GOAWAY is cut off when the grace ends.
    sid = c.request(body=frame(infer_message("slow")), end=False)
    assert c.pump(lambda: bool(terminated(c)), timeout=5)
    assert terminated(c)[0].error_code == h2.errors.ErrorCodes.NO_ERROR
    started = time.monotonic()
    assert c.pump(lambda: False, timeout=5) is False and c.closed
    assert time.monotonic() - started < 3
    assert not c.ended(sid)()
    still_serving(s)
