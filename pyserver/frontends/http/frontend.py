"""HttpFrontend: Triton's HTTP/REST endpoint, its listening socket, its
connections (connection.py) and the settings they share.

The ``server`` object provides ``is_live()``, ``is_ready()``, ``metadata()``,
``model_ready_check(name, version)`` (a bool, or an awaitable of one),
``model_metadata(name, version)``, ``model_config(name, version)``,
``submit(InferRequest, future) -> Future`` (it may resolve the ImmediateFuture
it is given, or return another), ``submit_stream(InferRequest, on_response)``,
``statistics(name, version)``, ``repository_index(ready_only)``,
``load_model(name, config=, files=)`` and ``unload_model(name,
unload_dependents=)`` (coroutines), ``trace_settings(model, update)``,
``log_settings(update)`` and ``shared_memory`` (a SharedMemoryManager); any
of them may raise ``ServerError`` (``submit``'s future may also resolve with
one). A method may return an awaitable: the response is then sent when it
completes, in request order, without blocking the loop.

Limits: request heads above ``max_header_size`` get 431 and bodies above
``max_body_size`` 413 (a Content-Length beyond Triton's int32 range gets
Triton's 400), both answered before the body is read, then the connection is
closed; JSON bodies above ``max_input_size`` (``--http-max-input-size``) get
Triton's 400 texts. A client that half-closes still gets its responses; one
that goes away mid-request leaves nothing behind.

Slow clients (as nginx bounds them): a request head, the first one counted
from the connect, must arrive whole within ``header_timeout`` seconds, and a
body may not pause longer than ``body_timeout`` between reads; else 408 and
the connection closes. With ``idle_timeout``, connections idle that long
between requests are closed. At most ``max_connections`` are held; one more
is answered 503 and closed.
"""

from __future__ import annotations

import asyncio
import os
import resource

from pyserver.engine.protocol.http_codec import DEFAULT_MAX_INPUT_SIZE
from pyserver.engine.protocol.http_lane import LaneHost
from pyserver.frontends.header_forward import HeaderForwarder
from pyserver.frontends.http.connection import HttpConnection
from pyserver.frontends.http.framing import error_body
from pyserver.frontends.http.infer import infer
from pyserver.frontends.http.routes import RESTRICTED_API_GROUPS
from pyserver.frontends.listener import listen
from pyserver.runtime.shared_memory import SharedMemoryManager

# Default request head limit (request line + headers).
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
# Triton parses Content-Length as an int32 (http_server.cc GetContentLength).
_INT32_MAX = (1 << 31) - 1
# nginx's client_header_timeout and client_body_timeout defaults.
DEFAULT_HEADER_TIMEOUT = 60.0
DEFAULT_BODY_TIMEOUT = 60.0
# File descriptors kept for everything but HTTP connections (models, gRPC,
# logs, worker pipes) when the connection cap comes from the fd limit.
_FD_RESERVE = 256


def default_max_connections() -> int:
    """What the process's open-file limit leaves for HTTP connections."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(64, soft - _FD_RESERVE)


class HttpFrontend:
    """Triton-compatible HTTP/REST endpoint on ``host:port`` (port 0: any free port).

    ``restricted_apis``: {group: (header key, header value)} as returned by
    ``parse_restricted_api`` (``--http-restricted-api``); requests to a
    restricted group without that header get 403. ``header_forward_pattern``
    (``--http-header-forward-pattern``): infer and generate requests get the
    headers it matches as string parameters (header_forward.py)."""

    # what each accepted connection is (another endpoint over this HTTP
    # stack, the OpenAI frontend, brings its own routes)
    connection_class = HttpConnection
    # Infer requests to targets already routed are read by a C reader in
    # front of each connection, on the socket pump's threads when there is
    # a pump (engine/protocol/http_lane.pyx); PYSERVER_HTTP_LANE=0 leaves
    # every request to the connection.
    infer_lane = True

    def __init__(self, server, host: str = "0.0.0.0", port: int = 8000, *,
                 max_input_size: int = DEFAULT_MAX_INPUT_SIZE, backlog: int = 1024,
                 reuse_port: bool = False, restricted_apis: dict | None = None,
                 max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
                 max_body_size: int | None = None, idle_timeout: float | None = None,
                 header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
                 body_timeout: float | None = DEFAULT_BODY_TIMEOUT,
                 max_connections: int | None = None,
                 header_forward_pattern: str = "", io_threads: int = 0):
        self.server = server
        # --http-thread-count: the socket pump's threads (listener.py)
        self.io_threads = io_threads
        # --http-header-forward-pattern: matching headers become request parameters
        self.header_forwarder = HeaderForwarder(header_forward_pattern) \
            if header_forward_pattern else None
        self.host = host
        self.port = port
        self.max_input_size = max_input_size
        self.max_header_size = max_header_size
        # what the infer route reads of this frontend and its server, made on
        # the first infer request (engine/protocol/http_route.RouteFrontend)
        self.route_frontend = None
        # Triton reads Content-Length as an int32; bodies are buffered whole.
        self.max_body_size = _INT32_MAX if max_body_size is None else max_body_size
        self.idle_timeout = idle_timeout or None
        self.header_timeout = header_timeout or None
        self.body_timeout = body_timeout or None
        self.max_connections = max_connections or default_max_connections()
        self._backlog = backlog
        self._reuse_port = reuse_port
        self._listener = None
        self.connections: set = set()
        self.loop_time = None
        self._sweep_handle = None
        # group -> (header key, value, the 403 body), as the connections match them
        self.restrictions: dict = {}
        # request target -> (model, version) of infer routes already seen
        # (see HttpConnection.on_request); only without restricted APIs.
        self.infer_routes: dict = {}
        self.lane = None  # the pump's infer lane (start())
        for group, (key, value) in (restricted_apis or {}).items():
            if group not in RESTRICTED_API_GROUPS:
                raise ValueError(f"unknown restricted api '{group}' ")
            payload = error_body(f"This API is restricted, expecting header '{key}'")
            self.restrictions[group] = (key.lower().encode("latin-1"), value.encode("latin-1"),
                                        payload)
        self._shm = None

    @property
    def shared_memory(self) -> SharedMemoryManager:
        shm = self._shm
        if shm is None:
            shm = getattr(self.server, "shared_memory", None)
            if shm is None:  # a server without one: client shm disabled
                shm = SharedMemoryManager(False)
            self._shm = shm
        return shm

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop_time = loop.time
        # The lane knows no header forwarding (the route reads every header),
        # and with restricted APIs no target is ever published to it.
        lane = self.infer_lane and self.header_forwarder is None and not self.restrictions \
            and os.environ.get("PYSERVER_HTTP_LANE", "1") != "0"
        factory = self._new_connection
        if lane and not self.io_threads:  # its readers on the loop, in front of each connection
            self.lane = LaneHost(None, infer, self.max_header_size, self.max_body_size)
            factory = self._new_lane_connection
        self._listener = await listen(factory, self.host, self.port,
                                      backlog=self._backlog, reuse_port=self._reuse_port,
                                      io_threads=self.io_threads)
        sockets = self._listener.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        pump = self._listener.pump
        if lane and pump is not None:  # its readers on the pump's threads
            self.lane = LaneHost(pump, infer, self.max_header_size, self.max_body_size)
            self._listener.readers = self.lane
        if self._sweep_period() is not None:
            self._sweep_handle = loop.call_later(self._sweep_period(), self._sweep, loop)

    def _new_connection(self):
        return self.connection_class(self)

    def _new_lane_connection(self):
        return self.lane.wrap(self.connection_class(self))

    def _sweep_period(self) -> float | None:
        bounds = [t for t in (self.idle_timeout, self.header_timeout, self.body_timeout) if t]
        if not bounds:
            return None
        return max(0.05, min(min(bounds) / 2, 1.0))

    def _sweep(self, loop):
        """Closes the connections that broke a bound (once per period: one
        timer for all of them, nothing per request)."""
        now = loop.time()
        header, body, idle = self.header_timeout, self.body_timeout, self.idle_timeout
        for conn in list(self.connections):
            busy, last_active, state, head_started = conn.activity()
            if idle and not busy and now - last_active > idle:
                conn.close()
                self.connections.discard(conn)
                continue
            if state == 1:
                if header and now - head_started > header:
                    conn.timed_out("header", header)
            elif state == 2:
                if body and now - last_active > body:
                    conn.timed_out("body", body)
        if self._listener is not None:
            self._sweep_handle = loop.call_later(self._sweep_period(), self._sweep, loop)

    async def stop(self, timeout: float = 0.0) -> None:
        # (timeout: what the others take; connections here close at once)
        listener, self._listener = self._listener, None
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        if listener is not None:
            listener.close()
        if self.lane is not None:
            self.lane.close()
        for conn in list(self.connections):
            conn.close()
        self.connections.clear()
        if listener is not None:
            await listener.wait_closed()
