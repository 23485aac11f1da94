"""Fuzzed HTTP against a running server (#27): documents, binary framing,
headers and routes from tests/robustness/fuzz_http.py. After every request
no 5xx that a client mistake explains; every 50 the server is alive and
computes correctly; at the end its file descriptors are where they began.
Replay: PYSERVER_FUZZ_SEED=<seed> PYSERVER_FUZZ_COUNT=<n>."""

import http.client
import socket

from hypothesis import HealthCheck, given, seed, settings

from tests.robustness.conftest import COUNT, SEED, open_fds
from tests.robustness.fuzz_http import http_request

# 5xx a client can get from Triton too, for what it asked
_ALLOWED_5XX = (
    (500, "Unable to open shared memory region"),
    (500, "Invalid shared memory region"),
    (501, ""),  # UNSUPPORTED: what the server does not do (e.g. decoupled over /infer)
    # a JSON field of the wrong type: Triton's TritonJson failures are INTERNAL
    (500, "attempt to access"),
    (500, "attempt to get members for non-object"),
    (500, "failed to parse the request JSON buffer"),  # TritonJson's parse failure too
    (500, "hape does not match true shape"),  # and its 'data' reader's
    (500, "failed to poll from model repository"),  # a file override it cannot write
)


class Client:
    def __init__(self, port):
        self.port = port
        self.sock = None

    def send(self, method, path, headers, body):
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        head = [f"{method} {path} HTTP/1.1", "Host: fuzz", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        try:
            self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("utf-8") + body)
            response = http.client.HTTPResponse(self.sock, method=method)
            response.begin()
            data = response.read()
        except (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead):
            self.close()
            return None, b""
        if response.will_close:
            self.close()
        return response.status, data

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def test_fuzzed_http_requests(target):
    client = Client(target.http_port)
    target.check_alive_and_correct()
    fds_before = open_fds(target.proc.pid)
    seen = [0]
    failures = []

    @seed(SEED)
    @settings(max_examples=COUNT, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(http_request())
    def one(request):
        method, path, headers, body = request
        status, data = client.send(method, path, headers, body)
        if status is not None and status >= 500:
            text = data.decode("utf-8", "replace")
            if not any(status == s and t in text for s, t in _ALLOWED_5XX):
                failures.append((status, text[:300], method, path, headers, body[:300]))
        seen[0] += 1
        if seen[0] % 50 == 0:
            target.check_alive_and_correct()

    one()
    client.close()
    target.check_alive_and_correct()
    assert not failures, "\n".join(repr(f) for f in failures[:10])
    assert open_fds(target.proc.pid) <= fds_before + 4
