"""The infer route: ``POST /v2/models/<model>[/versions/<v>]/infer``, decoded
once (http_codec.decode_infer_request), submitted, and answered as its batch
completes (http_codec.answer_infer), compressed when the client asks."""

from __future__ import annotations

import asyncio
import functools
import zlib

from pyserver.engine import now_ns
from pyserver.engine.protocol.http_codec import (
    answer_infer,
    decode_infer_request,
    encode_infer_response,
    release_shm,
)
from pyserver.frontends.http.framing import PIPELINE_HIGH, Slot
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import ImmediateFuture

# zlib level for infer responses when the client sends Accept-Encoding gzip/deflate
# (as Triton does; aiohttp, hence tritonclient.http.aio, asks for it by default).
_COMPRESS_LEVEL = 1


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


def decompress(enc: bytes, body: bytes, limit: int) -> bytes:
    """A request body sent with Content-Encoding (gzip, deflate, identity)."""
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
            f"Decompressed data size exceeds the maximum allowed value of {limit} bytes. Use "
            "--http-max-input-size to increase the limit.",
        )
    return out


def infer(conn, method, headers: dict, body: bytes, keep_alive: bool, model: str, version: str):
    frontend = conn.frontend
    server = conn.server
    request = None
    try:
        enc = headers.get(b"content-encoding")
        if enc is not None:
            body = decompress(enc, body, frontend.max_input_size)
        request = decode_infer_request(
            model, version, headers.get(b"inference-header-content-length"), body,
            frontend.max_input_size, frontend.shared_memory, server.model_config)
        if frontend.header_forwarder is not None:
            frontend.header_forwarder.forward(conn.raw_headers, request.parameters)
        tracer = conn.tracer
        if tracer is not None and tracer.active:
            received = now_ns()
            tracer.frontend_received(request, "HTTP_RECV_START", conn.recv_ns or received,
                                     "HTTP_RECV_END", received)
        # answered as the request's batch completes, not an iteration later
        fut = server.submitter(request, ImmediateFuture())
    except Exception as e:
        if request is not None:
            release_shm(request)
        return conn.respond_exception(e, keep_alive)
    slot = Slot(not keep_alive)
    pending = conn.pending
    pending.append(slot)
    accept = headers.get(b"accept-encoding")
    cb = functools.partial(_infer_done, conn, slot, request,
                           None if accept is None else _response_encoding(accept), conn.http10)
    try:
        if fut.done():  # answered synchronously: no extra loop iteration
            return cb(fut)
        fut.add_done_callback(cb)
    except AttributeError:  # a coroutine or other awaitable
        fut = asyncio.ensure_future(fut)
        fut.add_done_callback(cb)
    if len(pending) >= PIPELINE_HIGH:
        conn.update_reading()


def _infer_done(conn, slot: Slot, request, encoding, http10: bool, fut):
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
            slot.data = conn.build(200, headers, _compress(encoding, body), keep_alive, http10)
    except Exception as e:
        slot.data = conn.error_data(e, keep_alive, http10)
    finally:
        release_shm(request)
    if request.trace is None:
        conn.answered()
        return
    sending = now_ns()  # a traced request: its send stamps (written when not held back)
    conn.answered()
    conn.tracer.sent(request, "HTTP_SEND_START", sending, "HTTP_SEND_END", now_ns())
