"""Instance groups give real parallel executors; a failing batch fails only
its own requests and the model keeps serving."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.backends import register_backend

CONFIG = """
name: "probe"
backend: "probe_backend"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


class ProbeBackend:
    """Sleeps 0.2 s per request (releasing the GIL, as real runtimes do),
    records how many instances run at once, fails on a negative input."""

    lock = threading.Lock()
    running = 0
    max_running = 0
    instances_seen: set = set()

    def __init__(self, model_path, config, instance_name, device, threads):
        self.instance_name = instance_name

    def execute(self, inputs):
        x = inputs["IN"]
        if x[0] < 0:
            raise ValueError("negative input")
        cls = ProbeBackend
        with cls.lock:
            cls.running += 1
            cls.max_running = max(cls.max_running, cls.running)
            cls.instances_seen.add(self.instance_name)
        time.sleep(0.2)
        with cls.lock:
            cls.running -= 1
        return {"OUT": x * 2}


def write_probe(repo, config=CONFIG, name="probe"):
    """A model folder served by ProbeBackend (counters reset)."""
    register_backend("probe_backend", ProbeBackend)
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model").write_text("")
    if "default_model_filename" not in config:
        config += 'default_model_filename: "model"\n'
    (d / "config.pbtxt").write_text(config)
    ProbeBackend.max_running = 0
    ProbeBackend.instances_seen = set()


def infer_at_once(url, count, model_of, input_name="IN", output_name="OUT") -> list:
    """``count`` requests (value i to model ``model_of(i)``) sent together."""
    def call(i):
        client = httpclient.InferenceServerClient(url)
        inp = httpclient.InferInput(input_name, [1], "FP32")
        inp.set_data_from_numpy(np.array([i], np.float32))
        return client.infer(model_of(i), [inp]).as_numpy(output_name)[0]

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(call, range(count)))


@pytest.fixture
def probe(tmp_path, start_server):
    write_probe(tmp_path)
    return start_server(tmp_path)


def infer(url, value):
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("IN", [1], "FP32")
    inp.set_data_from_numpy(np.array([value], np.float32))
    return client.infer("probe", [inp]).as_numpy("OUT")[0]


def test_two_instances_execute_in_parallel(probe):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda v: infer(probe.url, v), [1.0, 2.0, 3.0, 4.0]))
    assert results == [2.0, 4.0, 6.0, 8.0]
    assert ProbeBackend.max_running == 2
    assert ProbeBackend.instances_seen == {"probe_0_0", "probe_0_1"}


def test_failing_batch_fails_only_its_request(probe):
    with pytest.raises(InferenceServerException) as err:
        infer(probe.url, -1.0)
    assert err.value.status() == "500"
    assert "ValueError: negative input" in err.value.message()
    assert infer(probe.url, 5.0) == 10.0
    stats = probe.run(probe.server.model_statistics, "probe")
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert stats["failure_reasons"]["BACKEND"] == 1
    assert stats["inference_stats"]["success"]["count"] == 1


def test_an_answer_leaves_while_the_next_batch_runs(tmp_path, start_server):
    # The instance holds back the loop's wake-up for a finished batch while
    # it starts the next one (Scheduler::CompleteAndNext); the answer must
    # still leave as that batch starts, not when it ends.
    write_probe(tmp_path, CONFIG.replace("count: 2", "count: 1"))
    s = start_server(tmp_path)
    answered = {}

    def timed(value):
        infer(s.url, value)
        answered[value] = time.monotonic()

    first = threading.Thread(target=timed, args=(1.0,))
    first.start()
    time.sleep(0.05)  # queued while the first runs (0.2 s)
    timed(2.0)
    first.join()
    assert answered[2.0] - answered[1.0] > 0.1, answered


class RecordingPath:
    """A model's RequestPath whose scatter (the cut of a batch's outputs
    into responses) records the thread it runs on."""

    def __init__(self, path):
        self.path = path
        self.threads = []

    def scatter(self, *args):
        self.threads.append(threading.current_thread())
        return self.path.scatter(*args)

    def __getattr__(self, name):  # the request checks
        return getattr(self.path, name)


def test_the_event_loop_cuts_a_batch_into_its_responses(tmp_path, start_server):
    # An instance thread hands the batch's outputs over as they are; the
    # loop cuts them per request as it answers (ModelVersion.execute_batch).
    write_probe(tmp_path, CONFIG.replace("count: 2", "count: 1"))
    s = start_server(tmp_path)
    mv = s.run(s.server.models.resolve, "probe", "")
    mv._path = recording = RecordingPath(mv._path)
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(lambda v: infer(s.url, v), [1.0, 2.0, 3.0])) == [2, 4, 6]
    assert recording.threads == [s.thread] * 3


class InvalidCut(Exception):
    pass


def test_a_cut_that_fails_on_the_loop_fails_its_batch_only(tmp_path, start_server):
    write_probe(tmp_path, CONFIG.replace("count: 2", "count: 1"))
    s = start_server(tmp_path)
    client = httpclient.InferenceServerClient(s.url)
    x = np.array([1.0], dtype=np.float32)
    inp = httpclient.InferInput("IN", [1], "FP32")
    inp.set_data_from_numpy(x)
    mv = s.run(s.server.models.resolve, "probe", "")
    mv._path = recording = RecordingPath(mv._path)

    def broken(*args):  # a cut that raises as classify can
        recording.threads.append(threading.current_thread())
        raise InvalidCut("the cut went wrong")

    recording.scatter = broken
    with pytest.raises(InferenceServerException) as err:
        client.infer("probe", [inp])
    assert "InvalidCut: the cut went wrong" in str(err.value)
    assert recording.threads == [s.thread]
    mv._path = recording.path
    assert infer(s.url, 4.0) == 8  # the model keeps serving
    client.close()


def test_passive_instances_load_but_take_no_work(tmp_path, start_server):
    """instance_group { passive: true }: its instances are made (as Triton
    loads them) but the scheduler never gives them a batch."""
    write_probe(tmp_path, CONFIG.replace(
        "instance_group [ { count: 2 kind: KIND_CPU } ]",
        'instance_group [ { count: 1 kind: KIND_CPU },\n'
        '                 { name: "spare" count: 2 kind: KIND_CPU passive: true } ]'))
    s = start_server(tmp_path)
    mv = s.run(s.server.models.resolve, "probe", "")
    assert [i.name for i in mv.instances] == ["probe_0_0"]
    assert [i.name for i in mv.passive_instances] == ["spare_0", "spare_1"]
    assert all(isinstance(i.backend, ProbeBackend) for i in mv.passive_instances)
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda v: infer(s.url, v), [1.0, 2.0, 3.0, 4.0])) == [2, 4, 6, 8]
    assert ProbeBackend.instances_seen == {"probe_0_0"}


RATE_LIMITED = """
name: "{name}"
backend: "probe_backend"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU
                   rate_limiter {{ resources [ {{ name: "R" count: 1 }} ] }} }} ]
default_model_filename: "model"
"""


def most_at_once(s) -> int:
    """Runs 8 requests at once, 4 to each model; how many executed together."""
    ProbeBackend.max_running = 0
    answers = infer_at_once(s.url, 8, lambda i: "a" if i % 2 else "b")
    assert answers == [2 * i for i in range(8)]
    return ProbeBackend.max_running


@pytest.mark.parametrize("settings, expected", [
    ({}, 4),  # off: every instance of both models at once
    ({"rate_limit": "execution_count"}, 1),  # one copy of R: the largest need
    ({"rate_limit": "execution_count", "rate_limit_resources": [("R", -1, 2)]}, 2),
])
def test_rate_limiter_resources_bound_executions_across_models(tmp_path, start_server,
                                                               settings, expected):
    for name in ("a", "b"):
        write_probe(tmp_path, RATE_LIMITED.format(name=name), name)
    s = start_server(tmp_path, **settings)
    assert most_at_once(s) == expected


def test_rate_limiter_refuses_resources_that_cannot_work(tmp_path, start_server):
    write_probe(tmp_path, RATE_LIMITED.format(name="a"), "a")
    s = start_server(tmp_path, exit_on_error=False, rate_limit="execution_count",
                     rate_limit_resources=[("S", -1, 4)])  # R not given: no copies
    client = httpclient.InferenceServerClient(s.url)
    row = next(r for r in client.get_model_repository_index() if r["name"] == "a")
    assert row["state"] == "UNAVAILABLE"
    assert ('Resource count for "R" is limited to 0 which will prevent scheduling of one or '
            'more model instances, the minimum required count is 1') in row["reason"]


ENSEMBLE_OVER_PROBE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [ { model_name: "probe" model_version: -1
           input_map { key: "IN" value: "X" } output_map { key: "OUT" value: "Y" } } ]
  %s
}
"""


@pytest.mark.parametrize("limit, expected", [("", 4), ("max_inflight_requests: 2", 2)])
def test_ensemble_max_inflight_requests_bounds_each_step(tmp_path, start_server, limit, expected):
    """Six ensemble requests at once over a step model with four instances:
    all four run together, unless max_inflight_requests holds the step to 2."""
    write_probe(tmp_path, CONFIG.replace("count: 2", "count: 4"))
    (tmp_path / "pipeline" / "1").mkdir(parents=True)
    (tmp_path / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_OVER_PROBE % limit)
    s = start_server(tmp_path)
    answers = infer_at_once(s.url, 6, lambda i: "pipeline", "X", "Y")
    assert answers == [2 * i for i in range(6)]
    assert ProbeBackend.max_running == expected
