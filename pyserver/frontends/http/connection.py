"""One HTTP/1.1 connection: an ``asyncio.Protocol`` feeding a RequestParser
(engine/protocol/http1.pyx: llhttp with its callbacks in C, one call back per
request), the routes it dispatches to, and its queue of answers.

No framework and no per-request Task: an infer request is handed to
``server.submit()`` and answered from the returned future's done-callback.
Keep-alive and pipelining are supported: answers are written in request
order even when a later request finishes first. Handlers (admin.py,
infer.py, generate.py) answer through ``respond``, ``call``, ``answer_later``
and the slots they append to ``pending``.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect

from pyserver.engine import now_ns
from pyserver.engine.protocol.http1 import ParseError, RequestParser, Upgrade
from pyserver.engine.protocol.http_codec import encode_error, encode_json
from pyserver.engine.protocol.http_route import settled_result
from pyserver.frontends.http.framing import (
    EMPTY_JSON,
    JSON_HEADERS,
    NOT_ALLOWED,
    NOT_FOUND,
    PIPELINE_HIGH,
    PIPELINE_LOW,
    Slot,
    StreamSlot,
    build,
    error_body,
)
from pyserver.frontends.http.infer import infer
from pyserver.frontends.http.routes import match
from pyserver.kernel.errors import Code, ServerError

_POST = "POST"
# Infer targets remembered per frontend (a client making up URLs only resets them).
INFER_ROUTES_MAX = 1024


class Reject(Exception):
    """Raised from a parser callback: answer (status, body) and close."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class HttpConnection(asyncio.Protocol):
    __slots__ = (
        "frontend", "server", "_transport", "_parser", "http10", "pending", "_closing",
        "_write_paused", "_read_paused", "_eof", "last_active", "head_started", "tracer",
        "recv_ns", "_reader", "_fed", "_feeding",
    )

    def __init__(self, frontend):
        self.frontend = frontend
        self.server = frontend.server
        self._transport = None
        self._parser = RequestParser(self, frontend.max_header_size, frontend.max_body_size,
                                     Reject, frontend.header_forwarder is not None,
                                     frontend.max_input_size)
        self.http10 = False
        self.pending = collections.deque()  # answers in request order
        self._closing = False
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        # loop times the frontend's sweep reads: the last bytes received, and
        # when the request head now awaited began (0.0: none awaited)
        self.last_active = 0.0
        self.head_started = 0.0
        # the server's tracer, and when the request now arriving began to
        # (HTTP_RECV_START), taken only while tracing is on
        self.tracer = getattr(self.server, "tracer", None)
        self.recv_ns = 0
        # A pump transport whose reader (the infer lane) takes some requests
        # before they reach us: we get the rest, and hand the connection
        # back once we have answered all we were given (_fed bytes).
        self._reader = None
        self._fed = 0
        self._feeding = False

    @property
    def raw_headers(self):
        """The request's headers as sent (for header forwarding)."""
        return self._parser.raw_headers

    # The JSON body of the errors the connection answers itself (limits,
    # malformed requests, timeouts): an endpoint with another error shape
    # (the OpenAI frontend) overrides it.
    error_body = staticmethod(error_body)

    # ------------------------------------------------------------ transport

    def connection_made(self, transport):
        frontend = self.frontend
        if len(frontend.connections) >= frontend.max_connections:
            # over the cap: say why and go, before any parsing
            self._closing = True
            transport.write(build(503, JSON_HEADERS, self.error_body(
                f"too many connections: the server holds at most "
                f"{frontend.max_connections}"), False, False)[0])
            transport.close()
            return
        self._transport = transport
        if getattr(transport, "has_reader", False):
            self._reader = transport
        frontend.connections.add(self)
        # the first request head is awaited from the connect on (a client
        # that connects and sends nothing is bounded like a slow one)
        self.last_active = self.head_started = frontend.loop_time()

    def connection_lost(self, exc):
        self._transport = None
        self._closing = True
        self.pending.clear()
        self.frontend.connections.discard(self)

    def eof_received(self):
        # The client half-closed: it sends nothing more. Answer what is in
        # flight, then close; a request cut short can never complete.
        self._eof = True
        if self.pending:
            return True  # keep the write side open until _flush drains
        return None  # the transport closes itself

    def pause_writing(self):
        self._write_paused = True
        self.update_reading()

    def resume_writing(self):
        self._write_paused = False
        self.update_reading()

    def update_reading(self):
        t = self._transport
        if t is None:
            return
        n = len(self.pending)
        if self._write_paused or n >= PIPELINE_HIGH:
            if not self._read_paused:
                self._read_paused = True
                t.pause_reading()
        elif self._read_paused and n <= PIPELINE_LOW:
            self._read_paused = False
            t.resume_reading()

    def data_received(self, data):
        if self._closing:
            return
        now = self.frontend.loop_time()
        self.last_active = now
        parser = self._parser
        tracer = self.tracer
        if tracer is not None and tracer.active and not parser.receiving:
            self.recv_ns = now_ns()  # a request begins in these bytes
        reader = self._reader
        if reader is not None:
            self._fed += len(data)
            self._feeding = True
        try:
            parser.feed(data)
            if parser.receiving == 1:
                if not self.head_started:
                    self.head_started = now
            else:
                self.head_started = 0.0
        except Upgrade:
            # Upgrade (h2c, websocket) / CONNECT: we speak only HTTP/1.1. The
            # request itself was answered normally; finish queued responses,
            # then close.
            self._closing = True
            if self.pending:
                self.pending[-1].close = True
            elif self._transport is not None:
                self._transport.close()
        except (ParseError, Reject) as e:
            self._closing = True
            if isinstance(e, Reject):
                status, body = e.status, self.error_body(e.message)
            else:
                status, body = 400, self.error_body(f"malformed HTTP request: {e}")
            self.emit(build(status, JSON_HEADERS, body, False, False), True)
        finally:
            if reader is not None:
                self._feeding = False
                self._hand_back()

    def _hand_back(self):
        """With a reader: once every request we were given is answered and
        no other has begun, the connection is the reader's again (it checks
        that the bytes we had are all it gave)."""
        if not self._feeding and not self.pending and not self._closing \
                and not self._parser.receiving:
            self._reader.resume_reader(self._fed)

    def activity(self) -> tuple:
        """``(busy, last_active, receiving, head_started)`` for the
        frontend's sweep, in loop time, the reader's part included: busy
        while an answer is owed, receiving as ``receiving``."""
        busy = bool(self.pending)
        last_active, receiving, head_started = self.last_active, self.receiving, \
            self.head_started
        if self._reader is not None:
            progress = self._reader.reader_progress()
            if progress is not None:
                state, since, last_read = progress
                last_active = max(last_active, last_read)
                if state == 3:
                    busy = True
                elif state and not receiving:
                    receiving, head_started = state, since
        return busy, last_active, receiving, head_started

    def timed_out(self, what: str, seconds: float) -> None:
        """A request head or body did not arrive in time (the frontend's
        sweep): 408 when nothing is ahead of it, then close."""
        if self._closing or self._transport is None:
            return
        self._closing = True
        if self.pending:
            self.close()
            return
        self.emit(build(408, JSON_HEADERS, self.error_body(
            f"request {what} not received within {seconds:g} s"), False, False), True)

    @property
    def receiving(self) -> int:
        """0 between requests, 1 awaiting a request head, 2 its body; reads
        paused by back-pressure wait on us, not on the client (0)."""
        if self._read_paused:
            return 0
        return self._parser.receiving or (1 if self.head_started else 0)

    def close(self):
        """Close now (server shutdown); responses still in flight are dropped."""
        self._closing = True
        self.pending.clear()
        t, self._transport = self._transport, None
        if t is not None:
            t.close()

    # ------------------------------------------------------------ from the parser

    def on_continue(self):
        """The request waits for "100 Continue" before sending its body."""
        if not self.pending and self._transport is not None and not self._closing:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_request(self, method: str, url: bytes, headers: dict, body: bytes,
                   keep_alive: bool, http10: bool):
        if self._closing:
            return  # after "Connection: close" or an error: ignore pipelined leftovers
        self.http10 = http10
        if not keep_alive:
            self._closing = True
        try:
            # An infer target seen before skips the routing: most requests
            # a server gets are those.
            known = self.frontend.infer_routes.get(url)
            if known is not None and method == _POST:
                infer(self, method, headers, body, keep_alive, known[0], known[1])
            else:
                self._dispatch(method, url, headers, body, keep_alive)
        except Exception as e:  # never drop the connection on a bug
            self.respond_exception(e, keep_alive)

    def _dispatch(self, method: str, url: bytes, headers: dict, body: bytes, keep_alive: bool):
        route = match(url)
        if route is None:
            return self.respond(404, JSON_HEADERS, NOT_FOUND, keep_alive)
        restrictions = self.frontend.restrictions
        if restrictions and self._restricted(route.group, headers, keep_alive):
            return
        if method not in route.methods:
            return self.respond(405, JSON_HEADERS, NOT_ALLOWED, keep_alive)
        if route.handler is infer and not restrictions:
            self._publish(url, route.args)
        return route.handler(self, method, headers, body, keep_alive, *route.args)

    def _publish(self, url: bytes, args: tuple) -> None:
        """Remembers ``url`` as an infer target (``args``: its model and
        version), for the next request to it and for the lane."""
        frontend = self.frontend
        routes = frontend.infer_routes
        lane = frontend.lane
        if len(routes) >= INFER_ROUTES_MAX:
            routes.clear()
            if lane is not None:
                lane.clear_routes()
        routes[url] = args
        if lane is not None:
            lane.add_route(url, *args)

    def infer_route(self, url: bytes) -> tuple:
        """(model, version) of an infer target the lane took and then
        forgot the route of (the cache was reset before the loop ran the
        request), routed and remembered again as _dispatch does."""
        route = match(url)
        if route is None or route.handler is not infer:
            raise ServerError(Code.INTERNAL, f"the infer lane took a request for {url!r}, "
                                             "which is not an infer target")
        self._publish(url, route.args)
        return route.args

    def _restricted(self, group: str, headers: dict, keep_alive: bool) -> bool:
        """RETURN_AND_RESPOND_IF_RESTRICTED: True when answered with 403."""
        rule = self.frontend.restrictions.get(group)
        if rule is None:
            return False
        key, value, payload = rule
        if headers.get(key) == value:
            return False
        self.respond(403, JSON_HEADERS, payload, keep_alive)
        return True

    # ------------------------------------------------------------ answers

    build = staticmethod(build)

    def emit(self, data: list, close: bool):
        """Queue (or write, when nothing is ahead of it) a ready response."""
        if self.pending:
            slot = Slot(close)
            slot.data = data
            self.pending.append(slot)
            self._flush()
            return
        t = self._transport
        if t is None:
            return
        if len(data) == 1:
            t.write(data[0])
        else:
            t.writelines(data)
        if close or self._eof:
            self._closing = True
            t.close()
        elif self._reader is not None:
            self._hand_back()

    def answered(self):
        """A slot got its answer (or a chunk): write what is ready, in order."""
        if self._transport is not None:
            self._flush()

    def _flush(self):
        pending = self.pending
        t = self._transport
        while pending:
            slot = pending[0]
            if type(slot) is StreamSlot:  # written as its events come
                if slot.chunks:
                    if t is not None:
                        t.writelines(slot.chunks)
                    slot.chunks = []
                if not slot.done:
                    break
                pending.popleft()
                if slot.close and t is not None:
                    self._closing = True
                    pending.clear()
                    t.close()
                    return
                continue
            if slot.data is None:
                break
            pending.popleft()
            if t is None:
                continue
            data = slot.data
            if len(data) == 1:
                t.write(data[0])
            else:
                t.writelines(data)
            if slot.close:
                self._closing = True
                pending.clear()
                t.close()
                return
        if self._eof and not pending and t is not None:
            self._closing = True
            t.close()
            return
        if self._read_paused:
            self.update_reading()
        if self._reader is not None:
            self._hand_back()

    def respond(self, status: int, headers, body, keep_alive: bool):
        self.emit(build(status, headers, body, keep_alive, self.http10), not keep_alive)

    def respond_exception(self, e: BaseException, keep_alive: bool):
        if isinstance(e, ServerError):
            status, body = encode_error(e)
            self.respond(status, JSON_HEADERS, body, keep_alive)
        else:
            self.respond(500, JSON_HEADERS, error_body(str(e) or type(e).__name__), keep_alive)

    def error_data(self, e: BaseException, keep_alive: bool, http10: bool,
                   headers=JSON_HEADERS) -> list:
        if isinstance(e, ServerError):
            status, payload = encode_error(e)
        else:
            status, payload = 500, error_body(str(e) or type(e).__name__)
        return build(status, headers, payload, keep_alive, http10)

    def call(self, fn, args, keep_alive: bool, encode=encode_json):
        """Answers with ``encode(fn(*args))`` (or an empty body when encode is
        None); an awaitable result is answered when it completes, in order."""
        try:
            result = fn(*args)
            if not inspect.isawaitable(result):
                payload = EMPTY_JSON if encode is None else encode(result)
                return self.respond(200, JSON_HEADERS, payload, keep_alive)
            fut = asyncio.ensure_future(result)
        except Exception as e:
            return self.respond_exception(e, keep_alive)
        self.answer_later(fut, keep_alive, functools.partial(self._call_data, encode))

    def answer_later(self, fut, keep_alive: bool, make) -> None:
        """Holds a place, in request order, for the answer to ``fut``:
        ``make(fut, keep_alive, http10)`` builds it once ``fut`` is done."""
        slot = Slot(not keep_alive)
        self.pending.append(slot)
        fut.add_done_callback(functools.partial(self._answered_later, slot, make, self.http10))
        if len(self.pending) >= PIPELINE_HIGH:
            self.update_reading()

    def _answered_later(self, slot: Slot, make, http10: bool, fut):
        slot.data = make(fut, not slot.close, http10)
        self.answered()

    def _call_data(self, encode, fut, keep_alive: bool, http10: bool) -> list:
        try:
            result = settled_result(fut)
            payload = EMPTY_JSON if encode is None else encode(result)
            return build(200, JSON_HEADERS, payload, keep_alive, http10)
        except Exception as e:
            return self.error_data(e, keep_alive, http10)
