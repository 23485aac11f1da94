"""The socket pump (``--http-thread-count``, ``--grpc-infer-thread-count``):
the HTTP frontend's and the gRPC frontend's own suites run again here with
their connections' reads and writes on pump threads (the fixtures below
replace theirs), then what is the pump's own: many clients at once, large
tensors both ways, clients that vanish mid-request, and no connection or
thread left behind once the clients are gone and the frontends stop."""

import asyncio
import os
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import uvloop

from pyserver.engine.socket_pump import SocketPump
from pyserver.frontends.grpc import GrpcFrontend
from pyserver.frontends.http import HttpFrontend
from pyserver.testing import write_add_sub
from tests.integration.test_grpc import *  # noqa: F401,F403 (its tests run here again)
from tests.integration.test_grpc import grpc_servers
from tests.integration.test_grpc_h2 import *  # noqa: F401,F403
from tests.unit.test_http_frontend import *  # noqa: F401,F403
from tests.unit.test_http_frontend import serve_fake

IO_THREADS = 2


@pytest.fixture(scope="module")
def server():
    """test_http_frontend's server, its connections on a pump."""
    with serve_fake(io_threads=IO_THREADS) as fake:
        assert fake.frontend._listener.io_threads == IO_THREADS
        yield fake


@pytest.fixture
def start_grpc(start_server):
    """test_grpc's start_grpc, its connections on a pump."""
    with grpc_servers(start_server, io_threads=IO_THREADS) as start:
        def start_pumped(repo, frontend_kwargs=None, **server_kwargs):
            s = start(repo, frontend_kwargs, **server_kwargs)
            tls = (frontend_kwargs or {}).get("ssl_context") is not None
            assert s.grpc._listener.io_threads == (0 if tls else IO_THREADS)
            return s
        yield start_pumped


def _pump_connections(frontend) -> int:
    return frontend._listener._pump.connections


def _wait_for(what, check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def pumped(tmp_path, start_server):
    """add_sub (batching) and a 2M-float add_sub, served over HTTP and gRPC
    with both frontends' connections on pumps."""
    write_add_sub(tmp_path, extra="dynamic_batching { }")
    write_add_sub(tmp_path, name="big", size=1 << 21, max_batch_size=0)
    s = start_server(tmp_path)
    s.http_pumped = HttpFrontend(s.server, "127.0.0.1", 0, io_threads=IO_THREADS)
    s.grpc = GrpcFrontend(s.server, "127.0.0.1", 0, io_threads=IO_THREADS)
    s.call(s.http_pumped.start())
    s.call(s.grpc.start())
    yield s
    s.call(s.grpc.stop(5))
    s.call(s.http_pumped.stop())


def _inputs(mod, a, b):
    inputs = [mod.InferInput("INPUT0", list(a.shape), "FP32"),
              mod.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def test_many_clients_at_once_each_get_their_own_answers(pumped):
    http_url = f"127.0.0.1:{pumped.http_pumped.port}"
    grpc_url = f"127.0.0.1:{pumped.grpc.port}"
    wrong, errors = [], []

    def client(n):
        try:
            mod, url = (httpclient, http_url) if n % 2 else (grpcclient, grpc_url)
            with mod.InferenceServerClient(url) as c:
                for k in range(25):
                    a = np.full((1, 16), n * 1000 + k, np.float32)
                    b = np.arange(16, dtype=np.float32).reshape(1, 16)
                    r = c.infer("add_sub", _inputs(mod, a, b))
                    if not (np.array_equal(r.as_numpy("OUTPUT0"), a + b)
                            and np.array_equal(r.as_numpy("OUTPUT1"), a - b)):
                        wrong.append((n, k))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    assert not wrong, wrong[:3]
    # every client closed its connection: none is left on either pump
    _wait_for("the pumps' connections to close", lambda: _pump_connections(
        pumped.http_pumped) == 0 and _pump_connections(pumped.grpc) == 0)


@pytest.mark.parametrize("mod", [httpclient, grpcclient], ids=["http", "grpc"])
def test_large_tensors_cross_whole_both_ways(pumped, mod):
    # 8 MiB per input in, 8 MiB per output out: many reads and partial writes
    url = pumped.http_pumped.port if mod is httpclient else pumped.grpc.port
    a = np.random.default_rng(0).random((1 << 21,), dtype=np.float32)
    b = np.random.default_rng(1).random((1 << 21,), dtype=np.float32)
    with mod.InferenceServerClient(f"127.0.0.1:{url}") as c:
        for _ in range(3):
            r = c.infer("big", _inputs(mod, a, b))
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_clients_that_vanish_leave_nothing_behind(pumped):
    http_port, grpc_port = pumped.http_pumped.port, pumped.grpc.port
    body = b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": ['
    for _ in range(10):
        # half an HTTP request, then gone
        with socket.create_connection(("127.0.0.1", http_port)) as s:
            s.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 1000\r\n\r\n" + body)
        # an HTTP/2 preface cut short, then reset
        with socket.create_connection(("127.0.0.1", grpc_port)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM")
    _wait_for("the pumps' connections to close", lambda: _pump_connections(
        pumped.http_pumped) == 0 and _pump_connections(pumped.grpc) == 0)
    # and both keep serving
    a = np.ones((1, 16), np.float32)
    for mod, port in ((httpclient, http_port), (grpcclient, grpc_port)):
        with mod.InferenceServerClient(f"127.0.0.1:{port}") as c:
            r = c.infer("add_sub", _inputs(mod, a, a))
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)


def test_stopping_closes_open_connections_and_the_threads(tmp_path, start_server):
    write_add_sub(tmp_path)
    s = start_server(tmp_path)
    http = HttpFrontend(s.server, "127.0.0.1", 0, io_threads=3)
    s.call(http.start())
    threads_with = _native_threads()  # the pump's are native: not in threading's list
    idle = [socket.create_connection(("127.0.0.1", http.port)) for _ in range(5)]
    try:
        c = httpclient.InferenceServerClient(f"127.0.0.1:{http.port}")
        assert c.is_server_live()
        c.close()
        s.call(http.stop())
        # the idle clients see their connections closed by the server
        for sock in idle:
            sock.settimeout(10)
            assert sock.recv(1) == b""
    finally:
        for sock in idle:
            sock.close()
    _wait_for("the pump's threads to end", lambda: _native_threads() <= threads_with - 3)


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_tls_connections_stay_on_the_loop(tmp_path, start_server):
    # a TLS listener never makes a pump: TLS is the loop's transports' job
    import ssl

    from pyserver.frontends.listener import Listener
    s = start_server(tmp_path)

    async def make():
        listener = Listener(s.loop, lambda: None, [], ssl=ssl.create_default_context(),
                            io_threads=2)
        return listener.io_threads

    assert s.call(make()) == 0


class _KeepsTransport(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport


def test_no_data_arrives_while_reading_is_paused():
    """asyncio's promise, which the HTTP connection's pipelining bound
    relies on: after pause_reading() no data_received() (nor EOF), even for
    bytes the pump read before it saw the pause; resume_reading() gives
    them, in order, in a later callback."""
    got = []
    ours, peer = socket.socketpair()

    class Protocol(_KeepsTransport):
        def data_received(self, data):
            got.append((data, self.transport.is_reading()))
            if len(got) == 1:
                # more bytes and the EOF, read by the pump's thread while
                # this (the loop's) thread is busy: then the pause
                peer.sendall(b"two")
                peer.shutdown(socket.SHUT_WR)
                time.sleep(0.3)
                self.transport.pause_reading()

        def eof_received(self):
            got.append((b"EOF", None))
            return False

    async def wait(check):
        for _ in range(500):
            if check():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"timed out: {got}")

    async def main():
        pump = SocketPump(asyncio.get_running_loop(), 1)
        protocol = Protocol()
        try:
            pump.attach(ours, protocol)
            peer.sendall(b"one")
            await wait(lambda: got)
            await asyncio.sleep(0.3)
            assert got == [(b"one", True)]  # nothing while paused, not even the EOF
            protocol.transport.resume_reading()
            assert len(got) == 1  # not inside resume_reading()
            await wait(lambda: got[-1][0] == b"EOF")
            assert got[1:] == [(b"two", True), (b"EOF", None)]
        finally:
            pump.close()
            peer.close()

    uvloop.run(main())


def test_no_data_arrives_after_close():
    """After close() no data_received() (asyncio: "no more data will be
    received"), while what was written still leaves."""
    got = []
    ours, peer = socket.socketpair()

    class Protocol(_KeepsTransport):
        def data_received(self, data):
            got.append(data)
            if len(got) == 1:
                peer.sendall(b"more")  # read by the pump while this thread is busy
                time.sleep(0.3)
                self.transport.write(b"bye")
                self.transport.close()

    async def main():
        pump = SocketPump(asyncio.get_running_loop(), 1)
        try:
            pump.attach(ours, Protocol())
            peer.sendall(b"one")
            for _ in range(500):
                if pump.connections == 0:
                    break
                await asyncio.sleep(0.01)
            assert pump.connections == 0
        finally:
            pump.close()

    uvloop.run(main())
    assert got == [b"one"]
    peer.settimeout(5)
    assert peer.recv(16) == b"bye" and peer.recv(16) == b""
    peer.close()
