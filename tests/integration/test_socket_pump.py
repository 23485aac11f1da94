"""The socket pump (``--http-thread-count``, ``--grpc-infer-thread-count``):
the HTTP frontend's and the gRPC frontend's own suites run again here with
their connections' reads and writes on pump threads (the fixtures below
replace theirs), then what is the pump's own: many clients at once, large
tensors both ways, clients that vanish mid-request, and no connection or
thread left behind once the clients are gone and the frontends stop."""

import asyncio
import os
import shutil
import socket
import threading
import time
from pathlib import Path

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
from tests.integration.test_sequence_batching import one, write_accumulator
from tests.integration.test_shared_memory import regions, shm  # noqa: F401,F811 (a fixture)
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


# tests/models/python/crash: IN >= 1000 sleeps IN - 1000 ms, then echoes IN
_SLOW_BODY = b'{"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [2000]}]}'
_SLOW_REQUEST = (b"POST /v2/models/crash/infer HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(_SLOW_BODY)) + _SLOW_BODY


def _http_answer(sock) -> bytes:
    """One whole HTTP/1.1 answer (head and Content-Length body) from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_failed_pump_thread_is_restarted_and_only_its_connections_close(
        tmp_path, start_server, caplog):
    shutil.copytree(Path(__file__).parents[1] / "models" / "python" / "crash", tmp_path / "crash")
    write_add_sub(tmp_path)
    s = start_server(tmp_path)
    http = HttpFrontend(s.server, "127.0.0.1", 0, io_threads=IO_THREADS)
    s.call(http.start())
    pump = http._listener._pump
    socks = [socket.create_connection(("127.0.0.1", http.port)) for _ in range(4)]
    try:
        for sock in socks:
            sock.settimeout(10)
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _http_answer(sock).startswith(b"HTTP/1.1 200")
        # which pump thread serves which client (connection ids go round them)
        thread_of = {conn._transport.get_extra_info("peername"): conn._transport.connection
                     % IO_THREADS for conn in http.connections}
        on = {n: [sk for sk in socks if thread_of[sk.getsockname()] == n] for n in (0, 1)}
        assert on[0] and on[1], thread_of
        # a request in flight on thread 0 when it fails
        on[0][0].sendall(_SLOW_REQUEST)
        _wait_for("the slow request to be in flight", lambda: s.server.inflight == 1)

        with caplog.at_level("ERROR", logger="pyserver"):
            pump._break_thread_for_testing(0)
            _wait_for("the thread's restart", lambda: pump.restarts == 1)
        assert any(f"socket pump thread 0 failed (epoll_wait: Invalid argument) and was "
                   f"restarted; its {len(on[0])} connection(s) were closed" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        for sock in on[0]:  # its clients see the server close their connections
            try:
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        for sock in on[1]:  # the other thread's keep being served
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _http_answer(sock).startswith(b"HTTP/1.1 200")
        # the request whose connection went still ends: nothing stays in flight
        _wait_for("the abandoned request to end", lambda: s.server.inflight == 0)
    finally:
        for sock in socks:
            sock.close()
    # new connections land on both threads again, and every one is answered
    a = np.ones((1, 16), np.float32)
    for _ in range(2 * IO_THREADS):
        with httpclient.InferenceServerClient(f"127.0.0.1:{http.port}") as c:
            r = c.infer("add_sub", _inputs(httpclient, a, a))
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)
    with socket.create_connection(("127.0.0.1", http.port)) as sock:
        sock.settimeout(10)
        sock.sendall(_SLOW_REQUEST)
        assert b'"data":[2000]' in _http_answer(sock).replace(b" ", b"")
    s.call(http.stop())


def test_one_server_across_connections_and_pump_threads(tmp_path, start_server, regions):  # noqa: F811
    # #28's "one server": a sequence whose requests come over different
    # connections (HTTP and gRPC, on different pump threads) keeps its slot
    # and its state, and a shared-memory region registered over one
    # connection is used and released over others.
    write_accumulator(tmp_path)
    write_add_sub(tmp_path)
    s = start_server(tmp_path, allow_client_shm=True)
    http = HttpFrontend(s.server, "127.0.0.1", 0, io_threads=IO_THREADS)
    grpc = GrpcFrontend(s.server, "127.0.0.1", 0, io_threads=IO_THREADS)
    s.call(http.start())
    s.call(grpc.start())
    http_url, grpc_url = f"127.0.0.1:{http.port}", f"127.0.0.1:{grpc.port}"
    clients = [httpclient.InferenceServerClient(http_url),
               grpcclient.InferenceServerClient(grpc_url),
               httpclient.InferenceServerClient(http_url),
               grpcclient.InferenceServerClient(grpc_url)]
    try:
        total = 0
        for k, value in enumerate((1, 2, 3, 4, 5, 6, 7, 8)):
            c = clients[k % len(clients)]
            mod = httpclient if isinstance(c, httpclient.InferenceServerClient) else grpcclient
            r = c.infer("acc", one(value, mod), sequence_id=42, sequence_start=k == 0,
                        sequence_end=k == 7)
            total += value
            assert int(r.as_numpy("OUTPUT")[0, 0]) == total
        threads = {conn._transport.connection % IO_THREADS for conn in http.connections}
        assert threads == set(range(IO_THREADS))  # the two HTTP clients: one on each thread

        in_name, in_key, in_handle = regions(128)
        out_name, out_key, out_handle = regions(128)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.full((1, 16), 2, np.float32)
        shm.set_shared_memory_region(in_handle, [a, b])
        clients[0].register_system_shared_memory(in_name, in_key, 128)
        clients[0].register_system_shared_memory(out_name, out_key, 128)
        g = clients[1]
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_shared_memory(in_name, 64)
        inputs[1].set_shared_memory(in_name, 64, offset=64)
        outputs = [grpcclient.InferRequestedOutput("OUTPUT0"),
                   grpcclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory(out_name, 64)
        outputs[1].set_shared_memory(out_name, 64, offset=64)
        g.infer("add_sub", inputs, outputs=outputs)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(out_handle, np.float32, [1, 16]), a + b)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=64), a - b)
        assert {r.name for r in g.get_system_shared_memory_status().regions.values()} == \
            {in_name, out_name}
        clients[2].unregister_system_shared_memory()
        assert not clients[3].get_system_shared_memory_status().regions
    finally:
        for c in clients:
            c.close()
        s.call(grpc.stop(5))
        s.call(http.stop())
