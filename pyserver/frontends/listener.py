"""A listening TCP socket that accepts every waiting connection at once.

uvloop's own servers (``loop.create_server``) take one connection from the
accept queue per loop iteration: with a busy loop and 1,024 clients
connecting, the last ones waited seconds in the kernel with their first
request already sent (#27: p99 6.2 s at 1,024 HTTP connections). Here the
socket is watched with ``add_reader`` and drained in one go, each connection
handed to ``loop.connect_accepted_socket`` (a transport as create_server
makes, TLS included). The object answers as much of ``asyncio.Server`` as
the frontends use: ``sockets``, ``close()``, ``wait_closed()``.

With ``io_threads`` > 0 (Triton's ``--http-thread-count`` and
``--grpc-infer-thread-count``) the listener owns a socket pump
(engine/socket_pump.pyx over csrc's SocketPump) of that many threads, and
accepted plain-TCP connections go to it: their reads, writes and polls run
on its threads, and the protocol sees a PumpTransport. TLS connections stay
on the loop's own transports. ``wait_closed()`` lets the pump send what the
closed connections still had queued before its threads stop.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import socket
import time

from pyserver.engine.socket_pump import SocketPump

__all__ = ["Listener", "listen", "thread_count"]

log = logging.getLogger("pyserver")

# Connections taken per wake-up before the loop serves the others again.
_ACCEPT_BATCH = 1024
# Out of file descriptors: how long to wait before accepting again.
_FD_PAUSE_S = 0.1
# How long wait_closed() lets closed connections' queued bytes leave.
_PUMP_LINGER_S = 2.0


def thread_count(text: str) -> int:
    """The value of --http-thread-count / --grpc-infer-thread-count
    (argparse's type): a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a thread count (0 or more), got '{text}'")
    return value


class Listener:
    def __init__(self, loop, protocol_factory, sockets: list, ssl=None, io_threads: int = 0):
        self._loop = loop
        self._factory = protocol_factory
        self._ssl = ssl
        self._pump = None
        if io_threads > 0 and ssl is None:  # TLS stays on the loop's transports
            self._pump = SocketPump(loop, io_threads)
        # set by the frontend: what makes each pump connection's reader
        # (engine/socket_pump.ReaderSource), or None
        self.readers = None
        self.sockets = sockets
        self._tasks: set = set()
        self._closed = asyncio.Event()
        for sock in sockets:
            loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock) -> None:
        loop = self._loop
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # no descriptor for it: leave it queued, try again soon
                    # (watching now would spin on a socket still readable)
                    log.warning("accept: %s; pausing new connections for %.1f s",
                                e.strerror, _FD_PAUSE_S)
                    loop.remove_reader(sock.fileno())
                    loop.call_later(_FD_PAUSE_S, self._resume, sock)
                    return
                if e.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue  # that client is gone already
                raise
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._pump is not None:
                self._attach(conn)
                continue
            task = loop.create_task(self._connect(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _attach(self, conn) -> None:
        try:
            protocol = self._factory()
        except Exception:
            log.exception("connection not set up")
            conn.close()
            return
        self._pump.attach(conn, protocol, self.readers)

    def _resume(self, sock) -> None:
        if not self._closed.is_set():
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    async def _connect(self, conn) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn, ssl=self._ssl)
        except Exception as e:  # a failed TLS handshake, a client gone
            log.debug("connection not set up: %s", e)
            conn.close()

    def close(self) -> None:
        """Stops accepting; the connections made so far carry on."""
        if self._closed.is_set():
            return
        self._closed.set()
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()

    @property
    def pump(self):
        """The socket pump (engine/socket_pump.SocketPump), or None."""
        return self._pump

    @property
    def io_threads(self) -> int:
        return self._pump.threads if self._pump is not None else 0

    async def wait_closed(self) -> None:
        """Once close() was called: the connections being set up are, and
        with a pump, the connections closed by then have sent what they had
        queued (at most _PUMP_LINGER_S) before its threads stop."""
        await self._closed.wait()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        pump, self._pump = self._pump, None
        if pump is not None:
            deadline = time.monotonic() + _PUMP_LINGER_S
            while pump.connections and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            pump.close()


async def listen(protocol_factory, host: str | None, port: int, *, backlog: int = 1024,
                 reuse_port: bool = False, ssl=None, io_threads: int = 0) -> Listener:
    """Listens on every address ``host`` names (all interfaces for None or
    ""), as ``loop.create_server`` would; OSError when one cannot be bound.
    ``io_threads``: the socket pump's threads (0: the loop reads and writes)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    sockets = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(
                (i[0], i[1], i[2], None, i[4]) for i in infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port and address[1] != port:  # port 0: the one the first got
                address = (address[0], port) + tuple(address[2:])
            try:
                sock.bind(address)
            except OSError as e:
                raise OSError(e.errno, f"error while attempting to bind on address "
                                       f"{address!r}: {e.strerror.lower()}") from None
            sock.listen(backlog)
            sock.setblocking(False)
            if port == 0:
                port = sock.getsockname()[1]  # every address on the same free port
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return Listener(loop, protocol_factory, sockets, ssl, io_threads)
