"""Triton Python models (tests/models/python/*) served over HTTP and talked
to with tritonclient: each instance runs in its own worker process."""

import json
import logging
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.conftest import use_execution_mode

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


def repo_with(tmp_path, *names, mode="process"):
    """A repository of these test models, run in ``mode`` (process or thread)."""
    repo = tmp_path / "models"
    repo.mkdir(exist_ok=True)
    for name in names:
        shutil.copytree(MODELS / name, repo / name)
    use_execution_mode(repo, mode)
    return repo


def backends(server, model):
    mv = server.run(server.server.models.resolve, model, "")
    return [inst.backend for inst in mv.instances]


def infer_add_sub(url, model, a, b, **kwargs):
    client = httpclient.InferenceServerClient(url)
    i0 = httpclient.InferInput("INPUT0", list(a.shape), "FP32")
    i0.set_data_from_numpy(a, binary_data=kwargs.pop("binary", True))
    i1 = httpclient.InferInput("INPUT1", list(b.shape), "FP32")
    i1.set_data_from_numpy(b)
    return client.infer(model, [i0, i1], **kwargs)


def infer_one(url, model, name, array, datatype, **kwargs):
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput(name, list(array.shape), datatype)
    inp.set_data_from_numpy(array)
    return client.infer(model, [inp], **kwargs)


# -- add_sub, sync and async --------------------------------------------------------

@pytest.mark.parametrize("model", ["add_sub", "add_sub_async"])
@pytest.mark.parametrize("binary", [True, False])
def test_add_sub(tmp_path, start_server, model, binary, python_mode):
    server = start_server(repo_with(tmp_path, model, mode=python_mode))
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([10, 20, 30, 40], np.float32)
    result = infer_add_sub(server.url, model, a, b, binary=binary)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_output("OUTPUT0")["datatype"] == "FP32"
    if model == "add_sub_async":
        # every execute ran on the instance's one persistent asyncio loop
        for _ in range(3):
            result = infer_add_sub(server.url, model, a, b)
        assert result.get_response()["parameters"] == {"same_loop": True}


def test_add_sub_requested_output_only(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "add_sub", mode=python_mode))
    a = np.ones(4, np.float32)
    out = httpclient.InferRequestedOutput("OUTPUT1")
    result = infer_add_sub(server.url, "add_sub", a, a, outputs=[out])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros(4, np.float32))


@pytest.mark.parametrize("kind", ["memfd", "devshm", "file"])
def test_every_shared_memory_kind(tmp_path, start_server, monkeypatch, kind):
    """memfd is the default on Linux; /dev/shm files and temporary files are
    the fallbacks where memfd is missing or /dev/shm is small."""
    if kind == "memfd" and not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create here")
    if kind == "devshm" and not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    from pyserver.backends.python import channel

    monkeypatch.setattr(channel, "_kind_cache", kind)
    server = start_server(repo_with(tmp_path, "add_sub"))
    assert backends(server, "add_sub")[0].shm_kind == kind
    a = np.array([1, 2, 3, 4], np.float32)
    result = infer_add_sub(server.url, "add_sub", a, a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH here")
@pytest.mark.parametrize("setting, parameter, policy", [
    (None, None, "SCHED_BATCH"), ("normal", None, "SCHED_OTHER"),
    (None, "normal", "SCHED_OTHER"), ("normal", " Batch", "SCHED_BATCH"),
    ("normal", "auto", "SCHED_BATCH"),
])
def test_worker_scheduling_policy(tmp_path, start_server, monkeypatch, setting, parameter,
                                  policy):
    """Workers start under SCHED_BATCH (a worker woken with work does not
    preempt the event loop that sent it); PYSERVER_PYTHON_SCHED=normal opts
    out for every model, the model's pyserver_worker_scheduling parameter
    for its own workers (it wins over the environment)."""
    if setting is None:
        monkeypatch.delenv("PYSERVER_PYTHON_SCHED", raising=False)
    else:
        monkeypatch.setenv("PYSERVER_PYTHON_SCHED", setting)
    repo = repo_with(tmp_path, "add_sub")
    if parameter is not None:
        config = repo / "add_sub" / "config.pbtxt"
        config.write_text(config.read_text() + 'parameters { key: "pyserver_worker_scheduling" '
                          f'value {{ string_value: "{parameter}" }} }}\n')
    server = start_server(repo)
    pid = backends(server, "add_sub")[0].pid
    assert os.sched_getscheduler(pid) == getattr(os, policy)
    a = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(infer_add_sub(server.url, "add_sub", a, a).as_numpy("OUTPUT0"),
                                  a * 2)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH here")
def test_a_worker_whose_groups_start_late_leaves_sched_batch(tmp_path, start_server, monkeypatch,
                                                             caplog):
    """"auto" scheduling: the event loop times each group from its send to
    the worker's start; past the watch's limit the worker (and any that
    replaces it) runs SCHED_OTHER. Here every start counts as late."""
    from pyserver.backends.python.backend import StartDelayWatch

    monkeypatch.delenv("PYSERVER_PYTHON_SCHED", raising=False)
    repo = repo_with(tmp_path, "add_sub")
    _add_sub_copy(repo, "add_sub_pinned", '\nparameters { key: "pyserver_worker_scheduling" '
                                          'value { string_value: "batch" } }\n')
    server = start_server(repo)
    auto, pinned = backends(server, "add_sub")[0], backends(server, "add_sub_pinned")[0]
    assert pinned.start_watch is None  # a pinned policy is never watched
    auto.start_watch = StartDelayWatch(window=100, late_ns=0, limit=2)
    a = np.array([1, 2, 3, 4], np.float32)
    with caplog.at_level(logging.INFO, logger="pyserver"):
        for count in range(3):
            assert os.sched_getscheduler(auto.pid) == os.SCHED_BATCH, count
            infer_add_sub(server.url, "add_sub", a, a)
            infer_add_sub(server.url, "add_sub_pinned", a, a)
    assert os.sched_getscheduler(auto.pid) == os.SCHED_OTHER
    assert os.sched_getscheduler(pinned.pid) == os.SCHED_BATCH
    assert auto.start_watch is None and auto._env["PYSERVER_PYTHON_SCHED"] == "normal"
    assert "python model 'add_sub' instance 'add_sub_0_0': its worker leaves SCHED_BATCH: more " \
           "than 2 of 100 groups waited over 0 µs for a core" in caplog.text
    np.testing.assert_array_equal(infer_add_sub(server.url, "add_sub", a, a).as_numpy("OUTPUT0"),
                                  a * 2)


def test_model_logs_reach_the_server_log(tmp_path, start_server, caplog, python_mode):
    caplog.set_level(logging.INFO, logger="pyserver")
    server = start_server(repo_with(tmp_path, "add_sub", mode=python_mode), model_control_mode="explicit",
                          load_models=["add_sub"])
    server.call(server.server.unload_model("add_sub"))
    deadline = time.monotonic() + 5
    while "add_sub finalized" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    records = [r for r in caplog.records if r.getMessage() == "add_sub finalized"]
    assert records and records[0].filename == "model.py" and records[0].lineno > 0
    assert records[0].instance == "add_sub_0_0"


def test_add_sub_large_tensors_grow_shared_memory(tmp_path, start_server):
    """4 MiB per tensor: more than the 1 MiB regions a worker starts with."""
    repo = repo_with(tmp_path, "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 4 ]", "dims: [ -1 ]"))
    server = start_server(repo)
    a = np.random.default_rng(0).random(1 << 20, dtype=np.float32)
    b = np.full(1 << 20, 0.5, np.float32)
    result = infer_add_sub(server.url, "add_sub", a, b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    small = np.ones(3, np.float32)
    result = infer_add_sub(server.url, "add_sub", small, small)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), small * 2)


# -- initialize args --------------------------------------------------------------------

def test_initialize_args(tmp_path, start_server, python_mode):
    repo = repo_with(tmp_path, "init_args", mode=python_mode)
    server = start_server(repo)
    result = infer_one(server.url, "init_args", "IN", np.zeros(1, np.float32), "FP32")
    info = json.loads(result.as_numpy("OUT")[0])
    args = info["args"]
    assert sorted(args) == sorted(["model_config", "model_instance_kind", "model_instance_name",
                                   "model_instance_device_id", "model_repository",
                                   "model_version", "model_name"])
    assert info["arg_types"] == ["str"]
    assert args["model_name"] == "init_args"
    assert args["model_version"] == "1"
    assert args["model_instance_name"] == "init_args_0_0"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(repo / "init_args")
    config = json.loads(args["model_config"])
    assert config["name"] == "init_args"
    assert config["backend"] == "python"
    assert config["input"][0]["name"] == "IN" and config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["output"][0]["data_type"] == "TYPE_STRING"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert info["model_dir"] == str(repo / "init_args" / "1")
    if python_mode == "thread":
        # this process, the model imported as a module of its own per instance
        assert info["pid"] == os.getpid()
        assert info["module"] == "_pyserver_model_init_args_1_init_args_0_0"
        assert str(repo / "init_args" / "1") in info["sys_path_tail"]
        return
    # the worker: its own process, imported as Triton does ("<version>.model"),
    # pb_utils' folder on sys.path, a thread cap in its environment
    assert info["pid"] != os.getpid()
    assert info["module"] == "1.model"
    assert info["sys_path_tail"][-1].endswith(os.path.join("backends", "python"))
    if "OMP_NUM_THREADS" in os.environ:
        assert info["omp_num_threads"] == os.environ["OMP_NUM_THREADS"]
    else:
        from pyserver.backends._common import compute_cores
        assert info["omp_num_threads"] == str(compute_cores())


# -- BYTES and parameters --------------------------------------------------------------------

def test_bytes_in_and_out(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "bytes_echo", mode=python_mode))
    text = np.array([[b"hello", b"", "grüße".encode()]], dtype=np.object_)
    result = infer_one(server.url, "bytes_echo", "TEXT", text, "BYTES", request_id="r-1",
                       parameters={"key": "value", "n": 3, "flag": True})
    assert result.as_numpy("UPPER").tolist() == [[b"HELLO", b"", "grüße".encode().upper()]]
    assert result.as_numpy("LENGTHS").tolist() == [[5, 0, len("grüße".encode())]]
    assert result.as_numpy("AS_STR").tolist() == [[b"hello", b"", "grüße".encode()]]
    assert result.get_output("UPPER")["datatype"] == "BYTES"
    params = result.get_response()["parameters"]
    assert params["request_id"] == "r-1"
    assert json.loads(params["requested"]) == ["UPPER", "LENGTHS", "AS_STR"]
    assert json.loads(params["params"]) == {"key": "value", "n": 3, "flag": True}
    assert params["cancelled"] is False
    assert params["correlation_id"] == 0 and params["flags"] == 0 and params["timeout"] == 0
    assert result.get_response()["id"] == "r-1"


def test_sequence_and_timeout_request_properties(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "bytes_echo", mode=python_mode))
    text = np.array([[b"x"]], dtype=np.object_)
    result = infer_one(server.url, "bytes_echo", "TEXT", text, "BYTES", sequence_id=42,
                       sequence_start=True, sequence_end=True, timeout=5_000_000,
                       parameters={"custom": "kept"})
    params = result.get_response()["parameters"]
    assert params["correlation_id"] == 42
    assert params["flags"] == 3  # SEQUENCE_START | SEQUENCE_END
    assert params["timeout"] == 5_000_000
    # request properties are not request parameters
    assert json.loads(params["params"]) == {"custom": "kept"}
    result = infer_one(server.url, "bytes_echo", "TEXT", text, "BYTES", sequence_id="abc")
    assert result.get_response()["parameters"]["correlation_id"] == "abc"


def test_bytes_json_and_batched(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "bytes_echo", mode=python_mode))

    def one(i):
        client = httpclient.InferenceServerClient(server.url)  # one per thread
        inp = httpclient.InferInput("TEXT", [1, 2], "BYTES")
        inp.set_data_from_numpy(np.array([[f"a{i}".encode(), b"bc"]], dtype=np.object_),
                                binary_data=False)
        outs = [httpclient.InferRequestedOutput("LENGTHS", binary_data=False)]
        return client.infer("bytes_echo", [inp], outputs=outs)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(32)))
    for i, r in enumerate(results):
        assert r.as_numpy("LENGTHS").tolist() == [[len(f"a{i}"), 2]]
        assert [o["name"] for o in r.get_response()["outputs"]] == ["LENGTHS"]


# -- errors ------------------------------------------------------------------------------------

ERROR_STATUS = {"INVALID_ARG": "400", "NOT_FOUND": "404", "UNAVAILABLE": "503",
                "UNSUPPORTED": "501", "INTERNAL": "500", "UNKNOWN": "400",
                "ALREADY_EXISTS": "400", "CANCELLED": "400"}


def run_error(server, mode):
    with pytest.raises(InferenceServerException) as info:
        infer_one(server.url, "errors", "MODE", np.array([mode.encode()], np.object_), "BYTES")
    return info.value


def test_error_codes(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "errors", mode=python_mode))
    for name, status in ERROR_STATUS.items():
        err = run_error(server, f"code:{name}")
        assert err.status() == status, name
        assert err.message() == f"error code: {name}"
    err = run_error(server, "default_code")
    assert err.status() == "500" and err.message() == "default code"
    ok = infer_one(server.url, "errors", "MODE", np.array([b"ok"], np.object_), "BYTES")
    assert ok.as_numpy("OUT").tolist() == [7]


def test_exceptions_fail_the_batch_with_tracebacks(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "errors", mode=python_mode))
    prefix = "Failed to process the request(s) for model 'errors_0', message: "
    err = run_error(server, "model_exception")
    assert err.status() == "500"
    assert err.message().startswith(prefix + "TritonModelException: the model refused")
    assert "model.py(" in err.message() and "): execute" in err.message()
    err = run_error(server, "value_error")
    assert err.message().startswith(prefix + "ValueError: bad value in helper\n\nAt:\n")
    lines = err.message().split("At:\n")[1].splitlines()
    assert lines[0].endswith("): helper") and lines[1].endswith("): execute")
    err = run_error(server, "bad_tensor")
    assert err.message().startswith(prefix + "TritonModelException: Tensor name cannot be an empty string.")
    # the model keeps serving
    ok = infer_one(server.url, "errors", "MODE", np.array([b"ok"], np.object_), "BYTES")
    assert ok.as_numpy("OUT").tolist() == [7]


def test_wrong_responses(tmp_path, start_server, python_mode):
    server = start_server(repo_with(tmp_path, "errors", mode=python_mode))
    prefix = "Failed to process the request(s) for model 'errors_0', message: "
    err = run_error(server, "two_responses")
    assert err.status() == "500"
    assert err.message() == prefix + (
        "Number of InferenceResponse objects do not match the number of InferenceRequest "
        "objects. InferenceRequest(s) size is:1, and InferenceResponse(s) size is:2\n")
    err = run_error(server, "not_a_list")
    assert err.message() == prefix + "Expected a list in the execute return, found type '<class 'tuple'>'."
    err = run_error(server, "not_a_response")
    assert err.message() == prefix + ("Expected an 'InferenceResponse' object in the execute "
                                      "function return list, found type '<class 'str'>'.")
    err = run_error(server, "none_response")
    assert "found type '<class 'NoneType'>'" in err.message()
    stats = server.run(server.server.model_statistics, "errors")
    assert stats["inference_stats"]["fail"]["count"] >= 3


def test_wrong_response_count_fails_every_request_of_the_batch(tmp_path, start_server, python_mode):
    repo = repo_with(tmp_path, "errors", mode=python_mode)
    config = repo / "errors" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 0", "max_batch_size: 8")
                      + "dynamic_batching { max_queue_delay_microseconds: 200000 }\n")
    server = start_server(repo)

    def call(_):
        client = httpclient.InferenceServerClient(server.url)
        inp = httpclient.InferInput("MODE", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[b"two_responses"]], np.object_))
        try:
            client.infer("errors", [inp])
        except InferenceServerException as err:
            return err.message()
        return None

    with ThreadPoolExecutor(4) as pool:
        messages = list(pool.map(call, range(4)))
    assert all(m and "Number of InferenceResponse objects do not match" in m for m in messages), messages
    sizes = {m.split("InferenceRequest(s) size is:")[1].split(",")[0] for m in messages}
    assert sizes - {"1"}, "expected at least one batch of several requests"


# -- auto-complete -------------------------------------------------------------------------------

def test_auto_complete_config(tmp_path, start_server):
    server = start_server(repo_with(tmp_path, "auto_complete"))
    client = httpclient.InferenceServerClient(server.url)
    config = client.get_model_config("auto_complete")
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    assert config["input"][1]["optional"] is True
    assert [t["name"] for t in config["output"]] == ["OUTPUT0"]
    a = np.ones((2, 4), np.float32)
    result = infer_add_sub(server.url, "auto_complete", a, a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.full((1, 4), 3, np.float32))
    result = client.infer("auto_complete", [inp])  # INPUT1 is optional
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 6, np.float32))


def test_auto_complete_conflict_fails_the_load(tmp_path, start_server):
    repo = repo_with(tmp_path, "auto_complete")
    (repo / "auto_complete" / "config.pbtxt").write_text(
        'backend: "python"\noutput [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n')
    with pytest.raises(Exception) as info:
        start_server(repo)
    assert "configuration expects datatype TYPE_INT32 for output 'OUTPUT0', model provides TYPE_FP32" \
        in str(info.value)


def test_auto_complete_disabled_keeps_the_config(tmp_path, start_server):
    repo = repo_with(tmp_path, "auto_complete", "add_sub")
    server = start_server(repo, auto_complete_config=False, exit_on_error=False)
    index = {row["name"]: row for row in server.run(server.server.repository_index)}
    assert index["add_sub"]["state"] == "READY"
    assert index["auto_complete"]["state"] == "UNAVAILABLE"


# -- instances, crash, readiness ---------------------------------------------------------------------

def test_two_instances_run_in_parallel_processes(tmp_path, start_server):
    server = start_server(repo_with(tmp_path, "parallel"))
    instances = backends(server, "parallel")
    assert len(instances) == 2 and len({b.pid for b in instances}) == 2

    def call(v):
        r = infer_one(server.url, "parallel", "IN", np.array([v], np.float32), "FP32")
        return r.as_numpy("OUT")[0], tuple(r.as_numpy("SPAN")), int(r.as_numpy("PID")[0])

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(call, [1.0, 2.0, 3.0, 4.0]))
    assert [r[0] for r in results] == [2.0, 4.0, 6.0, 8.0]
    assert {r[2] for r in results} == {b.pid for b in instances}
    spans = [r[1] for r in results]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2


def test_thread_mode_runs_instances_in_the_server_process(tmp_path, start_server):
    """pyserver_execution_mode "thread": no worker processes; each instance
    imports its own copy of model.py, runs on its own thread (the two
    instances' executions overlap), and unloading finalizes it and takes
    its module and folders off sys.modules and sys.path."""
    import sys

    from pyserver.backends.python.in_process import ThreadPythonBackend

    repo = repo_with(tmp_path, "parallel", mode="thread")
    server = start_server(repo, model_control_mode="explicit", load_models=["parallel"])
    instances = backends(server, "parallel")
    assert [type(b) for b in instances] == [ThreadPythonBackend] * 2
    modules = [sys.modules[b._module_name] for b in instances]
    assert modules[0] is not modules[1]
    assert modules[0].TritonPythonModel is not modules[1].TritonPythonModel

    def call(v):
        r = infer_one(server.url, "parallel", "IN", np.array([v], np.float32), "FP32")
        return r.as_numpy("OUT")[0], tuple(r.as_numpy("SPAN")), int(r.as_numpy("PID")[0])

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(call, [1.0, 2.0]))
    assert [r[0] for r in results] == [2.0, 4.0]
    assert {r[2] for r in results} == {os.getpid()}
    (s1, e1), (s2, e2) = results[0][1], results[1][1]
    assert s1 < e2 and s2 < e1  # both instances were executing at once
    folder = str(repo / "parallel" / "1")
    assert folder in sys.path
    server.call(server.server.unload_model("parallel"))
    assert not any(b._module_name in sys.modules for b in instances)
    assert folder not in sys.path and str(repo / "parallel") not in sys.path


def test_the_loop_stops_spinning_for_a_model_slower_than_its_spin(tmp_path, start_server):
    """A lone request's completion is spun for by the event loop (Server
    _spin_for_completion, 100 µs here) only while such spins catch it: for
    a model that takes 20 ms a call (thread mode: its completions come
    through the completion queue) they never do, and it stops being spun
    for (tests/unit/test_engine.py: caught spins keep it on)."""
    server = start_server(repo_with(tmp_path, "one_at_a_time", mode="thread"))
    slow = server.run(server.server.models.resolve, "one_at_a_time", "")
    assert slow.low_load_spin_s > 0 and slow.completion_spin.spinning
    for v in range(1, 9):  # one at a time: each alone in the server
        r = infer_one(server.url, "one_at_a_time", "IN", np.array([v], np.float32), "FP32")
        assert r.as_numpy("OUT")[0] == 2 * v
    assert not slow.completion_spin.spinning


def test_queued_requests_each_get_their_own_execute(tmp_path, start_server, python_mode):
    """Requests that queue while the worker is busy go to it in one message
    (backends/python/loop_driver.py), yet each is still its own execute() call and
    its own outcome: a raise or an error response fails that request only,
    and every request is counted once in the statistics."""
    server = start_server(repo_with(tmp_path, "one_at_a_time", mode=python_mode))
    values = [1.0, 2.0, -3.0, 4.0, 0.0, 6.0, 7.0, 8.0, -9.0, 10.0, 11.0, 12.0]

    def call(v):
        try:
            r = infer_one(server.url, "one_at_a_time", "IN", np.array([v], np.float32), "FP32")
        except InferenceServerException as err:
            return err
        return r.as_numpy("OUT")[0], int(r.as_numpy("SEEN")[0]), int(r.as_numpy("CALL")[0])

    with ThreadPoolExecutor(len(values)) as pool:
        results = list(pool.map(call, values))
    calls = []
    for v, r in zip(values, results):
        if v < 0:
            assert isinstance(r, InferenceServerException) and r.status() == "500", r
            assert f"negative input {v:g}" in r.message()
        elif v == 0:
            assert isinstance(r, InferenceServerException) and r.status() == "400", r
            assert r.message() == "zero input"
        else:
            assert r[:2] == (2 * v, 1)
            calls.append(r[2])
    assert len(set(calls)) == len(calls)  # one execute() per request
    client = httpclient.InferenceServerClient(server.url)
    stats = client.get_inference_statistics("one_at_a_time")["model_stats"][0]
    # A raising execute() counts as a failed request and no execution; an
    # error response is the model's answer to an executed request.
    assert stats["execution_count"] == len(values) - 2
    assert stats["inference_stats"]["success"]["count"] == len(values) - 2
    assert stats["inference_stats"]["fail"]["count"] == 2
    assert infer_one(server.url, "one_at_a_time", "IN", np.array([5.0], np.float32),
                     "FP32").as_numpy("OUT")[0] == 10.0


def test_large_outputs_do_not_pile_up_in_the_output_region(tmp_path, start_server):
    """Outputs of megabytes go one batch per message (GROUP_REGION_LIMIT):
    a group's outputs would all sit in the worker's output region at once."""
    server = start_server(repo_with(tmp_path, "large_output"))
    out = httpclient.InferRequestedOutput("OUT", binary_data=True)

    def call(v):
        r = infer_one(server.url, "large_output", "IN", np.array([v], np.float32), "FP32",
                      outputs=[out])
        return r.as_numpy("OUT")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, [float(v) for v in range(1, 9)]))
    for v, got in zip(range(1, 9), results):
        assert got.shape == (2097152,) and got[0] == v and got[-1] == v
    worker = backends(server, "large_output")[0]._worker
    assert worker.out.size <= 32 << 20, worker.out.size


def _add_sub_copy(repo, name, extra):
    folder = repo / name
    shutil.copytree(repo / "add_sub", folder)
    config = (folder / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
    (folder / "config.pbtxt").write_text(config + extra)


def test_which_instances_the_event_loop_drives(tmp_path, start_server):
    """Not decoupled, no sequence batching and no preserve_ordering: the
    event loop sends batches to the worker and reads its answers (no
    instance thread), dynamic batching included."""
    repo = repo_with(tmp_path, "parallel", "add_sub", "repeat")
    _add_sub_copy(repo, "add_sub_batched", "\nmax_batch_size: 8\ndynamic_batching { }\n")
    _add_sub_copy(repo, "add_sub_ordered", "\nmax_batch_size: 8\ndynamic_batching { "
                                           "preserve_ordering: true }\n")
    server = start_server(repo)
    models = server.server.models
    for name, driven in (("parallel", 2), ("add_sub", 1), ("add_sub_batched", 1),
                         ("add_sub_ordered", 0), ("repeat", 0)):
        mv = server.run(lambda n=name: models.resolve(n, ""))
        assert len(mv.loop_drivers) == driven, name
        threads = [d.thread for d in mv.drivers if hasattr(d, "thread")]
        assert sum(t.is_alive() for t in threads) == len(mv.instances) - driven, name
    for model, a in (("add_sub", np.arange(4, dtype=np.float32)),
                     ("add_sub_batched", np.arange(4, dtype=np.float32).reshape(1, 4)),
                     ("add_sub_ordered", np.arange(4, dtype=np.float32).reshape(1, 4))):
        r = infer_add_sub(server.url, model, a, a)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + a)


def test_the_loop_keeps_the_batching_delay_and_sizes(tmp_path, start_server):
    """A dynamic batcher the event loop drives: requests wait for the
    delay to gather (the loop comes back as it ends, with nothing else
    arriving), a full batch leaves without waiting it out, and each request
    gets its own rows. Generous margins: a batch forms within its delay,
    not at a measured speed."""
    repo = repo_with(tmp_path, "add_sub")
    _add_sub_copy(repo, "slow_batcher", "\nmax_batch_size: 4\n"
                                        "dynamic_batching { max_queue_delay_microseconds: 300000 }\n")
    _add_sub_copy(repo, "long_batcher", "\nmax_batch_size: 4\n"
                                        "dynamic_batching { max_queue_delay_microseconds: 30000000 }\n")
    server = start_server(repo)
    for name in ("slow_batcher", "long_batcher"):
        mv = server.run(lambda n=name: server.server.models.resolve(n, ""))
        assert mv.loop_drivers and mv.batch_timer is not None, name

    def call(model, k):
        a = np.full((1, 4), k, np.float32)
        start = time.monotonic()
        r = infer_add_sub(server.url, model, a, np.ones((1, 4), np.float32))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + 1)
        return time.monotonic() - start

    def executions(model):
        return server.run(server.server.model_statistics, model)["execution_count"]

    # alone: answered once the delay is over, by the loop's timer
    took = call("slow_batcher", 1)
    assert 0.25 <= took < 10, took
    # three together: one batch, after the delay
    with ThreadPoolExecutor(3) as pool:
        took = list(pool.map(lambda k: call("slow_batcher", k), range(3)))
    assert all(0.2 <= t < 10 for t in took), took
    assert executions("slow_batcher") in (2, 3)  # 1 + (1, or 2 if one came late)
    # four, the most a batch holds: they go at once, not after 30 s
    with ThreadPoolExecutor(4) as pool:
        took = list(pool.map(lambda k: call("long_batcher", k), range(4)))
    assert max(took) < 10, took
    assert executions("long_batcher") == 1


def test_requests_arriving_during_the_loops_wait_end_it_only_when_they_can(tmp_path,
                                                                            start_server):
    """While the loop waits out a batching delay, a request that cannot end
    the wait does not ask the loop for a batch (the scheduler says so); one
    that reaches the preferred size ends it at once, and one that arrives
    after it joins nothing and waits its own delay."""
    repo = repo_with(tmp_path, "add_sub")
    _add_sub_copy(repo, "preferring", "\nmax_batch_size: 8\ndynamic_batching { "
                                      "preferred_batch_size: [ 3 ] "
                                      "max_queue_delay_microseconds: 30000000 }\n")
    server = start_server(repo)

    def call(k):
        a = np.full((1, 4), k, np.float32)
        start = time.monotonic()
        r = infer_add_sub(server.url, "preferring", a, np.ones((1, 4), np.float32))
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + 1)
        return time.monotonic() - start

    def queued(n):
        deadline = time.monotonic() + 10
        while server.run(lambda: server.server.inflight) < n:
            assert time.monotonic() < deadline, f"{n} requests never queued"
            time.sleep(0.01)

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(call, 1)
        queued(1)  # the loop was told to wait (30 s)
        second = pool.submit(call, 2)
        queued(2)  # below the preferred size: the wait stands
        time.sleep(0.2)
        assert not first.done() and not second.done()
        third = pool.submit(call, 3)  # the preferred size: all three go now
        took = [f.result(timeout=20) for f in (first, second, third)]
    assert max(took) < 15, took
    stats = server.run(server.server.model_statistics, "preferring")
    assert stats["execution_count"] == 1 and stats["inference_count"] == 3


def test_unload_lets_the_batch_in_the_worker_finish(tmp_path, start_server):
    server = start_server(repo_with(tmp_path, "parallel"), model_control_mode="explicit",
                          load_models=["parallel"])
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(infer_one, server.url, "parallel", "IN",
                              np.array([5.0], np.float32), "FP32")
        time.sleep(0.1)  # the 0.3 s batch is in a worker
        server.call(server.server.unload_model("parallel"))
        assert running.result(30).as_numpy("OUT")[0] == 10.0
    with pytest.raises(InferenceServerException, match="unknown model"):
        infer_one(server.url, "parallel", "IN", np.array([1.0], np.float32), "FP32")


@pytest.mark.parametrize("how, expected", [(3, "exited with code 3"),
                                           (11, "was killed by signal 11 (SIGSEGV)")])
def test_crash_fails_the_request_and_the_worker_restarts(tmp_path, start_server, how, expected):
    repo = repo_with(tmp_path, "crash")
    server = start_server(repo)
    backend = backends(server, "crash")[0]
    first = infer_one(server.url, "crash", "IN", np.array([1], np.int32), "INT32")
    old_pid = int(first.as_numpy("PID")[0])
    assert backend.healthy() and backend.pid == old_pid
    (repo / "crash" / "slow_init").write_text("")  # the restart takes 1.5 s

    with pytest.raises(InferenceServerException) as info:
        infer_one(server.url, "crash", "IN", np.array([how], np.int32), "INT32")
    message = info.value.message()
    assert info.value.status() == "500"
    assert "python model 'crash' instance 'crash_0'" in message
    assert f"(pid {old_pid}) {expected} while executing a batch of 1 request(s)" in message
    if how == 11:
        assert "Fatal Python error" in message and "model.py" in message  # faulthandler's report
    assert not backend.healthy()
    assert not backend.is_ready()

    # A request sent while it restarts waits for the new worker.
    again = infer_one(server.url, "crash", "IN", np.array([5], np.int32), "INT32")
    assert again.as_numpy("OUT").tolist() == [5]
    new_pid = int(again.as_numpy("PID")[0])
    assert new_pid != old_pid
    assert backend.healthy() and backend.restarts == 1 and backend.pid == new_pid


def test_a_crash_inside_a_group_of_queued_requests(tmp_path, start_server):
    """Requests queued behind a busy worker go to it in one message; when
    one of them kills the worker, each of them still gets exactly one
    answer (its output, or the crash error), and the restarted worker
    serves what comes next."""
    server = start_server(repo_with(tmp_path, "crash"))
    backend = backends(server, "crash")[0]
    old_pid = backend.pid

    def call(v):
        try:
            r = infer_one(server.url, "crash", "IN", np.array([v], np.int32), "INT32")
        except InferenceServerException as err:
            return err
        return int(r.as_numpy("OUT")[0])

    with ThreadPoolExecutor(6) as pool:
        busy = pool.submit(call, 1300)  # holds the worker for 0.3 s
        time.sleep(0.1)
        queued = {v: pool.submit(call, v) for v in (1, 2, 3, 4, 5)}
        assert busy.result(30) == 1300
        results = {v: f.result(30) for v, f in queued.items()}
    crashed = results.pop(3)
    assert isinstance(crashed, InferenceServerException) and crashed.status() == "500"
    assert f"(pid {old_pid}) exited with code 3 while executing a batch of" in crashed.message()
    for v, r in results.items():  # answered before the crash, or failed with it
        assert r == v or (isinstance(r, InferenceServerException)
                          and r.message() == crashed.message()), (v, r)
    deadline = time.monotonic() + 30
    while not backend.healthy() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert call(7) == 7 and backend.pid != old_pid


# the event loop's path without and with dynamic batching, and the instance thread's
# (preserve_ordering keeps a model on its threads)
@pytest.mark.parametrize("batching, on_loop", [("", True), ("dynamic_batching { }", True),
                                              ("dynamic_batching { preserve_ordering: true }",
                                               False)], ids=["loop", "loop-batching", "thread"])
def test_a_hung_worker_is_stopped_with_its_stack_and_restarted(tmp_path, start_server, batching,
                                                                on_loop):
    """pyserver_execute_timeout_seconds: a batch with no answer in time
    fails with an error that names the model, the timeout and where the
    model was stuck; the worker restarts; a slow batch within the limit and
    another model are not disturbed."""
    repo = repo_with(tmp_path, "crash", "add_sub")
    config = repo / "crash" / "config.pbtxt"
    text = config.read_text()
    if batching:
        text = text.replace("max_batch_size: 0", "max_batch_size: 4") + batching + "\n"
    config.write_text(text + 'parameters { key: "pyserver_execute_timeout_seconds" '
                      'value { string_value: "1" } }\n')
    server = start_server(repo)
    backend = backends(server, "crash")[0]
    mv = server.run(server.server.models.resolve, "crash", "")
    assert len(mv.loop_drivers) == (1 if on_loop else 0)

    def value(v):
        return np.array([[v]] if batching else [v], np.int32)

    slow = infer_one(server.url, "crash", "IN", value(1000 + 400), "INT32")
    old_pid = int(slow.as_numpy("PID").reshape(-1)[0])

    with ThreadPoolExecutor(1) as pool:
        hung = pool.submit(infer_one, server.url, "crash", "IN", value(1000 + 60_000), "INT32")
        time.sleep(0.3)
        a = np.arange(4, dtype=np.float32)  # another model keeps serving meanwhile
        np.testing.assert_array_equal(infer_add_sub(server.url, "add_sub", a, a)
                                      .as_numpy("OUTPUT0"), a * 2)
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as info:
            hung.result(30)
    assert time.monotonic() - started < 10
    message = info.value.message()
    assert info.value.status() == "500"
    assert (f"python model 'crash' instance 'crash_0': the worker process (pid {old_pid}) did "
            "not finish a batch within 1 s (pyserver_execute_timeout_seconds) and was killed "
            "while executing a batch of 1 request(s); it is being restarted") in message, message
    assert "Where its threads were when it was stopped:" in message
    assert "model.py\", line" in message and " in execute" in message, message
    deadline = time.monotonic() + 30
    while not backend.healthy() and time.monotonic() < deadline:
        time.sleep(0.1)
    after = infer_one(server.url, "crash", "IN", value(7), "INT32")
    assert after.as_numpy("OUT").reshape(-1).tolist() == [7]
    assert int(after.as_numpy("PID").reshape(-1)[0]) not in (old_pid, 0)
    assert backend.restarts == 1


@pytest.mark.parametrize("key, value, expected", [
    ("pyserver_execution_mode", "fiber", "must be \"process\" or \"thread\", got \"fiber\""),
    ("pyserver_execute_timeout_seconds", "soon",
     "must be a number of seconds (0: no limit), got \"soon\""),
    ("pyserver_execute_timeout_seconds", "-1",
     "must be a number of seconds (0: no limit), got \"-1\""),
    ("pyserver_worker_scheduling", "fifo",
     "must be \"auto\", \"batch\" or \"normal\", got \"fifo\""),
])
def test_bad_python_settings_fail_the_load(tmp_path, start_server, key, value, expected):
    repo = repo_with(tmp_path, "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text() + f'parameters {{ key: "{key}" '
                      f'value {{ string_value: "{value}" }} }}\n')
    server = start_server(repo, exit_on_error=False)
    index = {row["name"]: row for row in server.run(server.server.repository_index)}
    assert index["add_sub"]["state"] == "UNAVAILABLE"
    assert f"model 'add_sub': parameter '{key}' {expected}" in index["add_sub"]["reason"]


def test_a_worker_that_cannot_restart_fails_fast_then_recovers(tmp_path, start_server):
    repo = repo_with(tmp_path, "crash")
    server = start_server(repo)
    backend = backends(server, "crash")[0]
    infer_one(server.url, "crash", "IN", np.array([1], np.int32), "INT32")
    (repo / "crash" / "fail_init").write_text("")
    with pytest.raises(InferenceServerException):
        infer_one(server.url, "crash", "IN", np.array([3], np.int32), "INT32")
    # The first restart fails: requests are refused at once with the reason.
    with pytest.raises(InferenceServerException) as info:
        infer_one(server.url, "crash", "IN", np.array([1], np.int32), "INT32")
    assert info.value.status() == "503"
    assert "python model 'crash' instance 'crash_0' is not available: its worker process could " \
           "not be restarted" in info.value.message()
    assert "TritonModelException: initialize refused" in info.value.message()
    assert not backend.healthy()
    # Readiness reflects the worker: model and (strict) server not ready.
    probe = httpclient.InferenceServerClient(server.url)
    assert not probe.is_model_ready("crash")
    assert not probe.is_server_ready()
    (repo / "crash" / "fail_init").unlink()
    deadline = time.monotonic() + 15
    while not backend.healthy() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert backend.healthy()
    assert probe.is_model_ready("crash") and probe.is_server_ready()
    result = infer_one(server.url, "crash", "IN", np.array([4], np.int32), "INT32")
    assert result.as_numpy("OUT").tolist() == [4]


def test_model_is_ready(tmp_path, start_server, python_mode):
    """The model-ready endpoints (HTTP and gRPC) ask the model's own
    is_ready() each time, as Triton's Python backend does: False, an
    exception, a non-boolean answer or no answer within 5 s read as not
    ready; the server's own readiness and the model's serving are not
    affected."""
    import tritonclient.grpc as grpcclient

    from pyserver.frontends.grpc import GrpcFrontend

    server = start_server(repo_with(tmp_path, "readiness", mode=python_mode))
    grpc = GrpcFrontend(server.server, "127.0.0.1", 0)
    server.call(grpc.start())
    http = httpclient.InferenceServerClient(server.url)
    rpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc.port}")
    backend = backends(server, "readiness")[0]

    def ready():
        answers = {http.is_model_ready("readiness"), rpc.is_model_ready("readiness")}
        assert len(answers) == 1, "HTTP and gRPC disagree"
        return answers.pop()

    def set_state(value, mode=""):
        result = infer_one(server.url, "readiness", "READY", np.array([value]), "BOOL",
                           parameters={"mode": mode} if mode else None)
        assert result.as_numpy("OUT").tolist() == [value]

    try:
        assert ready() and backend.is_ready()
        set_state(False)
        assert not ready() and not backend.is_ready()
        assert backend.healthy() and http.is_server_ready()  # the model still serves
        set_state(True)
        assert ready()
        for mode in ("raise", "non_bool"):
            set_state(True, mode)
            assert not ready(), mode
        set_state(True)
        assert ready()
        if python_mode == "process":  # (5 s each way: once is enough)
            set_state(True, "slow")
            started = time.monotonic()
            assert not http.is_model_ready("readiness")
            assert time.monotonic() - started < 7.5
    finally:
        rpc.close()
        server.call(grpc.stop(1))


def test_unload_finalizes_and_ends_workers(tmp_path, start_server):
    server = start_server(repo_with(tmp_path, "parallel"), model_control_mode="explicit",
                          load_models=["parallel"])
    pids = [b.pid for b in backends(server, "parallel")]
    server.call(server.server.unload_model("parallel"))
    for pid in pids:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"worker {pid} still running after unload")


def test_load_error_in_initialize(tmp_path, start_server, python_mode):
    repo = repo_with(tmp_path, "add_sub", mode=python_mode)
    model = repo / "add_sub" / "1" / "model.py"
    model.write_text(model.read_text().replace(
        "config = json.loads(args[\"model_config\"])",
        "raise pb_utils.TritonModelException('cannot load weights')"))
    server = start_server(repo, exit_on_error=False)
    index = {row["name"]: row for row in server.run(server.server.repository_index)}
    assert index["add_sub"]["state"] == "UNAVAILABLE"
    assert "TritonModelException: cannot load weights" in index["add_sub"]["reason"]
    assert "initialize" in index["add_sub"]["reason"]


def test_initialize_args_name_each_instances_gpu(tmp_path, start_server):
    """A KIND_GPU group over two GPUs: one instance on each, told its own
    device (as Triton's Python backend tells it); placing needs no GPU."""
    repo = repo_with(tmp_path, "init_args")
    config = repo / "init_args" / "config.pbtxt"
    config.write_text(config.read_text().replace("{ count: 1 kind: KIND_CPU }",
                                                 "{ count: 1 kind: KIND_GPU gpus: [ 0, 1 ] }"))
    server = start_server(repo)
    instances = server.server.models.resolve("init_args", "").instances
    args = [i.backend._init_args(i.name) for i in instances]
    assert [(a["model_instance_name"], a["model_instance_kind"], a["model_instance_device_id"])
            for a in args] == [("init_args_0_0", "GPU", "0"), ("init_args_0_1", "GPU", "1")]
