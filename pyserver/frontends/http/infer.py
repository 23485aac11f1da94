"""The infer route: ``POST /v2/models/<model>[/versions/<v>]/infer``, decoded
once (http_codec.decode_infer_request), submitted, and answered as its batch
completes (http_codec.answer_infer), compressed when the client asks: the
route is engine/protocol/http_route.pyx's, with this module's
decompression and content negotiation."""

from __future__ import annotations

import zlib

from pyserver.engine.protocol.http_route import InferRoute
from pyserver.frontends.http.framing import PIPELINE_HIGH
from pyserver.kernel.errors import Code, ServerError

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


def _response_encoding(value: bytes) -> str | None:
    """The answer's Content-Encoding for an Accept-Encoding value (None:
    none); InferRoute keeps what it said of each value it has seen."""
    enc = _accept_encoding(value)
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


# The route itself (decode, submit, answer into the request's place in its
# connection's queue) is compiled: engine/protocol/http_route.pyx.
infer = InferRoute(decompress, _response_encoding, _compress, PIPELINE_HIGH)
