"""Request tracing through the trace extension: sampled requests carry the
engine's timestamps into Triton's JSON trace file."""

import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from pyserver.testing import write_add_sub
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)

ORDER = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
         "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]


def infer(client, n, model="add_sub"):
    """n add_sub requests of FP32 [1,16] ones over tritonclient.http."""
    a = np.ones((1, 16), np.float32)
    for _ in range(n):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        client.infer(model, inputs)


def test_timestamps_traces_written_as_triton(tmp_path, start_server):
    write_add_sub(tmp_path / "models", extra="dynamic_batching { }")
    s = start_server(tmp_path / "models")
    client = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "trace.json"
    infer(client, 2)  # tracing is off by default: nothing is written
    # the trace file is the server's to set (over the network it is refused)
    s.run(s.server.trace_settings, None, {"trace_file": str(trace_file)})
    settings = client.update_trace_settings(settings={
        "trace_level": ["TIMESTAMPS"], "trace_rate": "2", "trace_count": "2",
        "log_frequency": "0"})
    assert settings["trace_level"] == ["TIMESTAMPS"]
    infer(client, 6)  # every 2nd request, at most 2 of them
    assert client.get_trace_settings()["trace_count"] == "0"
    client.update_trace_settings(settings={"trace_level": ["OFF"]})  # flushes the file
    traces = json.loads(trace_file.read_text())
    assert len(traces) == 2
    assert traces[0]["id"] != traces[1]["id"]
    for t in traces:
        assert t["model_name"] == "add_sub" and t["model_version"] == 1
        names = [x["name"] for x in t["timestamps"]]
        assert names == ORDER
        times = [x["ns"] for x in t["timestamps"]]
        assert times == sorted(times) and times[-1] > times[0]


def test_log_frequency_writes_groups(tmp_path, start_server):
    write_add_sub(tmp_path / "models")
    s = start_server(tmp_path / "models")
    client = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "t.json"
    s.run(s.server.trace_settings, "add_sub", {"trace_file": str(trace_file)})
    client.update_trace_settings(model_name="add_sub", settings={
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "2"})
    infer(client, 5)
    assert len(json.loads((tmp_path / "t.json.0").read_text())) == 2
    assert len(json.loads((tmp_path / "t.json.1").read_text())) == 2
    assert not (tmp_path / "t.json.2").exists()
    s.call(s.server.stop())  # the rest is written at shutdown
    assert len(json.loads((tmp_path / "t.json.2").read_text())) == 1


def test_tensors_level_records_inputs_and_outputs(tmp_path, start_server):
    write_add_sub(tmp_path / "models")
    s = start_server(tmp_path / "models")
    client = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "tensors.json"
    s.run(s.server.trace_settings, None, {"trace_file": str(trace_file)})
    client.update_trace_settings(settings={
        "trace_level": ["TENSORS"], "trace_rate": "1", "trace_count": "1", "log_frequency": "0"})
    a = np.arange(16, dtype=np.float32).reshape(1, 16) / 4
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
              httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones((1, 16), np.float32))
    client.infer("add_sub", inputs)
    client.update_trace_settings(settings={"trace_level": ["OFF"]})  # flushes the file
    entries = json.loads(trace_file.read_text())
    record, tensors = entries[0], entries[1:]
    assert record["model_name"] == "add_sub" and "timestamps" not in record  # TENSORS only
    assert all(t["id"] == record["id"] for t in tensors)
    seen = {(t["activity"], t["tensor"]["name"]): t["tensor"] for t in tensors}
    assert sorted(seen) == [
        ("TENSOR_BACKEND_INPUT", "INPUT0"), ("TENSOR_BACKEND_INPUT", "INPUT1"),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"), ("TENSOR_BACKEND_OUTPUT", "OUTPUT1"),
        ("TENSOR_QUEUE_INPUT", "INPUT0"), ("TENSOR_QUEUE_INPUT", "INPUT1")]
    queued = seen[("TENSOR_QUEUE_INPUT", "INPUT0")]
    assert queued == {"name": "INPUT0", "shape": "1,16", "dtype": "FP32",
                      "data": ",".join("%g" % v for v in a.reshape(-1))}
    assert queued["data"].startswith("0,0.25,0.5,0.75,1,1.25")
    out = seen[("TENSOR_BACKEND_OUTPUT", "OUTPUT0")]
    assert out["data"] == ",".join("%g" % v for v in (a + 1).reshape(-1))


def test_tensor_entries_write_values_as_triton():
    from pyserver.runtime.tracing import tensor_entry
    def data(datatype, values):
        return tensor_entry(7, "TENSOR_QUEUE_INPUT", "x", datatype, values)["tensor"]["data"]
    assert data("FP32", np.array([1.0, 1e8, 1 / 3], np.float32)) == "1,1e+08,0.333333"
    assert data("INT64", np.array([[-3, 4]], np.int64)) == "-3,4"
    assert data("BOOL", np.array([True, False])) == "1,0"
    assert data("BYTES", np.array([b"ab", b"c d"], dtype=object)) == '"ab","c d"'
    assert data("FP16", np.ones(3, np.float16)) == ""  # Triton leaves half floats out
    entry = tensor_entry(7, "TENSOR_BACKEND_OUTPUT", "y", "INT32", np.zeros((2, 3), np.int32))
    assert entry == {"id": 7, "activity": "TENSOR_BACKEND_OUTPUT",
                     "tensor": {"name": "y", "data": "0,0,0,0,0,0", "shape": "2,3",
                                "dtype": "INT32"}}


def test_settings_apis_cannot_name_files(tmp_path, start_grpc):  # noqa: F811
    """A client could create or append to any file the server can write:
    over HTTP and gRPC the log and trace file are refused, with Triton's
    501 / UNIMPLEMENTED and text, and nothing is written; the server's own
    API (and the command line) still set them."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    write_add_sub(tmp_path / "models")
    s = start_grpc(tmp_path / "models")
    client = httpclient.InferenceServerClient(s.url)
    gclient = grpcclient.InferenceServerClient(s.grpc_url)
    target = tmp_path / "owned.txt"
    attempts = [
        (lambda: client.update_log_settings({"log_file": str(target)}),
         "log file location can not be updated through network protocol"),
        (lambda: client.update_trace_settings(settings={"trace_file": str(target)}),
         "trace file location can not be updated through network protocol"),
        (lambda: client.update_trace_settings(model_name="add_sub",
                                              settings={"trace_file": str(target)}),
         "trace file location can not be updated through network protocol"),
        (lambda: gclient.update_log_settings({"log_file": str(target)}),
         "log file location can not be updated through network protocol"),
        (lambda: gclient.update_trace_settings(settings={"trace_file": str(target)}),
         "trace file location can not be updated through network protocol"),
    ]
    for attempt, text in attempts:
        with pytest.raises(InferenceServerException) as err:
            attempt()
        assert text in str(err.value)
    assert not target.exists()
    assert client.get_log_settings()["log_file"] == ""
    assert client.get_trace_settings()["trace_file"] != str(target)
    # the other settings still change over the network
    assert client.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0
    # and the server's own API names the file
    s.run(s.server.trace_settings, None, {"trace_file": str(target)})
    assert client.get_trace_settings()["trace_file"] == str(target)
    gclient.close()


def test_off_beside_another_trace_level_is_refused(tmp_path, start_grpc):  # noqa: F811
    """#27 defect 8: ["OFF", "TENSORS"] would mean traced and not; Triton
    refuses it (400 / INVALID_ARGUMENT) and so do we, over HTTP and gRPC."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    write_add_sub(tmp_path / "models")
    s = start_grpc(tmp_path / "models")
    client = httpclient.InferenceServerClient(s.url)
    gclient = grpcclient.InferenceServerClient(s.grpc_url)
    for levels in (["OFF", "TENSORS"], ["TIMESTAMPS", "OFF"]):
        for update, status in (
                (lambda: client.update_trace_settings(settings={"trace_level": levels}), "400"),
                (lambda: client.update_trace_settings(
                    model_name="add_sub", settings={"trace_level": levels}), "400"),
                (lambda: gclient.update_trace_settings(settings={"trace_level": levels}),
                 "StatusCode.INVALID_ARGUMENT")):
            with pytest.raises(InferenceServerException) as err:
                update()
            assert err.value.status() == status
            assert "Expect only one trace level 'OFF' is specified" in str(err.value)
    assert client.get_trace_settings()["trace_level"] == ["OFF"]
    assert client.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})["trace_level"] == \
        ["TIMESTAMPS", "TENSORS"]
    gclient.close()
