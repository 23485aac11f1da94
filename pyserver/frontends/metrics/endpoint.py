"""Triton's metrics endpoint: ``GET /metrics`` on its own port (8002).

One ``asyncio.Protocol`` + ``httptools`` parser per connection on the
server's event loop, like the inference HTTP frontend. A scrape snapshots the
engine's counters and writes the text on the loop: a few dozen µs per model,
and Prometheus scrapes every few seconds.
"""

from __future__ import annotations

import asyncio

import httptools
from prometheus_client import CollectorRegistry

from pyserver.frontends.metrics.collector import EngineCollector
from pyserver.frontends.metrics.config import MetricsConfig
from pyserver.frontends.metrics.exposition import CONTENT_TYPE, exposition

__all__ = ["MetricsFrontend"]

_METRICS_HEADERS = b"Content-Type: " + CONTENT_TYPE.encode() + b"\r\n"
_TEXT_HEADERS = b"Content-Type: text/plain; charset=utf-8\r\n"
_STATUS = {200: b"200 OK", 400: b"400 Bad Request", 404: b"404 Not Found",
           405: b"405 Method Not Allowed", 500: b"500 Internal Server Error"}


class _MetricsConnection(asyncio.Protocol):
    __slots__ = ("_frontend", "_transport", "_parser", "_url", "_closing")

    def __init__(self, frontend: "MetricsFrontend"):
        self._frontend = frontend
        self._transport = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._closing = False

    def connection_made(self, transport):
        self._transport = transport
        self._frontend._connections.add(self)

    def connection_lost(self, exc):
        self._transport = None
        self._closing = True
        self._frontend._connections.discard(self)

    def data_received(self, data):
        if self._closing:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._close_after_write()
        except httptools.HttpParserError:
            self._respond(400, _TEXT_HEADERS, b"Bad Request\n", keep_alive=False)

    def close(self):
        self._closing = True
        t, self._transport = self._transport, None
        if t is not None:
            t.close()

    def _close_after_write(self):
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    # -- parser callbacks ----------------------------------------------------

    def on_message_begin(self):
        self._url = b""

    def on_url(self, url: bytes):
        self._url += url

    def on_message_complete(self):
        if self._closing:
            return
        p = self._parser
        method = p.get_method()
        keep_alive = p.should_keep_alive()
        path = self._url.split(b"?", 1)[0]
        if path != b"/metrics":
            return self._respond(404, _TEXT_HEADERS, b"Not Found\n", keep_alive)
        if method != b"GET" and method != b"HEAD":
            return self._respond(405, _TEXT_HEADERS + b"Allow: GET, HEAD\r\n",
                                 b"Method Not Allowed\n", keep_alive)
        try:
            body = self._frontend.render()
        except Exception as e:  # a broken collector must not drop the connection
            return self._respond(500, _TEXT_HEADERS, f"{type(e).__name__}: {e}\n".encode(),
                                 keep_alive)
        self._respond(200, _METRICS_HEADERS, body, keep_alive, head=method == b"HEAD")

    def _respond(self, status: int, headers: bytes, body: bytes, keep_alive: bool,
                 head: bool = False):
        t = self._transport
        if t is None:
            return
        if not keep_alive:
            conn = b"Connection: close\r\n"
        elif self._parser.get_http_version() == "1.0":
            conn = b"Connection: keep-alive\r\n"
        else:
            conn = b""
        head_bytes = b"HTTP/1.1 %s\r\n%sContent-Length: %d\r\n%s\r\n" % (
            _STATUS[status], headers, len(body), conn)
        if head:
            t.write(head_bytes)
        elif len(body) < 65536:
            t.write(head_bytes + body)
        else:
            t.writelines([head_bytes, body])
        if not keep_alive:
            self._close_after_write()


class MetricsFrontend:
    """Serves Triton's Prometheus metrics for ``server`` on
    ``config.metrics_address:config.metrics_port`` (port 0: any free port;
    ``.port`` holds the bound one after ``start()``).

    ``registry`` is a private ``prometheus_client.CollectorRegistry`` holding
    the :class:`EngineCollector`; other collectors registered there (custom
    metrics) appear on the same endpoint.
    """

    def __init__(self, server, config: MetricsConfig | None = None, *, backlog: int = 128):
        self.config = config or MetricsConfig()
        self.host = self.config.metrics_address
        self.port = self.config.metrics_port
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = EngineCollector(server, self.config)
        self.registry.register(self.collector)
        self._backlog = backlog
        self._listener = None
        self._connections: set = set()

    def render(self) -> bytes:
        """The /metrics body now."""
        return exposition(self.registry)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: _MetricsConnection(self), self.host, self.port,
            backlog=self._backlog, reuse_address=True)
        sockets = self._listener.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self, timeout: float = 0.0) -> None:
        # (timeout: what the others take; connections here close at once)
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for conn in list(self._connections):
            conn.close()
        self._connections.clear()
        if listener is not None:
            await listener.wait_closed()
