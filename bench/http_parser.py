"""What parsing an HTTP/1.1 request costs the event loop's thread: httptools
with the Python callbacks the frontend used (one per parser event) against
engine/http1.RequestParser (llhttp with its callbacks in C, one call back per
request), on the same bytes, in one run.

  python bench/http_parser.py [--requests 200000]

Both parse a KServe v2 infer request as wrk sends it (three headers and a
JSON body, fed one request per read as a closed-loop client sends them),
collect method, URL, lower-cased headers and body, and hand them to the same
no-op handler. Prints µs per request for each and the ratio as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httptools  # noqa: E402

from pyserver.engine.protocol.http1 import RequestParser  # noqa: E402

BODY = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))}]}).encode()
REQUEST = (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
           b"Content-Length: %d\r\nContent-Type: application/json\r\n\r\n" % len(BODY)) + BODY


class Handler:
    count = 0

    def on_request(self, method, url, headers, body, keep_alive, http10):
        self.count += 1

    def on_continue(self):
        pass


class PythonCallbacks(Handler):
    """The frontend's former per-event callbacks over httptools (limits kept)."""

    max_header_size = 64 * 1024
    max_body_size = (1 << 31) - 1

    def __init__(self):
        self.parser = httptools.HttpRequestParser(self)

    def feed(self, data):
        self.parser.feed_data(data)

    def on_message_begin(self):
        self.url, self.headers, self.body = b"", {}, []
        self.head_size = self.body_size = 0

    def on_url(self, url):
        self.url += url
        self.head_size += len(url)
        if self.head_size > self.max_header_size:
            raise ValueError("431")

    def on_header(self, name, value):
        self.head_size += len(name) + len(value) + 4
        if self.head_size > self.max_header_size:
            raise ValueError("431")
        self.headers[name.lower()] = value

    def on_headers_complete(self):
        p = self.parser
        self.method = p.get_method().decode("latin-1")
        self.keep_alive = p.should_keep_alive()
        self.http10 = p.get_http_version() == "1.0"
        length = self.headers.get(b"content-length")
        if length is not None and int(length) > self.max_body_size:
            raise ValueError("413")

    def on_body(self, body):
        self.body_size += len(body)
        self.body.append(body)

    def on_message_complete(self):
        chunks, self.body = self.body, []
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.on_request(self.method, self.url, self.headers, body, self.keep_alive, self.http10)


class CompiledCallbacks(Handler):
    def __init__(self):
        self.parser = RequestParser(self, 64 * 1024, (1 << 31) - 1, ValueError)

    def feed(self, data):
        self.parser.feed(data)


def per_request_us(target, n: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            target.feed(REQUEST)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    assert target.count == n * rounds
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=200000)
    args = p.parse_args()
    n = args.requests // 5
    python = per_request_us(PythonCallbacks(), n)
    compiled = per_request_us(CompiledCallbacks(), n)
    print(json.dumps({
        "request_bytes": len(REQUEST),
        "httptools_python_callbacks_us": round(python, 3),
        "llhttp_c_callbacks_us": round(compiled, 3),
        "speedup": round(python / compiled, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
