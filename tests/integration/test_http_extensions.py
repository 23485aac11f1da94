"""Triton's HTTP extensions on a real server, through tritonclient.http (sync
and aio) and raw HTTP where tritonclient cannot send the request: statistics,
repository index/load/unload, trace and log settings, --http-restricted-api,
raw binary infer requests, size limits, and a barrage of malformed requests
after which the server must still answer correctly."""

import asyncio
import base64
import gzip
import http.client
import json
import socket
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.http import HttpFrontend, parse_restricted_api
from pyserver.testing import add_sub_onnx, write_add_sub


def make_inputs(a, b, binary=True, mod=httpclient):
    inputs = [mod.InferInput("INPUT0", list(a.shape), "FP32"),
              mod.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


def expect_error(fn, status, text, exact=True):
    with pytest.raises(InferenceServerException) as err:
        fn()
    assert err.value.status() == str(status), err.value
    if exact:
        assert err.value.message() == text
    else:
        assert text in err.value.message(), err.value.message()


def request(url, method, path, body=None, headers=None):
    """(status, parsed JSON body or raw bytes, headers) over http.client."""
    conn = http.client.HTTPConnection(*url.split(":"), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data
        return resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def add_sub_config_json(name, max_batch_size=8, size=16):
    io = lambda names: [{"name": n, "data_type": "TYPE_FP32", "dims": [size]} for n in names]
    return json.dumps({"name": name, "platform": "onnxruntime_onnx",
                       "max_batch_size": max_batch_size,
                       "input": io(["INPUT0", "INPUT1"]), "output": io(["OUTPUT0", "OUTPUT1"])})


@pytest.fixture
def add_sub(tmp_path, start_server):
    write_add_sub(tmp_path)
    return start_server(tmp_path)


@pytest.fixture
def explicit(tmp_path, start_server):
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="add_sub_b", max_batch_size=4)
    return start_server(tmp_path, model_control_mode="explicit", load_models=["add_sub"])


# ---------------------------------------------------------------- statistics


def test_statistics_after_known_traffic(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    a = np.ones((1, 16), np.float32)
    for _ in range(3):
        client.infer("add_sub", make_inputs(a, a))
    two = np.ones((2, 16), np.float32)
    client.infer("add_sub", make_inputs(two, two))

    stats = client.get_inference_statistics("add_sub")
    [entry] = stats["model_stats"]
    assert (entry["name"], entry["version"]) == ("add_sub", "1")
    assert entry["inference_count"] == 5
    assert entry["execution_count"] == 4  # no dynamic batching: one execution per request
    assert entry["inference_stats"]["success"]["count"] == 4
    assert entry["inference_stats"]["success"]["ns"] > 0
    for key in ("fail", "queue", "compute_input", "compute_infer", "compute_output",
                "cache_hit", "cache_miss"):
        assert set(entry["inference_stats"][key]) == {"count", "ns"}
    by_size = {b["batch_size"]: b["compute_infer"]["count"] for b in entry["batch_stats"]}
    assert by_size == {1: 3, 2: 1}
    assert entry["last_inference"] > 0

    assert client.get_inference_statistics("add_sub", "1") == stats
    everything = client.get_inference_statistics()
    assert [m["name"] for m in everything["model_stats"]] == ["add_sub"]
    # Triton core's own answers for statistics (400, not the 404 of the
    # other model endpoints)
    expect_error(lambda: client.get_inference_statistics("nope"), 400,
                 "requested model 'nope' is not available")
    expect_error(lambda: client.get_inference_statistics("add_sub", "7"), 400,
                 "requested model version is not available for model 'add_sub'")

    async def aio():
        c = aioclient.InferenceServerClient(add_sub.url)
        try:
            return await c.get_inference_statistics("add_sub")
        finally:
            await c.close()

    assert asyncio.run(aio())["model_stats"][0]["inference_count"] == 5
    assert request(add_sub.url, "POST", "/v2/models/stats")[:2] == (
        405, {"error": "Method Not Allowed"})


# ---------------------------------------------------------------- repository


def test_repository_index_load_unload(explicit, tmp_path):
    client = httpclient.InferenceServerClient(explicit.url)
    index = client.get_model_repository_index()
    # no "reason" where there is none, as Triton's index (#21)
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index
    assert {"name": "add_sub_b"} in index
    status, ready_only, _ = request(explicit.url, "POST", "/v2/repository/index",
                                    b'{"ready": true}')
    assert status == 200 and [r["name"] for r in ready_only] == ["add_sub"]
    assert request(explicit.url, "POST", "/v2/repository/index", b'{"ready": "yes"}')[:2] == (
        400, {"error": "Invalid value for 'ready': expected a boolean"})
    assert request(explicit.url, "GET", "/v2/repository/index")[:2] == (
        405, {"error": "Method Not Allowed"})

    assert not client.is_model_ready("add_sub_b")
    client.load_model("add_sub_b")
    assert client.is_model_ready("add_sub_b")
    assert client.get_model_config("add_sub_b")["max_batch_size"] == 4
    # reload with a config override
    client.load_model("add_sub_b", config=add_sub_config_json("add_sub_b", max_batch_size=2))
    assert client.get_model_config("add_sub_b")["max_batch_size"] == 2
    big = np.ones((3, 16), np.float32)
    expect_error(lambda: client.infer("add_sub_b", make_inputs(big, big)), 400,
                 "inference request batch-size must be <= 2 for 'add_sub_b'", exact=False)

    client.unload_model("add_sub_b")
    assert not client.is_model_ready("add_sub_b")
    client.unload_model("never_heard_of_it")  # not an error, as in Triton
    client.unload_model("add_sub", unload_dependents=True)
    assert not client.is_model_ready("add_sub")
    expect_error(lambda: client.load_model("nope"), 500,
                 "failed to load 'nope', failed to poll from model repository")
    assert request(explicit.url, "POST", "/v2/repository/models/x/unload",
                   b'{"parameters": {"unload_dependents": 1}}')[:2] == (
        500, {"error": "Unable to parse 'unload_dependents': attempt to access JSON "
                       "non-boolean as boolean"})
    assert request(explicit.url, "POST", "/v2/repository/other/models/x/load")[:2] == (
        501, {"error": "'repository_name' specification is not supported"})
    assert request(explicit.url, "POST", "/v2/repository/models/x/load",
                   b'{"parameters": {"config": 5}}')[:2] == (
        500, {"error": "attempt to access JSON non-string as string"})

    async def aio():
        c = aioclient.InferenceServerClient(explicit.url)
        try:
            await c.load_model("add_sub")
            assert await c.is_model_ready("add_sub")
            rows = await c.get_model_repository_index()
            assert {"name": "add_sub", "version": "1", "state": "READY"} in rows
            await c.unload_model("add_sub")
            assert not await c.is_model_ready("add_sub")
        finally:
            await c.close()

    asyncio.run(aio())


def test_load_with_file_override(explicit):
    # tritonclient.http cannot send files (it json.dumps base64 *bytes*), so
    # this is the request it means to send, over plain HTTP.
    body = json.dumps({"parameters": {
        "config": add_sub_config_json("fresh", max_batch_size=4),
        "file:1/model.onnx": base64.b64encode(add_sub_onnx(16)).decode()}}).encode()
    status, payload, headers = request(explicit.url, "POST", "/v2/repository/models/fresh/load",
                                       body)
    assert (status, payload) == (200, None)
    client = httpclient.InferenceServerClient(explicit.url)
    assert client.is_model_ready("fresh")
    a = np.full((1, 16), 2, np.float32)
    np.testing.assert_array_equal(client.infer("fresh", make_inputs(a, a)).as_numpy("OUTPUT1"),
                                  a - a)
    # a file override without a config is refused by the core
    body = json.dumps({"parameters": {"file:1/model.onnx": "AAAA"}}).encode()
    status, payload, _ = request(explicit.url, "POST", "/v2/repository/models/fresh2/load", body)
    assert status == 400 and "requires a config" in payload["error"]
    # a path component past NAME_MAX (qa/L0_http test_load_oversized_file_parameter):
    # Triton's 500 and text, nothing left behind, the server ready
    body = json.dumps({"parameters": {"file:" + "A" * 256: "YQ==", "config": "{}"}}).encode()
    status, payload, _ = request(explicit.url, "POST", "/v2/repository/models/fresh3/load", body)
    assert status == 500 and "failed to poll from model repository" in payload["error"]
    assert "fresh3" not in {row["name"] for row in client.get_model_repository_index()}
    assert client.is_server_ready()


def test_json_body_past_the_input_limit_is_refused_unread(add_sub):
    """A load (any JSON-only route) whose Content-Length passes
    --http-max-input-size is answered from its head, Triton's text
    (qa/L0_http test_loading_large_invalid_model sends 2.8 GB)."""
    frontend = HttpFrontend(add_sub.server, "127.0.0.1", 0, max_input_size=4096)
    add_sub.call(frontend.start())
    try:
        for path in ("/v2/repository/models/big/load", "/v2/models/add_sub/generate",
                     "/v2/repository/index"):
            sock = socket.create_connection(("127.0.0.1", frontend.port), timeout=10)
            try:
                sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 2863311617\r\n"
                             b"\r\n{" % path.encode())
                status, _, reply = read_response(sock.makefile("rb"))
            finally:
                sock.close()
            assert (status, json.loads(reply)["error"]) == (400, (
                "request JSON size of 2863311617 bytes exceeds the maximum allowed input size "
                "of 4096 bytes. Use --http-max-input-size to increase the limit.")), path
        # infer bodies carry binary tensors past the JSON limit: bounded otherwise
        sock = socket.create_connection(("127.0.0.1", frontend.port), timeout=10)
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 2863311617\r\n\r\n{")
        status, _, reply = read_response(sock.makefile("rb"))
        sock.close()
        assert status == 400 and "Unable to parse Content-Length" in json.loads(reply)["error"]
    finally:
        add_sub.call(frontend.stop())


def test_load_unload_refused_without_explicit_mode(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    text = "explicit model load / unload is not allowed if polling is enabled"
    expect_error(lambda: client.load_model("add_sub"), 503, text)
    expect_error(lambda: client.unload_model("add_sub"), 503, text)
    assert client.is_model_ready("add_sub")


def test_load_does_not_block_the_loop(explicit):
    """While a load is in progress the server keeps answering other requests."""
    async def main():
        c = aioclient.InferenceServerClient(explicit.url)
        try:
            loads = [asyncio.ensure_future(c.load_model("add_sub_b")) for _ in range(3)]
            lives = [await c.is_server_live() for _ in range(5)]
            await asyncio.gather(*loads)
            assert all(lives)
            assert await c.is_model_ready("add_sub_b")
        finally:
            await c.close()

    asyncio.run(main())


# ---------------------------------------------------------------- trace and logging


def test_trace_settings(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    settings = client.get_trace_settings()
    assert settings["trace_level"] == ["OFF"]
    assert {"trace_rate", "trace_count", "log_frequency", "trace_file"} <= set(settings)
    updated = client.update_trace_settings(settings={"trace_rate": "50"})
    assert updated["trace_rate"] == "50"
    model = client.update_trace_settings("add_sub", {"trace_count": "7"})
    assert model["trace_count"] == "7" and model["trace_rate"] == "50"
    assert client.get_trace_settings("add_sub")["trace_count"] == "7"
    assert client.get_trace_settings()["trace_count"] == "-1"
    cleared = client.update_trace_settings("add_sub", {"trace_count": None})
    assert cleared["trace_count"] == "-1"
    expect_error(lambda: client.get_trace_settings("nope"), 400,  # Triton's code and text
                 "Request for unknown model : nope")
    with pytest.raises(InferenceServerException) as err:
        client.update_trace_settings(settings={"trace_rate": "fast"})
    assert err.value.status() == "400"
    # a version in the URL is not a trace route
    assert request(add_sub.url, "GET", "/v2/models/add_sub/versions/1/trace/setting")[:2] == (
        404, {"error": "Not Found"})
    assert request(add_sub.url, "POST", "/v2/trace/setting", b"[1]")[:2] == (
        500, {"error": "attempt to get members for non-object"})
    assert request(add_sub.url, "PUT", "/v2/trace/setting", b"{}")[:2] == (
        405, {"error": "Method Not Allowed"})
    client.update_trace_settings(settings={"trace_rate": "1000"})

    async def aio():
        c = aioclient.InferenceServerClient(add_sub.url)
        try:
            s = await c.update_trace_settings("add_sub", {"trace_rate": "3"})
            assert s["trace_rate"] == "3"
            assert (await c.get_trace_settings("add_sub"))["trace_rate"] == "3"
        finally:
            await c.close()

    asyncio.run(aio())


def test_log_settings(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    defaults = client.get_log_settings()
    assert defaults["log_verbose_level"] == 0 and defaults["log_info"] is True
    try:
        updated = client.update_log_settings({"log_verbose_level": 2, "log_info": False})
        assert updated["log_verbose_level"] == 2 and updated["log_info"] is False
        assert client.get_log_settings() == updated
        # Triton's answers: TritonJson's type failures (500), its text for a
        # format it lacks (503), and a key it does not read passed over
        expect_error(lambda: client.update_log_settings({"log_verbose_level": -1}), 500,
                     "attempt to access JSON non-unsigned-integer as unsigned-integer")
        expect_error(lambda: client.update_log_settings({"log_info": "yes"}), 500,
                     "attempt to access JSON non-boolean as boolean")
        expect_error(lambda: client.update_log_settings({"log_format": "bogus"}), 503,
                     "invalid argument for --log_format, got: bogus")
        assert "bogus" not in client.update_log_settings({"bogus": 1, "log_info": None})

        async def aio():
            c = aioclient.InferenceServerClient(add_sub.url)
            try:
                s = await c.update_log_settings({"log_verbose_level": 1})
                assert s["log_verbose_level"] == 1
                assert (await c.get_log_settings())["log_verbose_level"] == 1
            finally:
                await c.close()

        asyncio.run(aio())
        assert request(add_sub.url, "POST", "/v2/logging", b'{"log_info": ')[0] == 500
    finally:
        client.update_log_settings({k: defaults[k] for k in  # the file: not over the network
                                    ("log_verbose_level", "log_info", "log_warning",
                                     "log_error", "log_format")})


# ---------------------------------------------------------------- restricted APIs


def test_restricted_apis(add_sub):
    restrictions = parse_restricted_api(["model-repository,statistics:admin-key=s3cret",
                                         "inference:infer-key=go"])
    frontend = HttpFrontend(add_sub.server, "127.0.0.1", 0, restricted_apis=restrictions)
    add_sub.call(frontend.start())
    try:
        url = f"127.0.0.1:{frontend.port}"
        client = httpclient.InferenceServerClient(url)
        expect_error(lambda: client.get_model_repository_index(), 403,
                     "This API is restricted, expecting header 'admin-key'")
        expect_error(lambda: client.get_inference_statistics("add_sub"), 403,
                     "This API is restricted, expecting header 'admin-key'")
        expect_error(lambda: client.get_inference_statistics("add_sub",
                                                             headers={"admin-key": "wrong"}),
                     403, "This API is restricted, expecting header 'admin-key'")
        assert client.get_inference_statistics("add_sub", headers={"admin-key": "s3cret"})
        assert client.get_model_repository_index(headers={"Admin-Key": "s3cret"})
        a = np.ones((1, 16), np.float32)
        expect_error(lambda: client.infer("add_sub", make_inputs(a, a)), 403,
                     "This API is restricted, expecting header 'infer-key'")
        r = client.infer("add_sub", make_inputs(a, a), headers={"infer-key": "go"})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
        # unrestricted groups are untouched
        assert client.is_server_live() and client.is_model_ready("add_sub")
        assert client.get_model_metadata("add_sub")["name"] == "add_sub"
        # the restriction is checked before the method
        assert request(url, "GET", "/v2/repository/index")[:2] == (
            403, {"error": "This API is restricted, expecting header 'admin-key'"})

        async def aio():
            c = aioclient.InferenceServerClient(url)
            try:
                with pytest.raises(InferenceServerException) as err:
                    await c.get_model_repository_index()
                assert err.value.status() == "403"
                assert await c.get_model_repository_index(headers={"admin-key": "s3cret"})
            finally:
                await c.close()

        asyncio.run(aio())
    finally:
        add_sub.call(frontend.stop())


# ---------------------------------------------------------------- raw binary requests


NEG_CONFIG = """name: "neg"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def write_neg(repo):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("IN", TensorProto.FLOAT, ["b", "n"])
    y = helper.make_tensor_value_info("OUT", TensorProto.FLOAT, ["b", "n"])
    graph = helper.make_graph([helper.make_node("Neg", ["IN"], ["OUT"])], "neg", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / "neg" / "1").mkdir(parents=True)
    (repo / "neg" / "config.pbtxt").write_text(NEG_CONFIG)
    (repo / "neg" / "1" / "model.onnx").write_bytes(model.SerializeToString())


def test_raw_binary_infer(tmp_path, start_server):
    write_add_sub(tmp_path)
    write_neg(tmp_path)
    s = start_server(tmp_path)
    x = np.arange(6, dtype=np.float32)
    status, body, headers = request(s.url, "POST", "/v2/models/neg/infer", x.tobytes(),
                                    {"Inference-Header-Content-Length": "0"})
    assert status == 200, body
    assert headers["content-type"] == "application/octet-stream"
    js_len = int(headers["inference-header-content-length"])
    doc = json.loads(body[:js_len])
    assert doc["outputs"] == [{"name": "OUT", "datatype": "FP32", "shape": [1, 6],
                               "parameters": {"binary_data_size": 24}}]
    np.testing.assert_array_equal(np.frombuffer(body[js_len:], np.float32), -x)

    status, body, _ = request(s.url, "POST", "/v2/models/add_sub/infer", x.tobytes(),
                              {"Inference-Header-Content-Length": "0"})
    assert (status, body) == (400, {"error": (
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced "
        "but got 2 inputs in 'add_sub' model configuration")})
    status, body, _ = request(s.url, "POST", "/v2/models/neg/infer", b"abc",
                              {"Inference-Header-Content-Length": "0"})
    assert (status, body) == (400, {"error": (
        "[request id: <id_unknown>] input byte size mismatch for input 'IN' for model 'neg'. "
        "Expected 0, got 3")})
    status, body, _ = request(s.url, "POST", "/v2/models/nope/infer", b"abc",
                              {"Inference-Header-Content-Length": "0"})
    assert (status, body) == (404, {"error": "Request for unknown model: 'nope' is not found"})


# ---------------------------------------------------------------- limits


def test_max_input_size(add_sub):
    frontend = HttpFrontend(add_sub.server, "127.0.0.1", 0, max_input_size=2048,
                            max_body_size=64 * 1024)
    add_sub.call(frontend.start())
    try:
        url = f"127.0.0.1:{frontend.port}"
        client = httpclient.InferenceServerClient(url)
        a = np.random.default_rng(0).random((8, 16), dtype=np.float32)
        # JSON tensors of 8x16 floats: a JSON header above 2048 bytes
        with pytest.raises(InferenceServerException) as err:
            client.infer("add_sub", make_inputs(a, a, binary=False))
        assert err.value.status() == "400"
        assert "exceeds the maximum allowed input size of 2048 bytes. Use " \
               "--http-max-input-size to increase the limit." in err.value.message()
        # binary tensors: the JSON part is small, the request is served
        r = client.infer("add_sub", make_inputs(a, a))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
        # a body above max_body_size is refused before it is read
        sock = socket.create_connection(("127.0.0.1", frontend.port), timeout=10)
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 100000\r\n\r\n")
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 413 ")
        assert b"request body of 100000 bytes exceeds the maximum allowed size of 65536" in reply
        sock.close()
        assert client.is_server_live()
    finally:
        add_sub.call(frontend.stop())


def test_decompressed_size_limit(add_sub):
    """A gzip body inflating past --http-max-input-size is refused, 400, with
    Triton's text; one inside the limit is served."""
    frontend = HttpFrontend(add_sub.server, "127.0.0.1", 0, max_input_size=4096)
    add_sub.call(frontend.start())
    try:
        port = frontend.port
        bomb = gzip.compress(json.dumps({"inputs": [], "pad": " " * 100000}).encode())
        doc = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1] * 16}
                          for n in ("INPUT0", "INPUT1")]}
        for body, status in ((bomb, 400), (gzip.compress(json.dumps(doc).encode()), 200)):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            try:
                sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                got, _, reply = read_response(sock.makefile("rb"))
            finally:
                sock.close()
            assert got == status, reply
            if status == 400:
                assert json.loads(reply) == {"error": (
                    "Decompressed data size exceeds the maximum allowed value of 4096 bytes. "
                    "Use --http-max-input-size to increase the limit.")}
    finally:
        add_sub.call(frontend.stop())


def test_chunked_body_chunk_cap(add_sub):
    """Triton's cap of 65,536 non-empty chunks a body: one more is 400 with
    its text and the connection closes; the cap itself is served."""
    port = int(add_sub.url.split(":")[1])
    for chunks, status in ((65536, 200), (65537, 400)):
        body = b'{"ready":true}'.ljust(chunks, b" ")
        framed = b"".join(b"1\r\n%s\r\n" % body[i:i + 1] for i in range(chunks)) + b"0\r\n\r\n"
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        try:
            sock.sendall(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            try:
                sock.sendall(framed)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused and closed while the rest was on its way
            f = sock.makefile("rb")
            got, headers, reply = read_response(f)
            assert got == status, reply[:200]
            if status == 400:
                assert json.loads(reply) == {"error": (
                    "Chunked request body exceeds maximum of 65536 non-empty chunks. Send "
                    "fewer or larger HTTP chunks.")}
                assert headers.get("connection") == "close"
        finally:
            sock.close()
    with httpclient.InferenceServerClient(add_sub.url) as client:
        assert client.is_server_live()


def read_response(f):
    line = f.readline()
    if not line:
        return None, {}, b""
    status = int(line.split()[1])
    headers = {}
    while True:
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    body = f.read(int(headers.get("content-length", 0)))
    return status, headers, body


def test_malformed_requests_then_still_serving(add_sub):
    """A batch of broken requests, each on its own connection: every one gets
    a clear error (or a closed connection for broken HTTP) and the server
    keeps serving, with no connection left behind."""
    port = int(add_sub.url.split(":")[1])
    good_js = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 64}}]}).encode()

    def infer_req(body, extra=b""):
        return (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d"
                b"\r\n\r\n%s" % (extra, len(body), body))

    ihcl = b"Inference-Header-Content-Length: %d\r\n" % len(good_js)
    # (raw request, status, text in the error); TritonJson's failures are
    # INTERNAL in Triton, so 500 (qa/L0_http test_negative_dimensions)
    answered = [
        (infer_req(b'{"inputs": [{"name": "INPUT0", "shape": [1, 16'), 500,
         "failed to parse the request JSON buffer"),
        (infer_req(b'not json at all'), 500,
         "failed to parse the request JSON buffer: Invalid value. at 0"),
        (infer_req(b'[1, 2, 3]'), 500, "Unable to parse 'inputs'"),
        (infer_req(b'{"inputs": 5}'), 500, "attempt to access JSON non-array as array"),
        (infer_req(b'{"inputs": [{"name": 7, "shape": [1], "datatype": "FP32", "data": [1]}]}'),
         500, "Unable to parse 'name'"),
        (infer_req(b'{"inputs": [{"name": "INPUT0", "shape": "1x16", "datatype": "FP32", '
                   b'"data": [1]}]}'), 500, "Unable to parse 'shape'"),
        (infer_req(b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", '
                   b'"data": ["a"]}]}'), 500, "Unable to parse 'data'"),
        (infer_req(b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP99", '
                   b'"data": [1]}]}'), 400, "invalid datatype for input INPUT0"),
        (infer_req(b'{"id": 5, "inputs": []}'), 500, "Unable to parse 'id'"),
        (infer_req(b'{"inputs": [], "parameters": {"priority": "high"}}'), 500,
         "Unable to parse 'priority'"),
        (infer_req(good_js + b"\0" * 100, ihcl), 400,
         "unexpected size for input 'INPUT1', expecting 28 additional bytes"),
        (infer_req(good_js + b"\0" * 200, ihcl), 400, "unexpected additional input data"),
        (infer_req(good_js, b"Inference-Header-Content-Length: 99999999999\r\n"), 400,
         "value is out of range"),
        (infer_req(good_js, b"Inference-Header-Content-Length: banana\r\n"), 400,
         "Unable to parse Inference-Header-Content-Length, got: banana"),
        (infer_req(good_js, b"Inference-Header-Content-Length: 100000\r\n"), 400,
         "inference header size should be in range"),
        (infer_req(b"\x1f\x8b\x08garbage", b"Content-Encoding: gzip\r\n"), 400,
         "failed to decompress"),
        (infer_req(b"{}", b"Content-Encoding: br\r\n"), 501, "Unsupported compression type"),
        (b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n",
         400, "Unable to parse Content-Length, value is out of range"),
        (b"GET /v2/models/add_sub HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431,
         "request header fields exceed the maximum allowed size"),
        (b"GET /v2/models/add_sub HTTP/1.1\r\nX-Big: " + b"a" * 300000, 431,
         "request header fields exceed the maximum allowed size"),
        (b"GET /v2/models/add_sub HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400,
         "malformed HTTP request"),
        (b"GARBAGE\r\n\r\n", 400, "malformed HTTP request"),
        (b"GET /v2 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
         "malformed HTTP request"),
        # a last coding other than chunked leaves no length (it hung, waiting for EOF)
        (b"GET /v2 HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: RsH\r\n\r\n{}", 400,
         "malformed HTTP request: Transfer-Encoding must end with chunked"),
        (b"GET /v2 HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n{}", 400,
         "malformed HTTP request: Transfer-Encoding must end with chunked"),
        (b"POST /v2/repository/index HTTP/1.1\r\nContent-Length: 4\r\n\r\n{\"re", 500,
         "failed to parse the request JSON buffer"),
        (b"POST /v2/systemsharedmemory/region/r/register HTTP/1.1\r\nContent-Length: 2\r\n\r\n"
         b"[]", 501, "Client shared memory is disabled"),
    ]
    for raw, status, text in answered:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            f = sock.makefile("rb")
            sock.sendall(raw)
            got_status, headers, body = read_response(f)
            assert got_status == status, (raw[:80], got_status, body)
            assert text in json.loads(body)["error"], (raw[:80], body)
        finally:
            sock.close()

    # cut short: half a request, then the client goes away (or half-closes)
    cut = [
        infer_req(good_js + b"\0" * 128, ihcl)[:-50],
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n{\"in",
        b"GET /v2/health/live HTTP/1.1\r\nHost",
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nab",
    ]
    for raw in cut:
        for half_close in (False, True):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(raw)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
                assert sock.recv(100) == b""  # the server closes, answering nothing
            sock.close()

    # a complete request followed by a half-close still gets its answer
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.shutdown(socket.SHUT_WR)
    f = sock.makefile("rb")
    assert read_response(f)[0] == 200
    assert f.read() == b""
    sock.close()

    # and everything still works, on a fresh client
    client = httpclient.InferenceServerClient(add_sub.url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    for binary in (True, False):
        r = client.infer("add_sub", make_inputs(a, a, binary))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
    assert client.is_server_ready()
    deadline = time.monotonic() + 5
    while add_sub.run(lambda: len(add_sub.http.connections)) > 1:
        assert time.monotonic() < deadline, "connections leaked"
        time.sleep(0.05)


def test_idle_connections_are_closed(add_sub):
    frontend = HttpFrontend(add_sub.server, "127.0.0.1", 0, idle_timeout=0.2)
    add_sub.call(frontend.start())
    try:
        idle = socket.create_connection(("127.0.0.1", frontend.port), timeout=10)
        slow = socket.create_connection(("127.0.0.1", frontend.port), timeout=10)
        slow.sendall(b"GET /v2/health/live HTTP/1.1\r\n")  # then nothing
        assert idle.recv(10) == b""  # closed by the server
        assert slow.recv(10) == b""
        idle.close()
        slow.close()
        assert add_sub.run(lambda: len(frontend.connections)) == 0
        # a busy client is not cut off
        client = httpclient.InferenceServerClient(f"127.0.0.1:{frontend.port}")
        for _ in range(3):
            assert client.is_server_live()
            time.sleep(0.05)
    finally:
        add_sub.call(frontend.stop())


def test_client_values_at_the_edges_are_answered_as_triton_does(add_sub):
    """No 500 for what a client can send (#27): a priority beyond any level
    (2^64 - 1) runs at the model's default level, as in Triton; a
    binary_data_size of 2^63 or more is the size error, 400."""
    values = list(range(16))
    doc = {"parameters": {"priority": (1 << 64) - 1},
           "inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": values}
                      for n in ("INPUT0", "INPUT1")]}
    status, body, _ = request(add_sub.url, "POST", "/v2/models/add_sub/infer",
                              json.dumps(doc).encode())
    assert status == 200, body
    assert body["outputs"][0]["data"] == [2 * v for v in values]
    header = json.dumps({"inputs": [
        {"name": n, "datatype": "FP32", "shape": [1, 16],
         "parameters": {"binary_data_size": 1 << 63}} for n in ("INPUT0", "INPUT1")]}).encode()
    status, body, _ = request(add_sub.url, "POST", "/v2/models/add_sub/infer", header,
                              {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400, body
    assert "unexpected size for input 'INPUT0'" in body["error"]


@pytest.mark.parametrize("model", ["add_sub", "batched"])
def test_shapes_no_array_can_have_are_client_errors(tmp_path, start_server, model):
    """#27 defect 7: a zero-element shape whose other dimensions no array
    can have ([0, 2^63-1]) and a batch of no rows were 500s from numpy and
    the model; both are 400, in JSON and binary requests, over every path."""
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="batched", extra="dynamic_batching { }")
    server = start_server(tmp_path)
    url = f"/v2/models/{model}/infer"
    huge = (1 << 63) - 1
    for shape in ([0, huge], [huge, 0], [0, 1 << 62, 4]):
        doc = {"inputs": [{"name": n, "datatype": "FP32", "shape": shape, "data": []}
                          for n in ("INPUT0", "INPUT1")]}
        status, body, _ = request(server.url, "POST", url, json.dumps(doc).encode())
        assert status == 400, (shape, body)
        assert "is larger than any tensor can be" in body["error"], body
        header = json.dumps({"inputs": [
            {"name": n, "datatype": "FP32", "shape": shape,
             "parameters": {"binary_data_size": 0}} for n in ("INPUT0", "INPUT1")]}).encode()
        status, body, _ = request(server.url, "POST", url, header,
                                  {"Inference-Header-Content-Length": str(len(header))})
        assert status == 400, (shape, body)
        assert "is larger than any tensor can be" in body["error"], body
    doc = {"inputs": [{"name": n, "datatype": "FP32", "shape": [0, 16], "data": []}
                      for n in ("INPUT0", "INPUT1")]}
    status, body, _ = request(server.url, "POST", url, json.dumps(doc).encode())
    assert status == 400, body
    assert body["error"] == (f"[request id: <id_unknown>] inference request batch-size must "
                             f"be >= 1 for '{model}'")
    values = list(range(16))
    doc = {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": values}
                      for n in ("INPUT0", "INPUT1")]}
    status, body, _ = request(server.url, "POST", url, json.dumps(doc).encode())
    assert status == 200 and body["outputs"][0]["data"] == [2 * v for v in values]


def _read_all(sock) -> bytes:
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_slow_clients_are_dropped_and_connections_capped(tmp_path, start_server):
    """#27 defect 10: a head trickled byte by byte, a body that stalls and a
    connection that sends nothing are answered 408 and closed once their
    bound passes; one connection past the cap gets 503; a client waiting on
    a slow model, and the server, carry on."""
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="slow", extra=(
        "dynamic_batching { preferred_batch_size: [ 8 ] "
        "max_queue_delay_microseconds: 1500000 }"))
    s = start_server(tmp_path)
    frontend = HttpFrontend(s.server, "127.0.0.1", 0, header_timeout=0.5, body_timeout=0.5,
                            max_connections=4)
    s.call(frontend.start())
    port = frontend.port
    try:
        silent = socket.create_connection(("127.0.0.1", port), timeout=10)
        stalled = socket.create_connection(("127.0.0.1", port), timeout=10)
        stalled.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Length: 100\r\n\r\n{\"in")
        trickle = socket.create_connection(("127.0.0.1", port), timeout=10)
        started = time.monotonic()
        head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
        closed = False
        for byte in head:  # progress every 20 ms, never a whole head
            try:
                trickle.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.02)
            if time.monotonic() - started > 8:
                break
        answer = b"" if closed else _read_all(trickle)
        assert closed or answer.startswith(b"HTTP/1.1 408"), answer
        assert b"request header not received within 0.5 s" in answer or closed
        assert time.monotonic() - started < 8
        got = _read_all(silent)
        assert got.startswith(b"HTTP/1.1 408") and b"request header not received" in got
        got = _read_all(stalled)
        assert got.startswith(b"HTTP/1.1 408") and b"request body not received" in got
        for sock in (silent, stalled, trickle):
            sock.close()

        # the cap: 4 held, the fifth is told why and closed
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
        deadline = time.monotonic() + 5
        while s.run(lambda: len(frontend.connections)) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        got = _read_all(extra)
        assert got.startswith(b"HTTP/1.1 503") and b"too many connections" in got
        extra.close()
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 5
        while s.run(lambda: len(frontend.connections)) > 0:
            assert time.monotonic() < deadline, "connections leaked"
            time.sleep(0.02)

        # a request the model takes 1.5 s to answer outlives both bounds
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}",
                                                  connection_timeout=10, network_timeout=10)
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        r = client.infer("slow", make_inputs(a, a, True))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
        time.sleep(0.2)
        assert client.is_server_live()  # the kept-alive connection still serves
    finally:
        s.call(frontend.stop())


def test_chunked_body_that_also_carries_a_content_length(add_sub):
    """What python-requests sends when told to chunk (Triton's http_test.py
    test_content_encoding_chunked_manually): Transfer-Encoding and
    Content-Length both; served, the chunks framing the body, and the
    connection closed after the answer (#21)."""
    values = list(range(16))
    doc = json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16],
                                  "data": values} for n in ("INPUT0", "INPUT1")]}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(doc[i:i + 50]), doc[i:i + 50])
                      for i in range(0, len(doc), 50)) + b"0\r\n\r\n"
    host, port = add_sub.url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(doc)
                     + chunks + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            part = sock.recv(65536)
            if not part:
                break
            data += part
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), data
    assert json.loads(body)["outputs"][0]["data"] == [2 * v for v in values]
    assert data.count(b"HTTP/1.1") == 1  # closed: the pipelined request is not read
