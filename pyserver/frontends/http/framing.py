"""HTTP/1.1 answers as written: status lines, the JSON bodies every route
shares, and the slots that keep pipelined answers in request order."""

from __future__ import annotations

from pyserver.engine.protocol.http_codec import encode_json
from pyserver.engine.protocol.http_infer import http_message
from pyserver.engine.protocol.http_route import Slot  # a queued response (compiled)

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

JSON_HEADERS = [(b"Content-Type", b"application/json")]
NO_HEADERS: list = []
CONN_CLOSE = b"Connection: close\r\n"
EMPTY_JSON = b""
NOT_FOUND = b'{"error":"Not Found"}'
NOT_ALLOWED = b'{"error":"Method Not Allowed"}'
MODEL_NOT_READY = b'{"error":"Model version not ready"}'

# Pipelining / write back-pressure: stop reading a connection while this many
# responses are queued, resume below the low mark.
PIPELINE_HIGH = 128
PIPELINE_LOW = 32


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = b"HTTP/1.1 %d Unknown\r\n" % status
    return line


def build(status: int, headers, body, keep_alive: bool, http10: bool) -> list:
    """An answer as written (http_message: one bytes object when small)."""
    return http_message(status_line(status), headers, body, keep_alive, http10)


def error_body(message: str) -> bytes:
    return encode_json({"error": message})


def sse_event(doc) -> bytes:
    """One server-sent event carrying ``doc`` as JSON."""
    return b"data: " + encode_json(doc) + b"\n\n"


def event_stream_head(keep_alive: bool, extra_headers: bytes = b"", status: int = 200) -> bytes:
    """The head of an answer of server-sent events, sent chunked as the
    events come (``extra_headers``: whole header lines to add)."""
    return b"%sContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n" \
           b"%sTransfer-Encoding: chunked\r\n%s\r\n" % (
               status_line(status), b"" if keep_alive else CONN_CLOSE, extra_headers)


class StreamSlot(Slot):
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
