"""The ONNX add_sub model (FP32 [16], max_batch_size 8) served to the real
tritonclient over HTTP, sync and aio, with dynamic batching in the engine."""

import asyncio
import http.client
import json

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from pyserver.testing import write_add_sub

DYNAMIC = "dynamic_batching { max_queue_delay_microseconds: 20000 }"


def make_inputs(a, b, binary=True):
    inputs = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
              httpclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


@pytest.fixture
def add_sub(tmp_path, start_server):
    write_add_sub(tmp_path, extra=DYNAMIC)
    return start_server(tmp_path)


def test_health_and_metadata(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("add_sub", "2")
    assert not client.is_model_ready("nope")
    meta = client.get_model_metadata("add_sub")
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["versions"] == ["1"]
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    config = client.get_model_config("add_sub")
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["preferred_batch_size"] == [8]
    assert client.get_server_metadata()["name"] == "triton"


@pytest.mark.parametrize("binary", [True, False])
def test_sync_infer(add_sub, binary):
    client = httpclient.InferenceServerClient(add_sub.url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3.0, dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)]
    result = client.infer("add_sub", make_inputs(a, b, binary), outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response()["model_version"] == "1"


def test_request_with_batch_of_several(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    a = np.random.rand(5, 16).astype(np.float32)
    b = np.random.rand(5, 16).astype(np.float32)
    result = client.infer("add_sub", make_inputs(a, b),
                          outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None  # only what was asked for


def test_aio_concurrent_requests_are_batched_and_unmixed(add_sub):
    async def main():
        client = aiohttpclient.InferenceServerClient(add_sub.url)
        try:
            data = [(np.full((1, 16), i, np.float32), np.full((1, 16), 2 * i, np.float32))
                    for i in range(32)]

            async def one(a, b):
                inputs = [aiohttpclient.InferInput("INPUT0", [1, 16], "FP32"),
                          aiohttpclient.InferInput("INPUT1", [1, 16], "FP32")]
                inputs[0].set_data_from_numpy(a)
                inputs[1].set_data_from_numpy(b)
                return await client.infer("add_sub", inputs)

            results = await asyncio.gather(*(one(a, b) for a, b in data))
            for (a, b), r in zip(data, results):
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
                np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
        finally:
            await client.close()

    asyncio.run(main())
    stats = add_sub.run(add_sub.server.model_statistics, "add_sub")
    assert stats["inference_count"] == 32
    assert stats["inference_stats"]["success"]["count"] == 32
    # 32 concurrent requests and a 20 ms window: the engine must have batched.
    assert stats["execution_count"] < 32
    assert max(b["batch_size"] for b in stats["batch_stats"]) > 1
    assert stats["pending_count"] == 0


def expect_error(fn, status, text):
    with pytest.raises(InferenceServerException) as err:
        fn()
    assert err.value.status() == str(status)
    assert text in err.value.message(), err.value.message()


def test_errors_have_triton_status_and_text(add_sub):
    client = httpclient.InferenceServerClient(add_sub.url)
    a = np.zeros((1, 16), np.float32)
    expect_error(lambda: client.infer("nope", make_inputs(a, a)), 404,
                 "Request for unknown model: 'nope' is not found")
    bad = np.zeros((1, 15), np.float32)
    expect_error(lambda: client.infer("add_sub", make_inputs(bad, bad)), 400,
                 "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], got "
                 "[1,15]. NOTE: Setting a non-zero max_batch_size in the model config requires a "
                 "batch dimension to be prepended to each input shape. If you want to specify the "
                 "full shape including the batch dim in your input dims config, try setting "
                 "max_batch_size to zero. See the model configuration docs for more info on "
                 "max_batch_size.")
    big = np.zeros((9, 16), np.float32)
    expect_error(lambda: client.infer("add_sub", make_inputs(big, big)), 400,
                 "inference request batch-size must be <= 8 for 'add_sub'")
    ints = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    ints[0].set_data_from_numpy(np.zeros((1, 16), np.int32))
    ints[1].set_data_from_numpy(a)
    expect_error(lambda: client.infer("add_sub", ints), 400,
                 "inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'")
    one = [httpclient.InferInput("INPUT0", [1, 16], "FP32")]
    one[0].set_data_from_numpy(a)
    expect_error(lambda: client.infer("add_sub", one), 400,
                 "missing required input(s) ['INPUT1']")
    # and the model still serves afterwards
    r = client.infer("add_sub", make_inputs(a + 1, a))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + 1)


def test_unknown_model_http_status_is_404(add_sub):
    import http.client
    conn = http.client.HTTPConnection(*add_sub.url.split(":"))
    conn.request("POST", "/v2/models/nope/infer", body=b'{"inputs":[]}')
    resp = conn.getresponse()
    assert resp.status == 404
    assert b"Request for unknown model: 'nope' is not found" in resp.read()


def test_pass_through_model_without_batching(tmp_path, start_server):
    write_add_sub(tmp_path, name="plain", max_batch_size=0, instances=2)
    s = start_server(tmp_path)
    client = httpclient.InferenceServerClient(s.url)
    a = np.ones(16, np.float32)
    r = client.infer("plain", make_inputs(a, a))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 2)
    assert client.get_model_metadata("plain")["inputs"][0]["shape"] == [16]


def test_broken_model_does_not_take_others_down(tmp_path, start_server):
    write_add_sub(tmp_path, extra=DYNAMIC)
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: [\n')
    s = start_server(tmp_path, exit_on_error=False)
    client = httpclient.InferenceServerClient(s.url)
    assert not client.is_server_ready()  # strict readiness: a model failed
    assert not client.is_model_ready("broken")
    assert client.is_model_ready("add_sub")
    a = np.ones((1, 16), np.float32)
    np.testing.assert_array_equal(client.infer("add_sub", make_inputs(a, a)).as_numpy("OUTPUT0"), 2 * a)
    [row] = [r for r in s.run(s.server.repository_index) if r["name"] == "broken"]
    assert row["state"] == "UNAVAILABLE"
    assert f"{broken / 'config.pbtxt'}:3:" in row["reason"]


def test_missing_model_file_is_a_clear_load_error(tmp_path, start_server):
    d = write_add_sub(tmp_path)
    (d / "1" / "model.onnx").unlink()
    from pyserver.kernel.errors import ServerError
    with pytest.raises(ServerError) as err:
        start_server(tmp_path)
    assert "model.onnx not found" in err.value.message


def test_classification_extension_with_labels(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="cls")
    cfg = (d / "config.pbtxt").read_text().replace(
        '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }',
        '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] label_filename: "labels.txt" }')
    (d / "config.pbtxt").write_text(cfg)
    (d / "labels.txt").write_text("\n".join(f"label{i}" for i in range(16)))
    s = start_server(tmp_path)
    client = httpclient.InferenceServerClient(s.url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.zeros((1, 16), np.float32)
    out = client.infer("cls", make_inputs(a, b), outputs=[
        httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]).as_numpy("OUTPUT0")
    assert out.shape == (1, 3)
    assert [x.decode() if isinstance(x, bytes) else x for x in out[0]] == [
        "15.000000:15:label15", "14.000000:14:label14", "13.000000:13:label13"]
    # classification 0 over HTTP: the plain tensor, as Triton's HTTP frontend answers
    body = {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": v.ravel().tolist()}
                       for n, v in (("INPUT0", a), ("INPUT1", b))],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}]}
    conn = http.client.HTTPConnection(*s.url.split(":"))
    conn.request("POST", "/v2/models/cls/infer", json.dumps(body))
    answer = json.loads(conn.getresponse().read())
    conn.close()
    assert answer["outputs"][0]["datatype"] == "FP32"
    assert answer["outputs"][0]["data"] == a.ravel().tolist()
