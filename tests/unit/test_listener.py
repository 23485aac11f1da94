"""pyserver/frontends/listener.py: every connection waiting in the accept
queue is taken at once (uvloop's create_server takes one per loop
iteration: #27, defect 9), each served by its own protocol, on every address
a host names; close() stops accepting."""

import asyncio
import socket
import threading

import pytest
import uvloop

from pyserver.frontends.listener import listen


class Echo(asyncio.Protocol):
    made = 0

    def connection_made(self, transport):
        Echo.made += 1
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


def run_loop():
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread


def call(loop, coro, timeout=30):
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


def test_a_busy_loop_takes_the_whole_accept_queue_in_one_turn():
    loop, thread = run_loop()
    try:
        Echo.made = 0
        listener = call(loop, listen(Echo, "127.0.0.1", 0, backlog=1024))
        port = listener.sockets[0].getsockname()[1]
        blocked, release = threading.Event(), threading.Event()

        def busy():  # the loop is busy while 400 clients connect
            blocked.set()
            release.wait(30)

        loop.call_soon_threadsafe(busy)
        blocked.wait(10)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=10)
                   for _ in range(400)]
        for c in clients:
            c.sendall(b"x")
        release.set()

        async def after_turns(n):
            for _ in range(n):
                await asyncio.sleep(0)
            return Echo.made

        # a few turns of the loop: accepted in one, connected in the next
        assert call(loop, after_turns(4)) == 400
        for c in clients:
            assert c.recv(1) == b"x"
            c.close()
        listener.close()
        call(loop, listener.wait_closed())
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_every_address_of_a_host_on_one_free_port():
    loop, thread = run_loop()
    try:
        listener = call(loop, listen(Echo, "localhost", 0))
        ports = {s.getsockname()[1] for s in listener.sockets}
        assert len(ports) == 1
        families = {s.family for s in listener.sockets}
        assert socket.AF_INET in families
        port = ports.pop()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"ok")
            assert c.recv(2) == b"ok"
        with pytest.raises(OSError, match="error while attempting to bind"):
            call(loop, listen(Echo, "127.0.0.1", port))  # taken
        listener.close()
        call(loop, listener.wait_closed())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
