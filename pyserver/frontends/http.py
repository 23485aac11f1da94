"""HTTP/1.1 KServe v2 frontend: asyncio.Protocol + httptools + orjson.

No framework and no per-request Task: each connection is one
``asyncio.Protocol`` feeding an ``httptools.HttpRequestParser``; an infer
request is handed to ``server.submit()`` and answered from the returned
future's done-callback. Keep-alive and pipelining are supported: responses are
written in request order even when a later request finishes first.

The ``server`` object provides ``is_live()``, ``is_ready()``, ``metadata()``,
``model_ready(name, version)``, ``model_metadata(name, version)``,
``model_config(name, version)`` and ``submit(InferRequest) -> Future``; any of
them may raise ``ServerError`` (``submit``'s future may also resolve with one).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import zlib
from urllib.parse import unquote

import httptools

from pyserver.core.errors import Code, ServerError
from pyserver.frontends.http_codec import (
    DEFAULT_MAX_INPUT_SIZE,
    decode_infer_request,
    encode_error,
    encode_infer_response,
    encode_json,
)

__all__ = ["HttpFrontend"]

_REASONS = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Payload Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}
_STATUS_LINES = {code: b"HTTP/1.1 %d %s\r\n" % (code, reason) for code, reason in _REASONS.items()}

_JSON_CT = (b"Content-Type", b"application/json")
_JSON_HEADERS = [_JSON_CT]
_NO_HEADERS: list = []
_CONN_CLOSE = b"Connection: close\r\n"
_CONN_KEEP = b"Connection: keep-alive\r\n"

_NOT_FOUND = b'{"error":"Not Found"}'
_NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
_MODEL_NOT_READY = b'{"error":"Model version not ready"}'

_GET = "GET"
_POST = "POST"

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


class _Slot:
    """A queued response, in request order; ``data`` is None until ready."""

    __slots__ = ("data", "close")

    def __init__(self, close: bool):
        self.data = None
        self.close = close


class _HttpConnection(asyncio.Protocol):
    __slots__ = (
        "_frontend", "_server", "_transport", "_parser", "_url", "_headers", "_body",
        "_method", "_keep_alive", "_http10", "_pending", "_closing", "_write_paused",
        "_read_paused",
    )

    def __init__(self, frontend: "HttpFrontend"):
        self._frontend = frontend
        self._server = frontend._server
        self._transport = None
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._headers = {}
        self._body = []
        self._method = _GET
        self._keep_alive = True
        self._http10 = False
        self._pending = collections.deque()
        self._closing = False
        self._write_paused = False
        self._read_paused = False

    # ------------------------------------------------------------ transport

    def connection_made(self, transport):
        self._transport = transport
        self._frontend._connections.add(self)

    def connection_lost(self, exc):
        self._transport = None
        self._closing = True
        self._pending.clear()
        self._frontend._connections.discard(self)

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
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Upgrade (h2c, websocket) / CONNECT: we speak only HTTP/1.1. The
            # request itself was answered normally; finish queued responses,
            # then close.
            self._closing = True
            if self._pending:
                self._pending[-1].close = True
            elif self._transport is not None:
                self._transport.close()
        except httptools.HttpParserError as e:
            self._closing = True
            body = encode_json({"error": f"malformed HTTP request: {e}"})
            self._emit(self._build(400, _JSON_HEADERS, body, False, False), True)

    def close(self):
        """Close now (server shutdown); responses still in flight are dropped."""
        self._closing = True
        self._pending.clear()
        t, self._transport = self._transport, None
        if t is not None:
            t.close()

    # ------------------------------------------------------------ parser callbacks

    def on_message_begin(self):
        self._url = b""
        self._headers = {}
        self._body = []

    def on_url(self, url: bytes):
        self._url += url

    def on_header(self, name: bytes, value: bytes):
        self._headers[name.lower()] = value

    def on_headers_complete(self):
        p = self._parser
        self._method = p.get_method().decode("latin-1")
        self._keep_alive = p.should_keep_alive()
        self._http10 = p.get_http_version() == "1.0"
        expect = self._headers.get(b"expect")
        if (expect is not None and expect.lower() == b"100-continue" and not self._pending
                and self._transport is not None and not self._closing):
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes):
        self._body.append(body)

    def on_message_complete(self):
        if self._closing:
            return  # after "Connection: close" or an error: ignore pipelined leftovers
        chunks = self._body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        keep_alive = self._keep_alive
        if not keep_alive:
            self._closing = True
        try:
            self._dispatch(self._method, self._url, self._headers, body, keep_alive)
        except Exception as e:  # never drop the connection on a bug
            self._respond_exception(e, keep_alive)

    # ------------------------------------------------------------ responses

    def _build(self, status: int, headers, body, keep_alive: bool, http10: bool) -> list:
        if type(body) is list:
            length = 0
            for b in body:
                length += len(b)
        else:
            length = len(body)
        if headers:
            hdrs = b"".join([k + b": " + v + b"\r\n" for k, v in headers])
        else:
            hdrs = b""
        if not keep_alive:
            conn = _CONN_CLOSE
        elif http10:
            conn = _CONN_KEEP
        else:
            conn = b""
        head = b"%s%sContent-Length: %d\r\n%s\r\n" % (_status_line(status), hdrs, length, conn)
        if type(body) is list:
            return [head, *body]
        if length < 65536:
            return [head + body]
        return [head, body]

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
        if close:
            self._closing = True
            t.close()

    def _flush(self):
        pending = self._pending
        t = self._transport
        while pending and pending[0].data is not None:
            slot = pending.popleft()
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

    # ------------------------------------------------------------ routing

    def _dispatch(self, method: str, url: bytes, headers: dict, body: bytes, keep_alive: bool):
        q = url.find(b"?")
        if q >= 0:
            url = url[:q]
        parts = url.decode("utf-8", "replace").split("/")
        n = len(parts)
        if n < 2 or parts[0] or parts[1] != "v2":
            return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
        if n == 2:  # /v2
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
            else:
                return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)
            if kind == "infer":
                if method != _POST:
                    return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
                return self._infer(model, version, headers, body, keep_alive)
            if kind == "ready":
                if method != _GET:
                    return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
                try:
                    ready = self._server.model_ready(model, version)
                except Exception as e:
                    return self._respond_exception(e, keep_alive)
                if ready:
                    return self._respond(200, _NO_HEADERS, b"", keep_alive)
                return self._respond(400, _JSON_HEADERS, _MODEL_NOT_READY, keep_alive)
            if kind == "config" or kind == "":
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
            return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)

        if section == "health" and n == 4 and (parts[3] == "live" or parts[3] == "ready"):
            if method != _GET:
                return self._respond(405, _JSON_HEADERS, _NOT_ALLOWED, keep_alive)
            try:
                ok = self._server.is_live() if parts[3] == "live" else self._server.is_ready()
            except Exception as e:
                return self._respond_exception(e, keep_alive)
            return self._respond(200 if ok else 400, _NO_HEADERS, b"", keep_alive)

        return self._respond(404, _JSON_HEADERS, _NOT_FOUND, keep_alive)

    # ------------------------------------------------------------ infer

    def _infer(self, model: str, version: str, headers: dict, body: bytes, keep_alive: bool):
        frontend = self._frontend
        try:
            enc = headers.get(b"content-encoding")
            if enc is not None:
                body = _decompress(enc, body, frontend.max_input_size)
            request = decode_infer_request(
                model, version, lambda k: headers.get(k.encode()), body,
                frontend.max_input_size)
            fut = self._server.submit(request)
        except Exception as e:
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

    def _infer_done(self, slot: _Slot, request, encoding, http10: bool, fut):
        keep_alive = not slot.close
        try:
            if fut.cancelled():
                raise ServerError(Code.CANCELLED, "inference request was cancelled")
            exc = fut.exception()
            if exc is not None:
                raise exc
            headers, body = encode_infer_response(fut.result(), request)
            if encoding is not None:
                body = _compress(encoding, body)
                headers = [*headers, (b"Content-Encoding", encoding.encode())]
            slot.data = self._build(200, headers, body, keep_alive, http10)
        except Exception as e:
            if isinstance(e, ServerError):
                status, payload = encode_error(e)
            else:
                status, payload = 500, encode_json({"error": str(e) or type(e).__name__})
            slot.data = self._build(status, _JSON_HEADERS, payload, keep_alive, http10)
        if self._transport is not None:
            self._flush()


class HttpFrontend:
    """Triton-compatible HTTP/REST endpoint on ``host:port`` (port 0: any free port)."""

    def __init__(self, server, host: str = "0.0.0.0", port: int = 8000, *,
                 max_input_size: int = DEFAULT_MAX_INPUT_SIZE, backlog: int = 1024,
                 reuse_port: bool = False):
        self._server = server
        self.host = host
        self.port = port
        self.max_input_size = max_input_size
        self._backlog = backlog
        self._reuse_port = reuse_port
        self._listener = None
        self._connections: set = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: _HttpConnection(self), self.host, self.port,
            backlog=self._backlog, reuse_address=True,
            reuse_port=self._reuse_port or None,
        )
        sockets = self._listener.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for conn in list(self._connections):
            conn.close()
        self._connections.clear()
        if listener is not None:
            await listener.wait_closed()
