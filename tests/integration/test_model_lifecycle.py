"""Model lifecycle through the repository API (tritonclient HTTP and gRPC)
and through files: model_warmup, poll mode, --model-config-name,
--exit-on-error / --strict-readiness, parallel loads, unload_dependents,
Triton's texts for bad names and startup flags."""

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.kernel.errors import Code, ServerError
from pyserver.testing import add_sub_onnx, write_add_sub

ZERO_AND_RANDOM = """model_warmup [ {{
  name: "{name}" batch_size: {batch} count: {count}
  inputs {{ key: "INPUT0" value {{ data_type: TYPE_FP32 dims: [ 16 ] zero_data: true }} }}
  inputs {{ key: "INPUT1" value {{ data_type: TYPE_FP32 dims: [ 16 ] random_data: true }} }}
}} ]"""


def infer(url, model, value=1.0, version=""):
    client = httpclient.InferenceServerClient(url)
    a = np.full((1, 16), value, np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
              httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return client.infer(model, inputs, model_version=version).as_numpy("OUTPUT0")


def index(url):
    return {(r["name"], r.get("version", "")): r for r in
            httpclient.InferenceServerClient(url).get_model_repository_index()}


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# A Python model that records every execution (instance name, batch of
# requests) in a file, and fails when FAIL is in its config parameters.
RECORDING_MODEL = '''
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        config = json.loads(args["model_config"])
        self.fail = "FAIL" in config.get("parameters", {})
        self.log = os.path.join(os.path.dirname(__file__), "..", "executions.jsonl")

    def execute(self, requests):
        with open(self.log, "a") as f:
            shapes = [list(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().shape)
                      for r in requests]
            f.write(json.dumps({"instance": self.instance, "shapes": shapes}) + "\\n")
        if self.fail:
            raise RuntimeError("this model refuses warmup data")
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)])
                for r in requests]
'''


def write_recording_model(repo: Path, name: str, instances: int, warmup: str, fail=False):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(RECORDING_MODEL)
    params = 'parameters { key: "FAIL" value { string_value: "1" } }' if fail else ""
    (d / "config.pbtxt").write_text(f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{params}
{warmup}
""")
    return d


# -- model_warmup ---------------------------------------------------------------------


def test_warmup_runs_on_every_instance_before_ready(tmp_path, start_server):
    warm = """model_warmup [ {
      name: "w" batch_size: 3 count: 2
      inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } } } ]"""
    d = write_recording_model(tmp_path, "rec", instances=2, warmup=warm)
    s = start_server(tmp_path, model_control_mode="explicit")
    client = httpclient.InferenceServerClient(s.url)
    client.load_model("rec")
    assert client.is_model_ready("rec")
    runs = [json.loads(line) for line in (d / "executions.jsonl").read_text().splitlines()]
    # each instance: 2 executions (count) of 3 requests (batch_size) of batch 1
    assert sorted(r["instance"] for r in runs) == ["rec_0_0", "rec_0_0", "rec_0_1", "rec_0_1"]
    assert all(r["shapes"] == [[1, 4]] * 3 for r in runs)
    # warmup requests are not inference requests: no statistics count them
    stats = client.get_inference_statistics("rec")["model_stats"][0]
    assert stats["inference_count"] == 0 and stats["execution_count"] == 0


def test_warmup_zero_random_and_file_data(tmp_path, start_server):
    write_add_sub(tmp_path, name="zr", instances=2,
                  extra=ZERO_AND_RANDOM.format(name="zr", batch=4, count=3))
    d = write_add_sub(tmp_path, name="fromfile", extra="""model_warmup [ {
      name: "f" batch_size: 2
      inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "in0" } }
      inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "in1" } }
    } ]""")
    (d / "warmup").mkdir()
    (d / "warmup" / "in0").write_bytes(np.arange(16, dtype=np.float32).tobytes())
    (d / "warmup" / "in1").write_bytes(np.ones(20, dtype=np.float32).tobytes())  # longer is fine
    s = start_server(tmp_path)
    rows = index(s.url)
    assert rows[("zr", "1")]["state"] == "READY"
    assert rows[("fromfile", "1")]["state"] == "READY"
    np.testing.assert_array_equal(infer(s.url, "zr", 2.0), np.full((1, 16), 4.0))
    cfg = httpclient.InferenceServerClient(s.url).get_model_config("zr")
    assert cfg["model_warmup"][0]["name"] == "zr" and cfg["model_warmup"][0]["count"] == 3


def test_failing_warmup_is_a_load_failure(tmp_path, start_server, caplog):
    warm = """model_warmup [ { name: "boom" batch_size: 1
      inputs { key: "IN" value { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]"""
    write_recording_model(tmp_path, "failing", instances=1, warmup=warm, fail=True)
    s = start_server(tmp_path, model_control_mode="explicit")
    client = httpclient.InferenceServerClient(s.url)
    with caplog.at_level(logging.ERROR, logger="pyserver"):
        with pytest.raises(InferenceServerException) as err:
            client.load_model("failing")
    assert err.value.status() == "400"
    assert "load failed for model 'failing'" in err.value.message()
    assert "failed to run warmup sample 'boom'" in err.value.message()
    assert "this model refuses warmup data" in err.value.message()
    # core's words: the version, its state, the reason with its code's name
    assert err.value.message().startswith(
        "load failed for model 'failing': version 1 is at UNAVAILABLE state: Invalid argument: "
        "failed to run warmup sample 'boom': ")
    assert err.value.message().endswith(";\n")
    row = index(s.url)[("failing", "1")]
    assert row["state"] == "UNAVAILABLE"
    assert row["reason"].startswith("Invalid argument: failed to run warmup sample 'boom': ")
    assert "this model refuses warmup data" in caplog.text
    assert not client.is_model_ready("failing")


@pytest.mark.parametrize("inputs, expected", [
    ('inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ -1 ] zero_data: true } }',
     "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'"),
    ('inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "s" } }',
     "warmup setting expects 64 bytes, but the data provided from s only has 3 bytes"),
    ('inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] } }',
     "warmup setting expects input 'INPUT0' to have input_data_type set"),
    ('inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "x" } }',
     "failed to open text file for read"),
])
def test_warmup_setting_errors(tmp_path, start_server, inputs, expected):
    d = write_add_sub(tmp_path, name="m",
                      extra=f'model_warmup [ {{ name: "bad" batch_size: 1 {inputs} }} ]')
    (d / "warmup").mkdir()
    (d / "warmup" / "s").write_bytes(b"abc")
    s = start_server(tmp_path, model_control_mode="explicit")
    with pytest.raises(InferenceServerException) as err:
        httpclient.InferenceServerClient(s.url).load_model("m")
    assert expected in err.value.message()
    assert expected in index(s.url)[("m", "")]["reason"]


def test_warmup_with_config_override_over_grpc(tmp_path, start_server):
    write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path, model_control_mode="explicit")
    from pyserver.frontends.grpc import GrpcFrontend
    grpc = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(grpc.start())
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc.port}")
        config = {
            "name": "m", "platform": "onnxruntime_onnx", "max_batch_size": 8,
            "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]}
                      for n in ("INPUT0", "INPUT1")],
            "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]}
                       for n in ("OUTPUT0", "OUTPUT1")],
            "model_warmup": [{"name": "g", "batch_size": 2, "inputs": {
                n: {"data_type": "TYPE_FP32", "dims": [16], "zero_data": True}
                for n in ("INPUT0", "INPUT1")}}]}
        client.load_model("m", config=json.dumps(config))
        assert client.is_model_ready("m")
        got = client.get_model_config("m", as_json=True)["config"]
        assert got["model_warmup"][0]["name"] == "g"
        config["model_warmup"][0]["inputs"]["INPUT0"]["dims"] = [-1]
        with pytest.raises(InferenceServerException) as err:
            client.load_model("m", config=json.dumps(config))
        assert "variable-size dimensions" in err.value.message()
        assert client.is_model_ready("m")  # the failed reload left the old one serving
        client.unload_model("m", unload_dependents=True)
        assert not client.is_model_ready("m")
    finally:
        s.call(grpc.stop())


# -- poll mode --------------------------------------------------------------------------


def test_poll_picks_up_new_and_removed_versions(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="m", versions=(1,),
                      extra="version_policy { all { } }")
    s = start_server(tmp_path, model_control_mode="poll", repository_poll_secs=0.1)
    client = httpclient.InferenceServerClient(s.url)
    assert client.get_model_metadata("m")["versions"] == ["1"]
    infer(s.url, "m", 1.0, "1")

    def count(version):
        stats = client.get_inference_statistics("m", version)["model_stats"]
        return stats[0]["inference_count"]

    (d / "2").mkdir()
    (d / "2" / "model.onnx").write_bytes(add_sub_onnx())
    wait_for(lambda: client.is_model_ready("m", "2"), what="version 2")
    assert client.get_model_metadata("m")["versions"] == ["1", "2"]
    assert count("1") == 1  # version 1 was not touched: it kept serving as it was
    np.testing.assert_array_equal(infer(s.url, "m", 1.0, "2"), np.full((1, 16), 2.0))
    import shutil
    shutil.rmtree(d / "1")
    wait_for(lambda: not client.is_model_ready("m", "1"), what="version 1 to go")
    assert client.get_model_metadata("m")["versions"] == ["2"]
    assert count("2") == 1
    assert client.is_server_ready()
    # a config change rebuilds every version
    cfg = d / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
    wait_for(lambda: client.get_model_config("m")["max_batch_size"] == 4, what="new config")
    assert count("2") == 0


def test_poll_new_model_changed_config_and_removed_model(tmp_path, start_server, caplog):
    write_add_sub(tmp_path, name="a")
    s = start_server(tmp_path, model_control_mode="poll", repository_poll_secs=0.1)
    client = httpclient.InferenceServerClient(s.url)
    # a new model folder loads
    write_add_sub(tmp_path, name="b")
    wait_for(lambda: client.is_model_ready("b"), what="model b")
    np.testing.assert_array_equal(infer(s.url, "b", 3.0), np.full((1, 16), 6.0))
    # a changed config reloads
    cfg = tmp_path / "a" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_batch_size: 8", "max_batch_size: 2"))
    wait_for(lambda: client.get_model_config("a")["max_batch_size"] == 2, what="new config")
    # a broken config keeps the old version serving (and the server ready)
    good = cfg.read_text()
    with caplog.at_level(logging.ERROR, logger="pyserver"):
        cfg.write_text(good + "\nnot_a_field: 1\n")
        # (two log records: the second may come a moment after the first)
        wait_for(lambda: "keeps serving its loaded version(s) 1" in caplog.text,
                 what="the failed reload")
    assert "failed to load 'a'" in caplog.text and "not_a_field" in caplog.text
    assert client.is_model_ready("a") and client.is_server_ready()
    assert index(s.url)[("a", "1")]["state"] == "READY"
    np.testing.assert_array_equal(infer(s.url, "a"), np.full((1, 16), 2.0))
    # a removed model unloads and leaves the index
    import shutil
    shutil.rmtree(tmp_path / "b")
    wait_for(lambda: not client.is_model_ready("b"), what="b to unload")
    # not ready once its versions are taken; gone from the index once they have stopped
    wait_for(lambda: ("b", "") not in index(s.url), what="b to leave the index")
    assert ("b", "1") not in index(s.url)
    # load/unload requests are refused while polling
    with pytest.raises(InferenceServerException) as err:
        client.load_model("a")
    assert "explicit model load / unload is not allowed if polling is enabled" in \
        err.value.message()


def test_poll_retries_a_failed_model_once_its_files_change(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="m")
    good = (d / "config.pbtxt").read_text()
    (d / "config.pbtxt").write_text("max_batch_size: [\n")
    s = start_server(tmp_path, model_control_mode="poll", repository_poll_secs=0.1,
                     exit_on_error=False)
    client = httpclient.InferenceServerClient(s.url)
    assert index(s.url)[("m", "")]["state"] == "UNAVAILABLE"
    assert not client.is_server_ready()  # strict readiness: a model failed
    (d / "config.pbtxt").write_text(good)
    wait_for(lambda: client.is_model_ready("m"), what="the fixed model")
    assert client.is_server_ready()


# -- --model-config-name ------------------------------------------------------------------


def test_model_config_name_selects_configs_folder(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="alt")
    write_add_sub(tmp_path, name="plain")
    (d / "configs").mkdir()
    (d / "configs" / "small.pbtxt").write_text(
        (d / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 3"))
    s = start_server(tmp_path, model_config_name="small")
    client = httpclient.InferenceServerClient(s.url)
    assert client.get_model_config("alt")["max_batch_size"] == 3
    assert client.get_model_config("plain")["max_batch_size"] == 8  # no configs/small.pbtxt
    s2 = start_server(tmp_path)
    assert httpclient.InferenceServerClient(s2.url).get_model_config("alt")["max_batch_size"] == 8


# -- startup flags ------------------------------------------------------------------------


def test_exit_on_error_and_strict_readiness(tmp_path, start_server):
    write_add_sub(tmp_path, name="good")
    bad = write_add_sub(tmp_path, name="bad")
    (bad / "1" / "model.onnx").write_bytes(b"not onnx")
    with pytest.raises(ServerError) as err:
        start_server(tmp_path)  # --exit-on-error defaults to true
    assert err.value.code == Code.INTERNAL and "failed to load all models" in err.value.message
    s = start_server(tmp_path, exit_on_error=False)
    client = httpclient.InferenceServerClient(s.url)
    assert client.is_server_live() and client.is_model_ready("good")
    assert not client.is_server_ready()  # strict: one model is not READY
    row = index(s.url)[("bad", "1")]
    assert row["state"] == "UNAVAILABLE" and "onnxruntime could not load" in row["reason"]
    lenient = start_server(tmp_path, exit_on_error=False, strict_readiness=False)
    assert httpclient.InferenceServerClient(lenient.url).is_server_ready()


def test_startup_load_model_flag_errors(tmp_path, start_server):
    write_add_sub(tmp_path, name="m")
    with pytest.raises(ServerError) as err:
        start_server(tmp_path, load_models=["m"])
    assert err.value.message == ("Error: Use of '--load-model' requires setting "
                                 "'--model-control-mode=explicit' as well.")
    with pytest.raises(ServerError) as err:
        start_server(tmp_path, model_control_mode="explicit", load_models=["*", "m"])
    assert err.value.message == ("Wildcard model name '*' must be the ONLY startup model "
                                 "if specified at all.")


FLAKY_INIT_MODEL = """
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # fails its first two loads: a resource that comes up late
        marker = Path(args["model_repository"]) / "tries"
        tries = int(marker.read_text()) if marker.exists() else 0
        marker.write_text(str(tries + 1))
        if tries < 2:
            raise RuntimeError(f"not up yet (try {tries + 1})")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def write_flaky(repo: Path) -> Path:
    model = repo / "flaky"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(FLAKY_INIT_MODEL)
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'parameters { key: "pyserver_execution_mode" value { string_value: "thread" } }\n')
    return model


def test_model_load_retry_count(tmp_path, start_server, caplog):
    model = write_flaky(tmp_path / "one_retry")
    s = start_server(tmp_path / "one_retry", exit_on_error=False, model_load_retry_count=1)
    row = index(s.url)[("flaky", "1")]
    assert row["state"] == "UNAVAILABLE" and "not up yet (try 2)" in row["reason"]
    assert row["reason"].startswith("Internal: ")
    assert (model / "tries").read_text() == "2"  # the load and one retry
    model = write_flaky(tmp_path / "two_retries")
    with caplog.at_level(logging.WARNING, logger="pyserver"):
        s = start_server(tmp_path / "two_retries", model_load_retry_count=2)
    assert httpclient.InferenceServerClient(s.url).is_model_ready("flaky")
    assert (model / "tries").read_text() == "3"
    retries = [r.getMessage() for r in caplog.records if " of 2): " in r.getMessage()]
    assert len(retries) == 2
    assert retries[0].startswith("failed to load 'flaky', trying again (retry 1 of 2): ")
    assert "not up yet (try 1)" in retries[0] and "not up yet (try 2)" in retries[1]


SLOW_INIT_MODEL = '''
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        time.sleep(1.5)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
'''


def test_models_load_in_parallel(tmp_path):
    from tests.integration.conftest import RunningServer
    for i in range(4):
        d = tmp_path / f"slow{i}"
        (d / "1").mkdir(parents=True)
        (d / "1" / "model.py").write_text(SLOW_INIT_MODEL)
        (d / "config.pbtxt").write_text(f'''name: "slow{i}" backend: "python" max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]''')
    took = {}
    for threads in (1, 4):
        started = time.monotonic()
        s = RunningServer(tmp_path, model_load_thread_count=threads)
        try:
            took[threads] = time.monotonic() - started
            assert all(r["state"] == "READY" for r in index(s.url).values())
        finally:
            s.close()
    # one thread: four 1.5 s initializations in a row; four: side by side
    assert took[1] >= 6.0
    assert took[4] < took[1] - 2.5, took


# -- names and unload_dependents over the API ---------------------------------------------


def test_bad_model_names_get_tritons_texts(tmp_path, start_server):
    write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path, model_control_mode="explicit")
    client = httpclient.InferenceServerClient(s.url)
    # Triton's qa/L0_input_validation (#21): traversal, empty, and names that are names
    traversal = "model name must not contain path traversal characters"
    empty = "Model name cannot be empty. Please enter a valid name to deploy."
    with pytest.raises(InferenceServerException) as err:
        client.load_model("..")
    assert err.value.message() == "invalid model name '..', " + traversal
    with pytest.raises(InferenceServerException) as err:
        client.load_model("   ")
    assert err.value.message() == empty
    cases = [(n, traversal) for n in ("../etc", "a/../b", "model/..", "/etc/passwd",
                                      "model/subdir", "model/", " ..", ".. ", ".")]
    cases += [(n, empty) for n in ("", " ", "\t", "\n", " \t \n ")]
    cases += [(n, "failed to poll from model repository")
              for n in ("model..1", "...", "..my_model", "model....1", "model.version1")]
    for name, text in cases:
        with pytest.raises(ServerError) as err:
            s.call(s.server.load_model(name))
        assert text in err.value.message, (name, err.value.message)
        if text != traversal:
            assert traversal not in err.value.message
    client.load_model("m")
    client.unload_model("m", unload_dependents=True)
    assert index(s.url)[("m", "1")]["reason"] == "unloaded"  # each version, as Triton lists them


# -- the cores are shared among the models loaded -----------------------------------------


class ThreadsRecorder:
    """A backend that records the thread count it was given."""
    seen: list = []

    def __init__(self, model_path, config, instance_name, device, threads):
        ThreadsRecorder.seen.append((config.name, threads))

    def execute(self, inputs):
        return {"OUT": inputs["IN"]}


def write_recorder_model(repo: Path, name: str, instances: int = 1):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model").write_text("")
    (d / "config.pbtxt").write_text(f'''name: "{name}" backend: "threads_recorder"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]''')


def test_backend_threads_are_a_share_of_the_cores(tmp_path, start_server):
    from pyserver.backends import register_backend
    from pyserver.backends._common import compute_cores
    register_backend("threads_recorder", ThreadsRecorder)
    cores = compute_cores()  # all but the event loop's core
    alone = tmp_path / "alone"
    write_recorder_model(alone, "solo", instances=2)
    ThreadsRecorder.seen = []
    start_server(alone)
    assert ThreadsRecorder.seen == [("solo", max(1, cores // 2))] * 2
    many = tmp_path / "many"
    for i in range(3 * cores):  # more models than cores: one thread each
        write_recorder_model(many, f"m{i}")
    ThreadsRecorder.seen = []
    s = start_server(many, model_control_mode="explicit", load_models=["*"])
    assert len(ThreadsRecorder.seen) == 3 * cores
    assert {threads for _, threads in ThreadsRecorder.seen} == {1}
    # a model loaded later shares the cores with those already loaded
    write_recorder_model(many, "late")
    ThreadsRecorder.seen = []
    httpclient.InferenceServerClient(s.url).load_model("late")
    assert ThreadsRecorder.seen == [("late", 1)]


def test_explicit_reload_of_an_unchanged_model_is_a_no_op(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="m", versions=(1, 2), extra="version_policy { all { } }")
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["m"])
    client = httpclient.InferenceServerClient(s.url)

    def count(version):
        return client.get_inference_statistics("m", version)["model_stats"][0]["inference_count"]

    infer(s.url, "m", 1.0, "1")
    infer(s.url, "m", 1.0, "2")
    client.load_model("m")  # nothing changed: nothing reloads (Triton's behaviour)
    assert (count("1"), count("2")) == (1, 1)
    (d / "2" / "model.onnx").write_bytes(add_sub_onnx())  # version 2 changes, 1 does not
    client.load_model("m")
    assert (count("1"), count("2")) == (1, 0)
    infer(s.url, "m", 1.0, "2")
    config = client.get_model_config("m")
    config["max_batch_size"] = 4
    client.load_model("m", config=json.dumps(config))  # an override always reloads
    assert (count("1"), count("2")) == (0, 0)
    assert client.get_model_config("m")["max_batch_size"] == 4
    client.load_model("m")  # the folder unchanged: the override stays, as in Triton (#21)
    assert client.get_model_config("m")["max_batch_size"] == 4


# -- version policies over the API ----------------------------------------------------------


@pytest.mark.parametrize("policy, loaded", [
    ("", ["3"]),  # the default: latest { num_versions: 1 }
    ("version_policy { latest { num_versions: 2 } }", ["2", "3"]),
    ("version_policy { all { } }", ["1", "2", "3"]),
    ("version_policy { specific { versions: [ 1, 3 ] } }", ["1", "3"]),
])
def test_version_policies(tmp_path, start_server, policy, loaded):
    write_add_sub(tmp_path, name="m", versions=(1, 2, 3), extra=policy)
    (tmp_path / "m" / "04").mkdir()  # zero-prefixed: ignored, as Triton
    (tmp_path / "m" / "x").mkdir()  # not a number: ignored
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["m"])
    from pyserver.frontends.grpc import GrpcFrontend
    grpc = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(grpc.start())
    try:
        http = httpclient.InferenceServerClient(s.url)
        assert http.get_model_metadata("m")["versions"] == loaded
        assert sorted(r["version"] for r in http.get_model_repository_index()) == loaded
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc.port}")
        assert list(g.get_model_metadata("m").versions) == loaded
        for v in ("1", "2", "3"):
            assert http.is_model_ready("m", v) == (v in loaded)
            assert g.is_model_ready("m", v) == (v in loaded)
        # no version: the highest loaded one answers
        assert httpclient.InferenceServerClient(s.url).get_model_config("m")["name"] == "m"
        a = np.ones((1, 16), np.float32)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        for i in inputs:
            i.set_data_from_numpy(a)
        assert http.infer("m", inputs).get_response()["model_version"] == loaded[-1]
        missing = next((v for v in ("1", "2", "3") if v not in loaded), None)
        if missing:
            with pytest.raises(InferenceServerException) as err:
                http.infer("m", inputs, model_version=missing)
            assert err.value.message() == \
                f"Request for unknown model: 'm' version {missing} is not found"
            with pytest.raises(InferenceServerException) as err:
                g.get_model_metadata("m", missing)
            assert "version " + missing + " is not found" in err.value.message()
    finally:
        s.call(grpc.stop())


class SlowClosingBackend:
    """Takes a while to build, and records that it was closed."""
    events: list = []

    def __init__(self, model_path, config, instance_name, device, threads):
        SlowClosingBackend.events.append("building")
        time.sleep(1.0)
        SlowClosingBackend.events.append("built")

    def execute(self, inputs):
        return {"OUT": inputs["IN"]}

    def close(self):
        SlowClosingBackend.events.append("closed")


def test_stopping_while_a_polled_model_loads_closes_what_it_built(tmp_path):
    from pyserver.backends import register_backend
    from tests.integration.conftest import RunningServer
    register_backend("slow_closing", SlowClosingBackend)
    SlowClosingBackend.events = []
    write_add_sub(tmp_path, name="other")
    s = RunningServer(tmp_path, model_control_mode="poll", repository_poll_secs=0.1)
    write_recorder_model(tmp_path, "slow")
    cfg = tmp_path / "slow" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("threads_recorder", "slow_closing"))
    wait_for(lambda: "building" in SlowClosingBackend.events, what="the load to start")
    assert index(s.url)[("slow", "")]["state"] == "LOADING"
    s.close()  # stops the server while the load runs
    wait_for(lambda: "closed" in SlowClosingBackend.events, timeout=10,
             what="the instance built after the stop to be closed")
    assert SlowClosingBackend.events == ["building", "built", "closed"]


STRING_RECORDER = '''
import json, os
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = os.path.join(os.path.dirname(__file__), "..", "seen.jsonl")
        with open(out, "a") as f:
            for r in requests:
                seen = {n: [v.decode() for v in
                            pb_utils.get_input_tensor_by_name(r, n).as_numpy().reshape(-1)]
                        for n in ("A", "B")}
                f.write(json.dumps(seen) + "\\n")
        return [pb_utils.InferenceResponse([]) for _ in requests]
'''


def test_warmup_string_inputs(tmp_path, start_server):
    from pyserver.kernel.dtypes import serialize_bytes_tensor
    d = tmp_path / "strings"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text(STRING_RECORDER)
    (d / "warmup").mkdir()
    (d / "warmup" / "words").write_bytes(
        serialize_bytes_tensor(np.array([b"hello", b"world"], dtype=np.object_)))
    (d / "config.pbtxt").write_text('''name: "strings" backend: "python" max_batch_size: 0
input [ { name: "A" data_type: TYPE_STRING dims: [ 2 ] },
        { name: "B" data_type: TYPE_STRING dims: [ 3 ] } ]
output [ { name: "O" data_type: TYPE_STRING dims: [ 1 ] } ]
model_warmup [ { name: "s" batch_size: 1
  inputs { key: "A" value { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "words" } }
  inputs { key: "B" value { data_type: TYPE_STRING dims: [ 3 ] random_data: true } } } ]''')
    s = start_server(tmp_path)
    assert httpclient.InferenceServerClient(s.url).is_model_ready("strings")
    seen = [json.loads(line) for line in (d / "seen.jsonl").read_text().splitlines()]
    # file data as written; random strings are empty ones, as in Triton
    assert seen == [{"A": ["hello", "world"], "B": ["", "", ""]}]


def test_check_repo_duplicates_name_mismatch_and_policy(tmp_path):
    from pyserver.check_repo import check
    from pyserver.repository.loader import LoadOptions
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    write_add_sub(r1, name="twice")
    write_add_sub(r2, name="twice")
    d = write_add_sub(r1, name="named")
    (d / "config.pbtxt").write_text((d / "config.pbtxt").read_text().replace(
        'name: "named"', 'name: "other"'))
    write_add_sub(r2, name="policy", extra="version_policy { specific { versions: [ 7 ] } }")
    py = r1 / "py"
    (py / "1").mkdir(parents=True)
    (py / "config.pbtxt").write_text('name: "py" backend: "python"')
    (py / "1" / "model.py").write_text("class TritonPythonModel:\n    def execute(self, r)\n")
    problems, count = check([str(r1), str(r2)], LoadOptions())
    assert count == 4
    text = [str(p) for p in problems]
    assert any("model 'twice': model appears in two or more repositories" in t for t in text)
    assert any(t.startswith(f"{d / 'config.pbtxt'}:1: model 'named': model configuration name "
                            "'other' does not match") for t in text)
    assert any(t.startswith(f"{r2 / 'policy' / 'config.pbtxt'}:13: model 'policy': "
                            "version_policy selects versions [7]") for t in text)
    assert f"{py / '1' / 'model.py'}:2: model 'py': SyntaxError: expected ':'" in text


@pytest.mark.parametrize("strict", [True, False])
def test_a_model_loading_for_the_first_time_keeps_the_server_unready(tmp_path, start_server,
                                                                      strict):
    from pyserver.backends import register_backend
    register_backend("slow_closing", SlowClosingBackend)
    SlowClosingBackend.events = []
    write_add_sub(tmp_path, name="other")
    s = start_server(tmp_path, model_control_mode="poll", repository_poll_secs=0.1,
                     strict_readiness=strict)
    client = httpclient.InferenceServerClient(s.url)
    assert client.is_server_ready()
    write_recorder_model(tmp_path, "slow")
    cfg = tmp_path / "slow" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("threads_recorder", "slow_closing"))
    wait_for(lambda: "building" in SlowClosingBackend.events, what="the load to start")
    assert client.is_server_ready() is (not strict)
    wait_for(lambda: client.is_model_ready("slow"), what="the slow model")
    assert client.is_server_ready()
    # a reload of a serving model does not: its version keeps serving
    SlowClosingBackend.events = []
    (tmp_path / "slow" / "1" / "model").write_text("new weights")
    wait_for(lambda: "building" in SlowClosingBackend.events, what="the reload to start")
    assert index(s.url)[("slow", "1")]["state"] == "READY"
    assert client.is_server_ready()
    wait_for(lambda: "closed" in SlowClosingBackend.events, what="the old instance to close")


def test_not_ready_while_the_process_opens_its_endpoints(tmp_path, start_server):
    """The CLI opens HTTP, gRPC and metrics one after another; a client that
    saw one of them ready may use the others, so none is ready before all
    listen."""
    write_add_sub(tmp_path)
    s = start_server(tmp_path)
    client = httpclient.InferenceServerClient(s.url)
    assert client.is_server_ready()
    s.server.opening_frontends = True
    assert not client.is_server_ready()
    assert client.is_server_live()
    s.server.opening_frontends = False
    assert client.is_server_ready()
