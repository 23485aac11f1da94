"""HTTP/1.1 KServe v2 frontend: asyncio.Protocol + llhttp + orjson.

No framework and no per-request Task: each connection is one
``asyncio.Protocol`` feeding a RequestParser (engine/protocol/http1.pyx: llhttp with
its callbacks in C, one call back per request); an infer
request is handed to ``server.submit()`` and answered from the returned
future's done-callback. Keep-alive and pipelining are supported: responses are
written in request order even when a later request finishes first.

The ``server`` object provides ``is_live()``, ``is_ready()``, ``metadata()``,
``model_ready_check(name, version)`` (a bool, or an awaitable of one),
``model_metadata(name, version)``,
``model_config(name, version)``, ``submit(InferRequest, future) -> Future`` (it
may resolve the ImmediateFuture it is given, or return another),
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
that goes away mid-request leaves nothing behind; with ``idle_timeout`` set,
connections idle that long without a request in flight are closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import functools
import inspect
import zlib
from urllib.parse import unquote

import orjson

from pyserver.engine.protocol.http1 import ParseError, RequestParser, Upgrade
from pyserver.engine.protocol.http_infer import http_message
from pyserver.frontends.header_forward import HeaderForwarder
from pyserver.frontends.http_codec import (
    DEFAULT_MAX_INPUT_SIZE,
    answer_infer,
    decode_infer_request,
    encode_error,
    encode_infer_response,
    encode_json,
    release_shm,
)
from pyserver.frontends.http_generate import decode_generate_request, generate_response, sse_event
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import ImmediateFuture
from pyserver.runtime.shared_memory import CUDA, SYSTEM, SharedMemoryManager

__all__ = ["HttpFrontend", "parse_restricted_api", "RESTRICTED_API_GROUPS"]

# restricted_features.h RESTRICTED_CATEGORY_NAMES
RESTRICTED_API_GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config",
                         "model-repository", "statistics", "trace", "logging")
# Default request head limit (request line + headers).
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
# Triton parses Content-Length as an int32 (http_server.cc GetContentLength).
_INT32_MAX = (1 << 31) - 1

_REASONS = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Payload Too Large",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}
_STATUS_LINES = {code: b"HTTP/1.1 %d %s\r\n" % (code, reason) for code, reason in _REASONS.items()}

_JSON_CT = (b"Content-Type", b"application/json")
_JSON_HEADERS = [_JSON_CT]
_NO_HEADERS: list = []
_CONN_CLOSE = b"Connection: close\r\n"

_NOT_FOUND = b'{"error":"Not Found"}'
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_MODEL_NOT_READY = b'{"error":"Model version not ready"}'

_GET = "GET"
_POST = "POST"
_EMPTY_JSON = b""

# Pipelining / write back-pressure: stop reading a connection while this many
# responses are queued, resume below the low mark.
_PIPELINE_HIGH = 128
_PIPELINE_LOW = 32
# zlib level for infer responses when the client sends Accept-Encoding gzip/deflate
# (as Triton does; aiohttp, hence tritonclient.http.aio, asks for it by default).
_COMPRESS_LEVEL = 1


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 %d Unknown\r\n" % status
    return line


def _accept_encoding(value: bytes) -> str:
    """Triton's choice among identity/gzip/deflate by q-weight (first wins ties)."""
    best, weight = "identity", 0.0
    for item in value.decode("latin-1").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, q = item.partition(";")
        name = name.strip().lower()
        w = 1.0
        q = q.strip()
        if q:
            if not q.startswith("q="):
                continue
            try:
                w = float(q[2:])
            except ValueError:
                continue
        if name in ("identity", "gzip", "deflate") and w > weight:
            best, weight = name, w
    return best


_ACCEPT_CACHE: dict = {}


def _response_encoding(value) -> str | None:
    if value is None:
        return None
    enc = _ACCEPT_CACHE.get(value)
    if enc is None:
        enc = _accept_encoding(value)
        if len(_ACCEPT_CACHE) < 256:
            _ACCEPT_CACHE[value] = enc
    return None if enc == "identity" else enc


def _compress(enc: str, body) -> bytes:
    data = body if type(body) is bytes else b"".join(body)
    if enc == "gzip":
        return zlib.compress(data, _COMPRESS_LEVEL, 31)
    return zlib.compress(data, _COMPRESS_LEVEL)


def _decompress(enc: bytes, body: bytes, limit: int) -> bytes:
    name = enc.decode("latin-1").strip().lower()
    if name == "gzip":
        wbits = 47  # gzip or zlib header, auto-detected
    elif name == "deflate":
        wbits = 15
    elif name in ("", "identity"):
        return body
    else:
        raise ServerError(Code.UNSUPPORTED, "Unsupported compression type")
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        raise ServerError(Code.INVALID_ARG, f"failed to decompress the request body: {e}") from None
    if len(out) > limit:
        raise ServerError(
            Code.INVALID_ARG,
            f"decompressed request body exceeds the maximum allowed input size of {limit} "
            "bytes. Use --http-max-input-size to increase the limit.",
        )
    return out


def parse_restricted_api(values) -> dict:
    """``--http-restricted-api`` values ("<api-1>,<api-2>:<key>=<value>", the
    flag may repeat) -> {group: (header key, header value)}. Raises
    ValueError with Triton's texts (command_line_parser.cc)."""
    result: dict = {}
    for arg in values or ():
        delim_name = arg.find(":")
        delim_setting = arg.find("=", delim_name + 1) if delim_name >= 0 else -1
        error = ("--http-restricted-api option format is '<config name>:<setting>=<value>'. "
                 f"Got {arg}")
        if delim_name < 0 or delim_setting < 0:
            raise ValueError(error)
        groups = arg[:delim_name]
        key = arg[delim_name + 1:delim_setting]
        value = arg[delim_setting + 1:]
        if not groups or not key or not value:
            raise ValueError(error)
        for group in groups.split(","):
            if group not in RESTRICTED_API_GROUPS:
                raise ValueError(f"unknown restricted api '{group}' ")
            if group in result:
                raise ValueError(f"restricted api '{group}' can not be specified in multiple "
                                 "config groups")
            result[group] = (key, value)
    return result


class _Reject(Exception):
    """Raised from a parser callback: answer (status, body) and close."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _json_body(body: bytes, limit: int):
    """A non-infer JSON request body (EVRequestToJson): None when empty."""
    if not body:
        return None
    if len(body) > limit:
        raise ServerError(
            Code.INVALID_ARG,
            f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size of "
            f"{limit} bytes. Use --http-max-input-size to increase the limit.")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ServerError(Code.INVALID_ARG,
                          f"failed to parse the request JSON buffer: {e.msg} at {e.pos}") from None


def _bad(msg: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, msg)


def _is_uint(v) -> bool:
    return type(v) is int and 0 <= v < (1 << 64)


def _b64decode(value: str, name: str) -> bytes:
    """Lenient base64 (Triton's libb64 decoder skips what it cannot decode)."""
    if len(value) > _INT32_MAX:
        raise _bad(f"'{name}' exceeds the maximum allowed data size limit INT_MAX")
    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError):
        cleaned = "".join(c for c in value if c.isalnum() or c in "+/")
        try:
            return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4))
        except (binascii.Error, ValueError):
            raise _bad(f"unable to decode base64 data of '{name}'") from None


_INFER_ROUTES_MAX = 1024  # targets remembered (a client making up URLs only resets it)


class _Slot:
    """A queued response, in request order; ``data`` is None until ready."""

    __slots__ = ("data", "close")

    def __init__(self, close: bool):
        self.data = None
        self.close = close


class _StreamSlot(_Slot):
    """A response sent as it is produced (chunked server-sent events):
    ``chunks`` wait for their turn in request order; ``done`` once the last
    chunk is queued."""

    __slots__ = ("chunks", "done")

    def __init__(self, close: bool):
        super().__init__(close)
        self.chunks = []
        self.done = False

    def add(self, payload: bytes) -> None:
        self.chunks.append(b"%x\r\n%s\r\n" % (len(payload), payload))

    def finish(self) -> None:
        self.chunks.append(b"0\r\n\r\n")
        self.done = True


class _HttpConnection(asyncio.Protocol):
    __slots__ = (
        "_frontend", "_server", "_transport", "_parser", "_http10", "_pending", "_closing",
        "_write_paused", "_read_paused", "_eof", "last_active",
    )

    def __init__(self, frontend: "HttpFrontend"):
        self._frontend = frontend
        self._server = frontend._server
        self._transport = None
        self._parser = RequestParser(self, frontend.max_header_size, frontend.max_body_size,
                                     _Reject, frontend.header_forwarder is not None)
        self._http10 = False
        self._pending = collections.deque()
        self._closing = False
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        self.last_active = 0.0

    # ------------------------------------------------------------ transport

    def connection_made(self, transport):
        self._transport = transport
        self._frontend._connections.add(self)
        if self._frontend.idle_timeout:
            self.last_active = self._frontend._loop_time()

    def connection_lost(self, exc):
        self._transport = None
        self._closing = True
        self._pending.clear()
        self._frontend._connections.discard(self)

    def eof_received(self):
        # The client half-closed: it sends nothing more. Answer what is in
        # flight, then close; a request cut short can never complete.
        self._eof = True
        if self._pending:
            return True  # keep the write side open until _flush drains
        return None  # the transport closes itself

    def pause_writing(self):
        self._write_paused = True
        self._update_reading()

    def resume_writing(self):
        self._write_paused = False
        self._update_reading()

    def _update_reading(self):
        t = self._transport
        if t is None:
            return
        n = len(self._pending)
        if self._write_paused or n >= _PIPELINE_HIGH:
            if not self._read_paused:
                self._read_paused = True
                t.pause_reading()
        elif self._read_paused and n <= _PIPELINE_LOW:
            self._read_paused = False
            t.resume_reading()

    def data_received(self, data):
        if self._closing:
            return
        frontend = self._frontend
        if frontend.idle_timeout:
            self.last_active = frontend._loop_time()
        try:
            self._parser.feed(data)
        except Upgrade:
            # Upgrade (h2c, websocket) / CONNECT: we speak only HTTP/1.1. The
            # request itself was answered normally; finish queued responses,
            # then close.
            self._closing = True
            if self._pending:
                self._pending[-1].close = True
            elif self._transport is not None:
                self._transport.close()
        except (ParseError, _Reject) as e:
            self._closing = True
            if isinstance(e, _Reject):
                status, body = e.status, encode_json({"error": e.message})
            else:
                status, body = 400, encode_json({"error": f"malformed HTTP request: {e}"})
            self._emit(self._build(status, _JSON_HEADERS, body, False, False), True)

    def close(self):
        """Close now (server shutdown); responses still in flight are dropped."""
        self._closing = True
        self._pending.clear()
        t, self._transport = self._transport, None
        if t is not None:
            t.close()

    # ------------------------------------------------------------ from the parser

    def on_continue(self):
        """The request waits for "100 Continue" before sending its body."""
        if not self._pending and self._transport is not None and not self._closing:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_request(self, method: str, url: bytes, headers: dict, body: bytes,
                   keep_alive: bool, http10: bool):
        if self._closing:
            return  # after "Connection: close" or an error: ignore pipelined leftovers
        self._http10 = http10
        if not keep_alive:
            self._closing = True
        try:
            # An infer target seen before skips the routing: most requests
            # a server gets are those.
            route = self._frontend._infer_routes.get(url)
            if route is not None and method == _POST:
                self._infer(route[0], route[1], headers, body, keep_alive)
            else:
                self._dispatch(method, url, headers, body, keep_alive)
        except Exception as e:  # never drop the connection on a bug
            self._respond_exception(e, keep_alive)

    # ------------------------------------------------------------ responses

    def _build(self, status: int, headers, body, keep_alive: bool, http10: bool) -> list:
        return http_message(_status_line(status), headers, body, keep_alive, http10)

    def _emit(self, data: list, close: bool):
        """Queue (or write, when nothing is ahead of it) a ready response."""
        if self._pending:
            slot = _Slot(close)
            slot.data = data
            self._pending.append(slot)
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

    def _flush(self):
        pending = self._pending
        t = self._transport
        while pending:
            slot = pending[0]
            if type(slot) is _StreamSlot:  # written as its events come
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
            self._update_reading()

    def _respond(self, status: int, headers, body, keep_alive: bool):
        self._emit(self._build(status, headers, body, keep_alive, self._http10), not keep_alive)

    def _respond_error(self, err: ServerError, keep_alive: bool):
        status, body = encode_error(err)
        self._respond(status, _JSON_HEADERS, body, keep_alive)

    def _respond_exception(self, e: BaseException, keep_alive: bool):
        if isinstance(e, ServerError):
            self._respond_error(e, keep_alive)
        else:
            msg = str(e) or type(e).__name__
            self._respond(500, _JSON_HEADERS, encode_json({"error": msg}), keep_alive)

    def _error_data(self, e: BaseException, keep_alive: bool, http10: bool) -> list:
        if isinstance(e, ServerError):
            status, payload = encode_error(e)
        else:
            status, payload = 500, encode_json({"error": str(e) or type(e).__name__})
        return self._build(status, _JSON_HEADERS, payload, keep_alive, http10)

    def _call(self, fn, args, keep_alive: bool, encode=encode_json):
        """Answers with ``encode(fn(*args))`` (or an empty body when encode is
        None); an awaitable result is answered when it completes, in order."""
        try:
            result = fn(*args)
            if not inspect.isawaitable(result):
                payload = _EMPTY_JSON if encode is None else encode(result)
                return self._respond(200, _JSON_HEADERS, payload, keep_alive)
            fut = asyncio.ensure_future(result)
        except Exception as e:
            return self._respond_exception(e, keep_alive)
        self._answer_later(fut, keep_alive, functools.partial(self._call_data, encode))

    def _answer_later(self, fut, keep_alive: bool, build) -> None:
        """Holds a place, in request order, for the answer to ``fut``:
        ``build(fut, keep_alive, http10)`` makes it once ``fut`` is done."""
        slot = _Slot(not keep_alive)
        self._pending.append(slot)
        fut.add_done_callback(functools.partial(self._answered, slot, build, self._http10))
        if len(self._pending) >= _PIPELINE_HIGH:
            self._update_reading()

    def _answered(self, slot: _Slot, build, http10: bool, fut):
        slot.data = build(fut, not slot.close, http10)
        if self._transport is not None:
            self._flush()

    def _call_data(self, encode, fut, keep_alive: bool, http10: bool) -> list:
        try:
            if fut.cancelled():
                raise ServerError(Code.CANCELLED, "request was cancelled")
            exc = fut.exception()
            if exc is not None:
                raise exc
            payload = _EMPTY_JSON if encode is None else encode(fut.result())
            return self._build(200, _JSON_HEADERS, payload, keep_alive, http10)
        except Exception as e:
            return self._error_data(e, keep_alive, http10)

    def _ready_data(self, fut, keep_alive: bool, http10: bool) -> list:
        """A model-ready answer that waited for the model's own is_ready()."""
        ready = not fut.cancelled() and fut.exception() is None and fut.result()
        return self._model_ready_answer(ready, keep_alive, http10)

    def _model_ready_answer(self, ready, keep_alive: bool, http10: bool) -> list:
        if ready:
            return self._build(200, _NO_HEADERS, b"", keep_alive, http10)
        return self._build(400, _JSON_HEADERS, _MODEL_NOT_READY, keep_alive, http10)

    def _restricted(self, group: str, headers: dict, keep_alive: bool) -> bool:
        """RETURN_AND_RESPOND_IF_RESTRICTED: True when answered with 403."""
        rule = self._frontend._restrictions.get(group)
        if rule is None:
            return False
        key, value, payload = rule
        if headers.get(key) == value:
            return False
        self._respond(403, _JSON_HEADERS, payload, keep_alive)
        return True

    # ------------------------------------------------------------ routing

    def _dispatch(self, method: str, url: bytes, headers: dict, body: bytes, keep_alive: bool):
        target = url
        q = url.find(b"?")
        if q >= 0:
            url = url[:q]
        parts = url.decode("utf-8", "replace").split("/")
        n = len(parts)
        if n < 2 or parts[0] or parts[1] != "v2":
            return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
        restricted = self._frontend._restrictions
        if n == 2:  # /v2
            if restricted and self._restricted("metadata", headers, keep_alive):
                return
            if method != _GET:
                return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
            try:
                payload = encode_json(self._server.metadata())
            except Exception as e:
                return self._respond_exception(e, keep_alive)
            return self._respond(200, _JSON_HEADERS, payload, keep_alive)

        section = parts[2]
        if section == "models" and n >= 4:
            model = parts[3]
            if not model:
                return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
            if n == 4 and model == "stats":  # /v2/models/stats: every model
                return self._stats(method, "", "", headers, keep_alive)
            if "%" in model:
                model = unquote(model)
            version = ""
            i = 4
            if n >= 6 and parts[4] == "versions":
                version = parts[5]
                if not (version.isdigit() and version.isascii()):
                    return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
                i = 6
            if i == n:
                kind = ""
            elif i + 1 == n:
                kind = parts[i]
            elif i + 2 == n and parts[i] == "trace" and parts[i + 1] == "setting" and i == 4:
                kind = "trace/setting"
            else:
                return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
            if kind == "infer":
                if restricted and self._restricted("inference", headers, keep_alive):
                    return
                if method != _POST:
                    return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
                if not restricted:
                    routes = self._frontend._infer_routes
                    if len(routes) >= _INFER_ROUTES_MAX:
                        routes.clear()
                    routes[target] = (model, version)
                return self._infer(model, version, headers, body, keep_alive)
            if kind == "generate" or kind == "generate_stream":
                if restricted and self._restricted("inference", headers, keep_alive):
                    return
                if method != _POST:
                    return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
                return self._generate(model, version, body, keep_alive, kind == "generate_stream")
            if kind == "ready":
                if restricted and self._restricted("health", headers, keep_alive):
                    return
                if method != _GET:
                    return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
                try:
                    ready = self._server.model_ready_check(model, version)
                except Exception as e:
                    return self._respond_exception(e, keep_alive)
                if inspect.isawaitable(ready):
                    return self._answer_later(asyncio.ensure_future(ready), keep_alive,
                                              self._ready_data)
                return self._emit(self._model_ready_answer(ready, keep_alive, self._http10),
                                  not keep_alive)
            if kind == "config" or kind == "":
                if restricted and self._restricted("model-config" if kind else "metadata",
                                                   headers, keep_alive):
                    return
                if method != _GET:
                    return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
                try:
                    if kind:
                        obj = self._server.model_config(model, version)
                    else:
                        obj = self._server.model_metadata(model, version)
                    payload = encode_json(obj)
                except Exception as e:
                    return self._respond_exception(e, keep_alive)
                return self._respond(200, _JSON_HEADERS, payload, keep_alive)
            if kind == "stats":
                return self._stats(method, model, version, headers, keep_alive)
            if kind == "trace/setting":
                return self._settings("trace", method, headers, body, keep_alive,
                                      self._server.trace_settings, model)
            return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)

        if section == "health" and n == 4 and (parts[3] == "live" or parts[3] == "ready"):
            if restricted and self._restricted("health", headers, keep_alive):
                return
            if method != _GET:
                return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
            try:
                ok = self._server.is_live() if parts[3] == "live" else self._server.is_ready()
            except Exception as e:
                return self._respond_exception(e, keep_alive)
            return self._respond(200 if ok else 400, _NO_HEADERS, b"", keep_alive)

        if section == "systemsharedmemory" or section == "cudasharedmemory":
            rest = parts[3:]
            if len(rest) == 1:
                region, action = "", rest[0]
            elif len(rest) == 3 and rest[0] == "region" and rest[1]:
                region, action = unquote(rest[1]), rest[2]
            else:
                action = None
            if action in ("status", "register", "unregister"):
                kind = SYSTEM if section == "systemsharedmemory" else CUDA
                return self._shared_memory(method, kind, region, action, headers, body,
                                           keep_alive)
        elif section == "repository":
            return self._repository(method, parts[3:], headers, body, keep_alive)
        elif section == "trace" and n == 4 and parts[3] == "setting":
            return self._settings("trace", method, headers, body, keep_alive,
                                  self._server.trace_settings, None)
        elif section == "logging" and n == 3:
            return self._settings("logging", method, headers, body, keep_alive,
                                  self._server.log_settings)

        return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)

    # ------------------------------------------------------------ extensions

    def _stats(self, method, model, version, headers, keep_alive):
        if self._frontend._restrictions and self._restricted("statistics", headers, keep_alive):
            return
        if method != _GET:
            return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
        return self._call(self._server.statistics, (model, version), keep_alive)

    def _repository(self, method, rest, headers, body, keep_alive):
        # /v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))
        k = len(rest)
        repo = None
        if k == 1 and rest[0] == "index":
            action = "index"
        elif k == 2 and rest[1] == "index" and rest[0]:
            action, repo = "index", rest[0]
        elif k == 3 and rest[0] == "models" and rest[1] and rest[2] in ("load", "unload"):
            action, model = rest[2], rest[1]
        elif (k == 4 and rest[0] and rest[1] == "models" and rest[2]
              and rest[3] in ("load", "unload")):
            action, model, repo = rest[3], rest[2], rest[0]
        else:
            return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
        if self._frontend._restrictions and self._restricted("model-repository", headers,
                                                             keep_alive):
            return
        if method != _POST:
            return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
        limit = self._frontend.max_input_size
        server = self._server
        try:
            doc = _json_body(body, limit)
            if action == "index":  # the repository name is ignored, as in Triton
                ready = False
                if type(doc) is dict and "ready" in doc:
                    ready = doc["ready"]
                    if type(ready) is not bool:
                        raise _bad("Invalid value for 'ready': expected a boolean")
                return self._call(server.repository_index, (ready,), keep_alive)
            if repo is not None:
                raise ServerError(Code.UNSUPPORTED,
                                  "'repository_name' specification is not supported")
            if "%" in model:
                model = unquote(model)
            params = doc.get("parameters") if type(doc) is dict else None
            if action == "load":
                config = None
                files = None
                if params is not None:
                    if type(params) is not dict:
                        raise _bad("attempt to get members for non-object")
                    for key, value in params.items():
                        if type(value) is not str:
                            raise _bad("attempt to access JSON non-string as string")
                        if key == "config":
                            config = value
                        elif key.startswith("file:"):
                            if files is None:
                                files = {}
                            files[key[5:]] = _b64decode(value, key)
                        else:
                            raise ServerError(Code.INTERNAL,
                                              "unexpected error on creating Triton parameter")
                return self._call(
                    functools.partial(server.load_model, config=config, files=files),
                    (model,), keep_alive, None)
            unload_dependents = False
            if type(params) is dict and "unload_dependents" in params:
                unload_dependents = params["unload_dependents"]
                if type(unload_dependents) is not bool:
                    raise _bad("Unable to parse 'unload_dependents': attempt to access JSON "
                               "non-boolean as boolean")
            return self._call(
                functools.partial(server.unload_model, unload_dependents=unload_dependents),
                (model,), keep_alive, None)
        except Exception as e:
            return self._respond_exception(e, keep_alive)

    def _settings_update(self, body) -> dict:
        """The JSON object a settings POST carries ({} for an empty body)."""
        update = _json_body(body, self._frontend.max_input_size)
        if update is None:
            return {}
        if type(update) is not dict:
            raise _bad("attempt to get members for non-object")
        return update

    def _settings(self, group, method, headers, body, keep_alive, fn, *args):
        """Trace and logging settings: GET reads them, POST updates them;
        ``fn(*args, update)`` answers either way."""
        if self._frontend._restrictions and self._restricted(group, headers, keep_alive):
            return
        if method != _GET and method != _POST:
            return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
        update = None
        if method == _POST:
            try:
                update = self._settings_update(body)
            except Exception as e:
                return self._respond_exception(e, keep_alive)
        return self._call(fn, (*args, update), keep_alive)

    def _shared_memory(self, method, kind, region, action, headers, body, keep_alive):
        if self._frontend._restrictions and self._restricted("shared-memory", headers,
                                                             keep_alive):
            return
        if (action == "status") != (method == _GET) or method not in (_GET, _POST):
            return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
        shm = self._frontend.shared_memory
        try:
            if action == "status":
                payload = encode_json(shm.status(region or None, kind))
                return self._respond(200, _JSON_HEADERS, payload, keep_alive)
            if action == "unregister":
                shm.unregister(region or None, kind)
                return self._respond(200, _JSON_HEADERS, _EMPTY_JSON, keep_alive)
            # register
            if not shm.allow_client_shm:
                shm._check_allowed()
            label = "system" if kind == SYSTEM else "cuda"
            if not region:
                raise _bad(f"'region name' is necessary to register {label} shared memory region")
            doc = _json_body(body, self._frontend.max_input_size)
            if type(doc) is not dict:
                doc = {}
            if kind == SYSTEM:
                if "key" not in doc:
                    raise _bad("Shared memory register request has no 'key' field")
                key = doc["key"]
                if type(key) is not str:
                    raise _bad("attempt to access JSON non-string as string")
                offset = doc.get("offset", 0)
                if not _is_uint(offset):
                    raise _bad("attempt to access JSON non-unsigned-integer as unsigned-integer")
                if "byte_size" not in doc:
                    raise _bad("Shared memory register request has no 'byte_size' field")
                byte_size = doc["byte_size"]
                if not _is_uint(byte_size):
                    raise _bad("attempt to access JSON non-unsigned-integer as unsigned-integer")
                shm.register_system(region, key, offset, byte_size)
            else:
                if not shm.cuda_available():
                    shm.register_cuda(region, b"", 0, 0)  # raises GPUs not supported
                handle = doc.get("raw_handle")
                if handle is None:
                    raise _bad("Shared memory register request has no 'raw_handle' field")
                if type(handle) is not dict:
                    raise _bad("attempt to access JSON non-object as object")
                b64 = handle.get("b64")
                if b64 is None:
                    raise _bad("attempt to access non-existing object member 'b64'")
                if type(b64) is not str:
                    raise _bad("attempt to access JSON non-string as string")
                for field in ("byte_size", "device_id"):
                    if field not in doc:
                        raise _bad(f"attempt to access non-existing object member '{field}'")
                    if not _is_uint(doc[field]):
                        raise _bad("attempt to access JSON non-unsigned-integer as "
                                   "unsigned-integer")
                raw = _b64decode(b64, "raw_handle")
                shm.register_cuda(region, raw, doc["device_id"], doc["byte_size"])
            return self._respond(200, _JSON_HEADERS, _EMPTY_JSON, keep_alive)
        except Exception as e:
            return self._respond_exception(e, keep_alive)

    # ------------------------------------------------------------ infer

    def _infer(self, model: str, version: str, headers: dict, body: bytes, keep_alive: bool):
        frontend = self._frontend
        server = self._server
        request = None
        try:
            enc = headers.get(b"content-encoding")
            if enc is not None:
                body = _decompress(enc, body, frontend.max_input_size)
            request = decode_infer_request(
                model, version, headers.get(b"inference-header-content-length"), body,
                frontend.max_input_size, frontend.shared_memory, server.model_config)
            if frontend.header_forwarder is not None:
                frontend.header_forwarder.forward(self._parser.raw_headers, request.parameters)
            # answered as the request's batch completes, not an iteration later
            fut = server.submit(request, ImmediateFuture())
        except Exception as e:
            if request is not None:
                release_shm(request)
            return self._respond_exception(e, keep_alive)
        slot = _Slot(not keep_alive)
        self._pending.append(slot)
        accept = headers.get(b"accept-encoding")
        cb = functools.partial(self._infer_done, slot, request,
                               None if accept is None else _response_encoding(accept),
                               self._http10)
        try:
            if fut.done():  # answered synchronously: no extra loop iteration
                return cb(fut)
            fut.add_done_callback(cb)
        except AttributeError:  # a coroutine or other awaitable
            fut = asyncio.ensure_future(fut)
            fut.add_done_callback(cb)
        if len(self._pending) >= _PIPELINE_HIGH:
            self._update_reading()

    def _generate(self, model: str, version: str, body: bytes, keep_alive: bool, stream: bool):
        """The generate extension (http_generate.py): one JSON answer, or
        server-sent events, one per response, for generate_stream."""
        server = self._server
        try:
            request = decode_generate_request(model, version, body,
                                              server.model_config(model, version))
            forwarder = self._frontend.header_forwarder
            if forwarder is not None:
                forwarder.forward(self._parser.raw_headers, request.parameters)
        except Exception as e:
            return self._respond_exception(e, keep_alive)
        if stream:
            slot = _StreamSlot(not keep_alive)
            head = b"%sContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" \
                   b"Transfer-Encoding: chunked\r\n%s\r\n" % (
                       _status_line(200), b"" if keep_alive else _CONN_CLOSE)
            slot.chunks.append(head)
        else:
            slot = _Slot(not keep_alive)
            got = []
        self._pending.append(slot)

        def on_response(response, error, final):
            if stream:
                if error is not None:
                    slot.add(sse_event({"error": str(error)}))
                elif response is not None and response.outputs:
                    slot.add(sse_event(generate_response(response)))
                if final:
                    slot.finish()
            else:
                if error is not None or (response is not None and response.outputs):
                    got.append((response, error))
                if final:
                    slot.data = self._generate_answer(got, keep_alive)
            if self._transport is not None:
                self._flush()

        try:
            server.submit_stream(request, on_response)
        except Exception as e:
            if stream:
                slot.add(sse_event({"error": str(e)}))
                slot.finish()
            else:
                slot.data = self._error_data(e, keep_alive, self._http10)
            self._flush()

    def _generate_answer(self, got: list, keep_alive: bool) -> list:
        if len(got) == 1 and got[0][1] is None:
            return self._build(200, _JSON_HEADERS, encode_json(generate_response(got[0][0])),
                               keep_alive, self._http10)
        errors = [e for _, e in got if e is not None]
        if errors:
            return self._error_data(errors[0], keep_alive, self._http10)
        return self._error_data(ServerError(
            Code.INVALID_ARG, f"generate expects exactly one response, the model sent {len(got)}: "
                              "use generate_stream"), keep_alive, self._http10)

    def _infer_done(self, slot: _Slot, request, encoding, http10: bool, fut):
        keep_alive = not slot.close
        try:
            if fut.cancelled():
                raise ServerError(Code.CANCELLED, "inference request was cancelled")
            exc = fut.exception()
            if exc is not None:
                raise exc
            response = fut.result()
            if encoding is None:
                slot.data = answer_infer(response, request, keep_alive, http10)
            else:
                headers, body = encode_infer_response(response, request)
                headers = [*headers, (b"Content-Encoding", encoding.encode())]
                slot.data = self._build(200, headers, _compress(encoding, body), keep_alive,
                                        http10)
        except Exception as e:
            slot.data = self._error_data(e, keep_alive, http10)
        finally:
            release_shm(request)
        if self._transport is not None:
            self._flush()


class HttpFrontend:
    """Triton-compatible HTTP/REST endpoint on ``host:port`` (port 0: any free port).

    ``restricted_apis``: {group: (header key, header value)} as returned by
    ``parse_restricted_api`` (``--http-restricted-api``); requests to a
    restricted group without that header get 403. ``header_forward_pattern``
    (``--http-header-forward-pattern``): infer and generate requests get the
    headers it matches as string parameters (header_forward.py)."""

    def __init__(self, server, host: str = "0.0.0.0", port: int = 8000, *,
                 max_input_size: int = DEFAULT_MAX_INPUT_SIZE, backlog: int = 1024,
                 reuse_port: bool = False, restricted_apis: dict | None = None,
                 max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
                 max_body_size: int | None = None, idle_timeout: float | None = None,
                 header_forward_pattern: str = ""):
        self._server = server
        # --http-header-forward-pattern: matching headers become request parameters
        self.header_forwarder = HeaderForwarder(header_forward_pattern) \
            if header_forward_pattern else None
        self.host = host
        self.port = port
        self.max_input_size = max_input_size
        self.max_header_size = max_header_size
        # Triton reads Content-Length as an int32; bodies are buffered whole.
        self.max_body_size = _INT32_MAX if max_body_size is None else max_body_size
        self.idle_timeout = idle_timeout or None
        self._backlog = backlog
        self._reuse_port = reuse_port
        self._listener = None
        self._connections: set = set()
        self._loop_time = None
        self._idle_handle = None
        self._restrictions: dict = {}
        # request target -> (model, version) of infer routes already seen
        # (see _HttpConnection.on_request); only without restricted APIs.
        self._infer_routes: dict = {}
        for group, (key, value) in (restricted_apis or {}).items():
            if group not in RESTRICTED_API_GROUPS:
                raise ValueError(f"unknown restricted api '{group}' ")
            payload = encode_json({"error": f"This API is restricted, expecting header '{key}'"})
            self._restrictions[group] = (key.lower().encode("latin-1"), value.encode("latin-1"),
                                         payload)
        self._shm = None

    @property
    def shared_memory(self) -> SharedMemoryManager:
        shm = self._shm
        if shm is None:
            shm = getattr(self._server, "shared_memory", None)
            if shm is None:  # a server without one: client shm disabled
                shm = SharedMemoryManager(False)
            self._shm = shm
        return shm

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop_time = loop.time
        self._listener = await loop.create_server(
            lambda: _HttpConnection(self), self.host, self.port,
            backlog=self._backlog, reuse_address=True,
            reuse_port=self._reuse_port or None,
        )
        sockets = self._listener.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        if self.idle_timeout:
            self._idle_handle = loop.call_later(self._idle_period(), self._sweep_idle, loop)

    def _idle_period(self) -> float:
        return max(0.05, min(self.idle_timeout / 2, 5.0))

    def _sweep_idle(self, loop):
        now = loop.time()
        for conn in list(self._connections):
            if not conn._pending and now - conn.last_active > self.idle_timeout:
                conn.close()
                self._connections.discard(conn)
        if self._listener is not None:
            self._idle_handle = loop.call_later(self._idle_period(), self._sweep_idle, loop)

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        if listener is not None:
            listener.close()
        for conn in list(self._connections):
            conn.close()
        self._connections.clear()
        if listener is not None:
            await listener.wait_closed()
