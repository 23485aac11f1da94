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
# what the frontends add around a client's request, as Triton's do
HTTP_ORDER = ["HTTP_RECV_START", "HTTP_RECV_END", *ORDER, "HTTP_SEND_START", "HTTP_SEND_END"]
GRPC_ORDER = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", *ORDER, "GRPC_SEND_START",
              "GRPC_SEND_END"]


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
        assert names == HTTP_ORDER
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
    # a level alone, with no --trace-file to write to, is not a setting that
    # can trace: Triton refuses it too
    with pytest.raises(InferenceServerException) as err:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS", "TENSORS"]})
    assert err.value.status() == "400"
    assert "Attempting to set invalid trace setting :trace file name is not given" in \
        str(err.value)
    gclient.close()


def _trace_everything(s, client, trace_file, count="-1"):
    s.run(s.server.trace_settings, None, {"trace_file": str(trace_file)})
    client.update_trace_settings(settings={
        "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": count,
        "log_frequency": "0"})


def _written(client, trace_file) -> list:
    client.update_trace_settings(settings={"trace_level": ["OFF"]})  # flushes the file
    return json.loads(trace_file.read_text())


def _span(record) -> tuple:
    stamps = {x["name"]: x["ns"] for x in record["timestamps"]}
    return stamps["REQUEST_START"], stamps["REQUEST_END"]


def test_ensemble_steps_are_traced_as_children_of_the_ensemble(tmp_path, start_server):
    """As Triton: the ensemble request is sampled (REQUEST_START,
    QUEUE_START, REQUEST_END), each step's request is a child trace with
    "parent_id" and the parent's level, and the steps are never sampled by
    themselves nor counted against trace_count."""
    from tests.integration.test_ensemble import inputs, write_ensemble

    write_add_sub(tmp_path / "models", extra="dynamic_batching { }")
    write_ensemble(tmp_path / "models")
    s = start_server(tmp_path / "models")
    client = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "trace.json"
    _trace_everything(s, client, trace_file, count="1")
    client.infer("pipeline", inputs(httpclient), request_id="first")
    client.infer("pipeline", inputs(httpclient))  # the count is spent: no trace, nor steps
    assert client.get_trace_settings()["trace_count"] == "0"
    traces = _written(client, trace_file)
    parents = [t for t in traces if "parent_id" not in t]
    assert len(parents) == 1, traces
    parent = parents[0]
    assert parent["model_name"] == "pipeline" and parent["request_id"] == "first"
    assert [x["name"] for x in parent["timestamps"]] == \
        ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "REQUEST_END",
         "HTTP_SEND_START", "HTTP_SEND_END"]
    children = [t for t in traces if t.get("parent_id") == parent["id"]]
    assert len(children) == 3 and len(traces) == 4
    assert len({t["id"] for t in traces}) == 4
    start, end = _span(parent)
    for child in children:
        assert child["model_name"] == "add_sub" and child["request_id"] == "first"
        assert list(child)[:5] == ["id", "model_name", "model_version", "request_id",
                                   "parent_id"]  # Triton's order
        assert [x["name"] for x in child["timestamps"]] == ORDER
        child_start, child_end = _span(child)
        assert start <= child_start <= child_end <= end


def test_a_bls_call_is_traced_only_under_the_callers_trace(tmp_path, start_server, python_mode):
    """A Python model's BLS call is a child trace of its request when it
    passes trace=request.trace() (Triton's documented way), and not traced
    at all otherwise, even though its target's requests are sampled."""
    import shutil

    from tests.integration.conftest import use_execution_mode
    from tests.integration.test_python_bls import MODELS

    repo = tmp_path / "models"
    repo.mkdir()
    for name in ("bls", "add_sub"):
        shutil.copytree(MODELS / name, repo / name)
    use_execution_mode(repo, python_mode)
    s = start_server(repo)
    client = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "trace.json"
    _trace_everything(s, client, trace_file)
    a = np.array([1, 2, 3, 4], np.float32)

    def call(**params):
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
                  httpclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        result = client.infer("bls", inputs, parameters=params)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)

    call(target="add_sub", trace=True)
    call(target="add_sub")
    traces = _written(client, trace_file)
    by_model = sorted((t["model_name"], "parent_id" in t) for t in traces)
    assert by_model == [("add_sub", True), ("bls", False), ("bls", False)], traces
    child = next(t for t in traces if t["model_name"] == "add_sub")
    parent = next(t for t in traces if t["id"] == child["parent_id"])
    assert parent["model_name"] == "bls"
    start, end = _span(parent)
    child_start, child_end = _span(child)
    assert start <= child_start <= child_end <= end


def test_grpc_calls_carry_the_frontends_stamps(tmp_path, start_grpc):  # noqa: F811
    """Over gRPC a sampled call's trace starts with GRPC_WAITREAD_START/END
    and ends with GRPC_SEND_START/END, in time order, as Triton's gRPC
    frontend writes them (what Triton's trace_summary.py keys on); a call
    refused before it reaches a model is not sampled."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    write_add_sub(tmp_path / "models", extra="dynamic_batching { }")
    s = start_grpc(tmp_path / "models")
    client = grpcclient.InferenceServerClient(s.grpc_url)
    trace_file = tmp_path / "trace.json"
    _trace_everything(s, httpclient.InferenceServerClient(s.url), trace_file)
    a = np.ones((1, 16), np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
              grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    client.infer("add_sub", inputs, request_id="g")
    bad = [grpcclient.InferInput("INPUT0", [1, 16], "FP32")]
    bad[0].set_data_from_numpy(a)
    with pytest.raises(InferenceServerException):  # refused before it is sampled
        client.infer("add_sub", bad)
    traces = _written(httpclient.InferenceServerClient(s.url), trace_file)
    assert len(traces) == 1, traces
    trace = traces[0]
    assert trace["request_id"] == "g"
    assert [x["name"] for x in trace["timestamps"]] == GRPC_ORDER
    times = [x["ns"] for x in trace["timestamps"]]
    assert times == sorted(times)
    client.close()


def test_stream_calls_carry_the_frontends_stamps(tmp_path, start_grpc):  # noqa: F811
    """ModelStreamInfer: each traced request's wait for its read starts
    where the stream opened or the previous message was read, and its
    final response's send is stamped."""
    import queue

    import tritonclient.grpc as grpcclient

    write_add_sub(tmp_path / "models")
    s = start_grpc(tmp_path / "models")
    trace_file = tmp_path / "trace.json"
    _trace_everything(s, httpclient.InferenceServerClient(s.url), trace_file)
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    a = np.ones((1, 16), np.float32)
    for i in range(2):
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        client.async_stream_infer("add_sub", inputs, request_id=str(i))
        result, error = answers.get(timeout=30)
        assert error is None
    client.stop_stream()
    client.close()
    traces = sorted(_written(httpclient.InferenceServerClient(s.url), trace_file),
                    key=lambda t: t["request_id"])
    assert [t["request_id"] for t in traces] == ["0", "1"]
    for t in traces:
        assert [x["name"] for x in t["timestamps"]] == GRPC_ORDER
        times = [x["ns"] for x in t["timestamps"]]
        assert times == sorted(times)
    first, second = ({x["name"]: x["ns"] for x in t["timestamps"]} for t in traces)
    assert second["GRPC_WAITREAD_START"] == first["GRPC_WAITREAD_END"]


def test_a_decoupled_models_bls_after_execute_is_traced_under_its_request(
        tmp_path, start_grpc):  # noqa: F811
    """A decoupled request's trace stays open until its final response, as
    Triton's lives until the request is released: a BLS call its model
    makes after execute() returned (from its own thread) is a child trace,
    inside the request's span, and the request's REQUEST_END comes after
    the child's. (Worker processes, as Triton runs them: in the thread mode
    a thread the model starts belongs to no instance once several models
    share the process.)"""
    import queue
    import shutil

    import tritonclient.grpc as grpcclient

    from tests.integration.test_python_bls import MODELS

    repo = tmp_path / "models"
    repo.mkdir()
    for name in ("bls_after_execute", "add_sub"):
        shutil.copytree(MODELS / name, repo / name)
    s = start_grpc(repo)
    http = httpclient.InferenceServerClient(s.url)
    trace_file = tmp_path / "trace.json"
    _trace_everything(s, http, trace_file)
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(s.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    a = np.array([1, 2, 3, 4], np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"),
              grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    client.async_stream_infer("bls_after_execute", inputs, request_id="r",
                              enable_empty_final_response=True)
    result, error = answers.get(timeout=30)
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    result, error = answers.get(timeout=30)  # the final flag alone
    assert error is None and result.get_response().parameters["triton_final_response"].bool_param
    client.stop_stream()
    client.close()
    traces = _written(http, trace_file)
    by_model = sorted((t["model_name"], "parent_id" in t) for t in traces)
    assert by_model == [("add_sub", True), ("bls_after_execute", False)], traces
    child = next(t for t in traces if t["model_name"] == "add_sub")
    parent = next(t for t in traces if t["id"] == child["parent_id"])
    assert parent["model_name"] == "bls_after_execute" and parent["request_id"] == "r"
    start, end = _span(parent)
    child_start, child_end = _span(child)
    assert start <= child_start <= child_end <= end
