"""Triton's generate extension over HTTP: /generate answers one JSON object,
/generate_stream streams server-sent events (one per response of a decoupled
model, chunked), errors as Triton words them, and the connection keeps
serving requests pipelined behind a stream."""

import http.client
import json
import shutil
from pathlib import Path

import pytest

from pyserver.testing import write_add_sub

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


@pytest.fixture
def served(tmp_path, start_server):
    for name in ("repeat", "bytes_echo"):
        shutil.copytree(MODELS / name, tmp_path / name)
    write_add_sub(tmp_path, size=1, max_batch_size=0)
    return start_server(tmp_path)


def post(s, path, doc, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection(*s.url.split(":"), timeout=30)
    conn.request("POST", path, body=json.dumps(doc) if not isinstance(doc, bytes) else doc,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    if own:
        conn.close()
    return r, body


def events(body: bytes) -> list:
    out = []
    for block in body.decode().split("\n\n"):
        if block.startswith("data: "):
            out.append(json.loads(block[len("data: "):]))
    return out


def test_generate_stream_sends_one_event_per_response(served):
    r, body = post(served, "/v2/models/repeat/generate_stream", {"IN": 3, "id": "g1"})
    assert r.status == 200
    assert r.getheader("Content-Type") == "text/event-stream; charset=utf-8"  # as Triton
    assert r.getheader("Transfer-Encoding") == "chunked"
    got = events(body)
    assert [e["IDX"] for e in got] == [0, 1, 2]
    assert all(e["OUT"] == 3 and e["model_name"] == "repeat" and e["model_version"] == "1"
               and e["id"] == "g1" for e in got)
    # Zero responses: the stream just ends.
    r, body = post(served, "/v2/models/repeat/generate_stream", {"IN": 0})
    assert r.status == 200 and events(body) == []
    # A first response that is an error sets the status, as in Triton; an
    # error after a good first one only shows as its event
    r, body = post(served, "/v2/models/repeat/generate_stream", {"IN": 1, "mode": "return_list"})
    assert r.status == 500, body
    assert r.getheader("Content-Type") == "text/event-stream; charset=utf-8"
    assert "error" in events(body)[0]
    r, body = post(served, "/v2/models/repeat/generate_stream", {"IN": 3, "mode": "error_mid"})
    assert r.status == 200 and events(body)[1] == {"error": "second one failed"}


def test_generate_returns_one_json_answer(served):
    r, body = post(served, "/v2/models/bytes_echo/generate", {"TEXT": ["ab", "cde"], "id": "x"})
    assert r.status == 200, body
    doc = json.loads(body)
    assert doc["UPPER"] == ["AB", "CDE"] and doc["LENGTHS"] == [2, 3] and doc["id"] == "x"
    r, body = post(served, "/v2/models/add_sub/generate", {"INPUT0": 2.5, "INPUT1": 1})
    doc = json.loads(body)
    assert (doc["OUTPUT0"], doc["OUTPUT1"]) == (3.5, 1.5)
    assert doc["model_name"] == "add_sub" and "id" not in doc
    # A decoupled model answering once works; more than once wants the stream.
    r, body = post(served, "/v2/models/repeat/generate", {"IN": 1})
    assert r.status == 200 and json.loads(body)["IDX"] == 0
    r, body = post(served, "/v2/models/repeat/generate", {"IN": 2})
    assert r.status == 200  # Triton's status goes with the first response, which was fine
    assert json.loads(body)["error"] == (  # Triton's text
        "generate expects model to produce exactly 1 response, use generate stream for model "
        "that generates various number of responses")


def test_generate_errors(served):
    # a field that names no input is a request parameter (as in Triton); its
    # value must be one value, not a list or an object (#27, defect 8)
    r, body = post(served, "/v2/models/add_sub/generate",
                   {"INPUT0": 1, "INPUT1": 2, "NOPE": 2, "parameters": {"t": 0.5, "s": "x"}})
    assert r.status == 200, body
    invalid = "parameter 'NOPE' has invalid type. It should be either 'int', 'bool', or 'string'."
    nested = "Converting keyword: 'parameters': " + invalid  # Triton's prefix inside "parameters"
    for doc, text in (({"INPUT0": 1, "INPUT1": 2, "NOPE": [2]}, invalid),
                      ({"INPUT0": 1, "INPUT1": 2, "parameters": {"NOPE": {"a": 1}}}, nested),
                      ({"INPUT0": 1, "INPUT1": 2, "parameters": {"NOPE": None}}, nested)):
        for route in ("generate", "generate_stream"):
            r, body = post(served, f"/v2/models/add_sub/{route}", doc)
            assert r.status == 400, body
            assert json.loads(body)["error"] == text
    r, body = post(served, "/v2/models/bytes_echo/generate", {"TEXT": 5})
    assert r.status == 500  # Triton's text and code (TritonJson's failures are INTERNAL)
    assert json.loads(body)["error"] == "attempt to access JSON non-string as string"
    r, body = post(served, "/v2/models/add_sub/generate", b"{not json")
    assert r.status == 500 and json.loads(body)["error"] == (
        "failed to parse the request JSON buffer: Missing a name for object member. at 1")
    r, body = post(served, "/v2/models/missing/generate", {"A": 1})
    assert r.status in (400, 404) and "missing" in json.loads(body)["error"]
    conn = http.client.HTTPConnection(*served.url.split(":"), timeout=30)
    conn.request("GET", "/v2/models/add_sub/generate")
    assert conn.getresponse().status == 405
    conn.close()
    # Bad input to generate_stream is an HTTP error before any stream, as in
    # Triton (#27, defect 8), never a 200 carrying an error event
    r, body = post(served, "/v2/models/add_sub/generate_stream", {"INPUT0": 1})
    assert r.status == 400 and r.getheader("Content-Type") == "application/json"
    assert "expected 2 inputs but got 1 inputs" in json.loads(body)["error"]
    r, body = post(served, "/v2/models/missing/generate_stream", {"A": 1})
    assert r.status in (400, 404) and "missing" in json.loads(body)["error"]
    # A model failing as it runs: the error arrives as an event, the stream ends.
    r, body = post(served, "/v2/models/repeat/generate_stream",
                   {"IN": 2, "parameters": {"mode": "raise"}})
    assert r.status == 200
    got = events(body)
    assert got[0]["IDX"] == 0 and "gave up after one response" in got[-1]["error"], got


def test_generate_fields_are_read_in_order_as_triton_reads_them(served):
    """Triton's qa/L0_http/generate_endpoint_test.py cases: the first wrong
    field in document order names the error (TritonJson's type texts), a key
    sent twice is core's 'already exists', 'parameters' must be an object,
    and a body past --http-max-input-size is refused before it is parsed."""
    for model, doc, text in (
            ("add_sub", b'{"INPUT0": "x", "INPUT1": 2}',
             "Unable to parse 'data': attempt to access JSON non-number as double"),
            ("bytes_echo", b'{"TEXT": 5}', "attempt to access JSON non-string as string"),
            ("repeat", b'{"IN": true}',
             "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
            ("add_sub", b'{"INPUT1": "y", "INPUT0": 1, "INPUT0": 2}',
             "Unable to parse 'data': attempt to access JSON non-number as double"),
            ("add_sub", b'{"INPUT0": 1, "INPUT1": 2, "INPUT0": 3}',
             "[request id: <id_unknown>] input 'INPUT0' already exists in request"),
            ("add_sub", b'{"id": "g7", "INPUT0": 1, "INPUT0": 3}',
             "[request id: g7] input 'INPUT0' already exists in request"),
            ("add_sub", b'{"INPUT0": 1, "INPUT1": 2, "parameters": 1}',
             "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object "
             "as object")):
        for route in ("generate", "generate_stream"):
            r, body = post(served, f"/v2/models/{model}/{route}", doc)
            status = 500 if "attempt to access" in text else 400  # TritonJson's: INTERNAL
            assert (r.status, json.loads(body)["error"]) == (status, text), (doc, route)
    # an input inside "parameters" feeds the model as at the top level
    r, body = post(served, "/v2/models/add_sub/generate",
                   {"INPUT0": 1, "parameters": {"INPUT1": 2}})
    assert r.status == 200 and json.loads(body)["OUTPUT0"] == 3.0


def test_generate_body_past_the_input_limit(served):
    from pyserver.frontends.http import HttpFrontend
    frontend = HttpFrontend(served.server, "127.0.0.1", 0, max_input_size=1024)
    served.call(frontend.start())
    try:
        conn = http.client.HTTPConnection("127.0.0.1", frontend.port, timeout=30)
        body = json.dumps({"TEXT": ["x" * 2000]}).encode()
        conn.request("POST", "/v2/models/bytes_echo/generate", body=body)
        r = conn.getresponse()
        assert (r.status, json.loads(r.read())["error"]) == (400, (
            f"request JSON size of {len(body)} bytes exceeds the maximum allowed input size of "
            "1024 bytes. Use --http-max-input-size to increase the limit."))
        # inside the JSON limit, the tensor's serialized size still counts
        # (each string takes its 4-byte length prefix)
        body = json.dumps({"TEXT": [""] * 300}, separators=(",", ":")).encode()
        assert len(body) < 1024
        conn.request("POST", "/v2/models/bytes_echo/generate", body=body)
        r = conn.getresponse()
        assert (r.status, json.loads(r.read())["error"]) == (400, (
            "request size of 0 bytes with input 'TEXT' of size 1200 bytes exceeds the maximum "
            "allowed input size of 1024. Use --http-max-input-size to increase the limit."))
        conn.close()
    finally:
        served.call(frontend.stop())


def test_requests_pipelined_behind_a_stream_wait_their_turn(served):
    import socket

    host, port = served.url.split(":")
    stream = json.dumps({"IN": 3, "parameters": {"mode": "slow"}}).encode()
    plain = json.dumps({"INPUT0": 1, "INPUT1": 1}).encode()
    raw = (b"POST /v2/models/repeat/generate_stream HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(stream), stream) +
           b"POST /v2/models/add_sub/generate HTTP/1.1\r\nHost: x\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(plain), plain))
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(raw)
        data = b""
        while b'"OUTPUT0"' not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    first, second = data.split(b"\r\n0\r\n\r\n", 1)  # the stream's last chunk
    assert first.count(b"data: ") == 3 and b"OUTPUT0" not in first
    assert second.startswith(b"HTTP/1.1 200") and b'"OUTPUT0":2.0' in second


def test_fields_take_the_shape_of_their_input_as_in_triton():
    """A generate field is fitted to its input's dims (#21): fixed dims
    divide the count from the innermost out, the innermost variable dim
    takes the rest, other variable dims are 1; what cannot fit is refused
    with Triton's text."""
    import pytest

    from pyserver.frontends.http_generate import _fit_shape
    from pyserver.kernel.errors import ServerError

    assert _fit_shape("P", 1, [1, 1]) == [1, 1]          # a scalar for dims [1, 1]
    assert _fit_shape("P", 1, [-1, 1, 1]) == [1, 1, 1]   # ... of a batching model
    assert _fit_shape("P", 6, [-1, 3]) == [2, 3]
    assert _fit_shape("P", 6, [-1, -1]) == [1, 6]
    assert _fit_shape("P", 16, [-1, 16]) == [1, 16]
    for count, dims in ((5, [-1, 3]), (2, [1, 1])):
        with pytest.raises(ServerError, match="The schema can not convert input 'P' to tensor "
                                              "with proper shape"):
            _fit_shape("P", count, dims)


KV_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Reports KV-cache blocks as TensorRT-LLM's backend does: 64 tokens a
    block, 100 blocks, as many used as the request says."""

    def initialize(self, args):
        family = pb_utils.MetricFamily(name="nv_trt_llm_kv_cache_block_metrics",
                                       description="KV cache blocks",
                                       kind=pb_utils.MetricFamily.GAUGE)
        self.blocks = {kind: family.Metric(labels={"kv_cache_block_type": kind,
                                                    "model": "kv", "version": "1"})
                       for kind in ("tokens_per", "used", "max")}
        self.blocks["tokens_per"].set(64)
        self.blocks["max"].set(100)

    def execute(self, requests):
        out = []
        for r in requests:
            used = pb_utils.get_input_tensor_by_name(r, "USED").as_numpy()
            self.blocks["used"].set(float(used[0]))
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", used)]))
        return out
'''


@pytest.mark.parametrize("stream", [False, True])
def test_orca_load_report_header(tmp_path, start_server, python_mode, stream, caplog):
    """Triton 2.56's endpoint load report (qa/common/orca_header_test.py):
    asked by endpoint-load-metrics-format, written as endpoint-load-metrics
    from the model's nv_trt_llm_kv_cache_block_metrics gauges."""
    from tests.integration.conftest import use_execution_mode
    (tmp_path / "kv" / "1").mkdir(parents=True)
    (tmp_path / "kv" / "1" / "model.py").write_text(KV_MODEL)
    (tmp_path / "kv" / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "USED" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    write_add_sub(tmp_path, size=1, max_batch_size=0)
    use_execution_mode(tmp_path, python_mode)
    s = start_server(tmp_path)
    route = "generate_stream" if stream else "generate"

    def ask(model, doc, fmt):
        conn = http.client.HTTPConnection(*s.url.split(":"), timeout=30)
        headers = {"Content-Type": "application/json"}
        if fmt is not None:
            headers["endpoint-load-metrics-format"] = fmt
        conn.request("POST", f"/v2/models/{model}/{route}", body=json.dumps(doc), headers=headers)
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status == 200
        return r.getheader("endpoint-load-metrics")

    got = ask("kv", {"USED": 25}, "json")
    assert got.startswith("JSON ")
    assert json.loads(got[len("JSON "):]) == {
        "named_metrics": {"kv_cache_utilization": 0.25, "max_token_capacity": 6400}}
    assert ask("kv", {"USED": 50}, "text") == (
        "TEXT named_metrics.kv_cache_utilization=0.500000, "
        "named_metrics.max_token_capacity=6400")
    assert ask("kv", {"USED": 50}, None) is None  # not asked: not written
    with caplog.at_level("ERROR", logger="pyserver"):
        assert ask("kv", {"USED": 50}, "yaml") is None
    assert "orca_type is set to an invalid type: yaml" in caplog.text
