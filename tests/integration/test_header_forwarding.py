"""--http-header-forward-pattern and --grpc-header-forward-pattern: request
headers whose names the pattern finds reach the model as string request
parameters (the bytes_echo model answers request.parameters() back), over
HTTP infer, gRPC ModelInfer and ModelStreamInfer; reserved names are
refused with Triton's text, and the rest is untouched."""

import http.client
import json
import queue
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.frontends.header_forward import HeaderForwarder
from pyserver.frontends.http import HttpFrontend
from tests.integration.conftest import THREAD_MODE

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


@pytest.fixture
def served(tmp_path, start_server):
    """bytes_echo (thread mode) behind HTTP and gRPC frontends forwarding
    headers named like my_*, case-insensitively (HTTP), or grpc_*, exactly
    (gRPC), and an HTTP frontend forwarding everything."""
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "bytes_echo", repo / "bytes_echo")
    config = repo / "bytes_echo" / "config.pbtxt"
    config.write_text(config.read_text() + "\n" + THREAD_MODE + "\n")
    s = start_server(repo)
    s.forwarding = HttpFrontend(s.server, "127.0.0.1", 0, header_forward_pattern="my_.*")
    s.everything = HttpFrontend(s.server, "127.0.0.1", 0, header_forward_pattern=".*")
    s.grpc = GrpcFrontend(s.server, "127.0.0.1", 0, header_forward_pattern="(?-i)grpc_.*")
    for frontend in (s.forwarding, s.everything, s.grpc):
        s.call(frontend.start())
    yield s
    s.call(s.forwarding.stop())
    s.call(s.everything.stop())
    s.call(s.grpc.stop(5))


def text_input(module):
    inp = module.InferInput("TEXT", [1, 2], "BYTES")
    inp.set_data_from_numpy(np.array([[b"ab", b"c"]], dtype=np.object_))
    return [inp]


def http_params(port, headers) -> dict:
    """The parameters the model saw, for a JSON infer sent with these headers
    exactly as spelled (tritonclient's HTTP client lower-cases names)."""
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 2], "datatype": "BYTES",
                                   "data": ["ab", "c"]}]})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v2/models/bytes_echo/infer", body, headers)
        answer = conn.getresponse()
        assert answer.status == 200, answer.read()
        return json.loads(json.loads(answer.read())["parameters"]["params"])
    finally:
        conn.close()


def test_http_headers_forwarded_by_pattern(served):
    params = http_params(served.forwarding.port, {"My_Tenant": "acme", "my-other": "x",
                                                  "Authorization": "secret"})
    # names as the client spelled them; the pattern is a search, ignoring case
    assert params == {"My_Tenant": "acme"}
    # the server's own frontend (no pattern) forwards nothing
    assert http_params(served.http.port, {"My_Tenant": "acme"}) == {}


def test_reserved_header_names_are_refused(served):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{served.everything.port}")
    try:
        for name in ("triton_tenant", "timeout"):
            with pytest.raises(InferenceServerException) as exc:
                client.infer("bytes_echo", text_input(httpclient), headers={name: "1"})
            assert exc.value.status() == "400"
            assert exc.value.message() == \
                f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
    finally:
        client.close()
    # the same frontend still serves, and forwards every other header
    params = http_params(served.everything.port, {"x-trace": "t1"})
    assert params["x-trace"] == "t1" and params["Host"] == f"127.0.0.1:{served.everything.port}"


def test_grpc_metadata_forwarded_on_unary_and_streaming_calls(served):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{served.grpc.port}")
    try:
        result = client.infer("bytes_echo", text_input(grpcclient),
                              headers={"grpc_user": "u1", "other": "o"})
        params = result.get_response(as_json=True)["parameters"]["params"]["string_param"]
        assert json.loads(params) == {"grpc_user": "u1"}
        got = queue.Queue()
        client.start_stream(lambda result, error: got.put((result, error)),
                            headers={"grpc_user": "u2"})
        client.async_stream_infer("bytes_echo", text_input(grpcclient))
        result, error = got.get(timeout=30)
        assert error is None
        params = result.get_response(as_json=True)["parameters"]["params"]["string_param"]
        assert json.loads(params) == {"grpc_user": "u2"}
        client.stop_stream()
    finally:
        client.close()


def test_pattern_rules():
    params = {}
    HeaderForwarder("tenant").forward([(b"X-Tenant-Id", b"7"), (b"user", b"u")], params)
    assert params == {"X-Tenant-Id": "7"}  # found anywhere in the name
    params = {}
    HeaderForwarder("(?-i)^x-").forward([(b"X-A", b"1"), (b"x-b", b"2")], params)
    assert params == {"x-b": "2"}  # (?-i): case-sensitive, as in RE2
    with pytest.raises(ValueError, match="--grpc-header-forward-pattern '\\(' is not a valid"):
        HeaderForwarder("(", "--grpc-header-forward-pattern")
