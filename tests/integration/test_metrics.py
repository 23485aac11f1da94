"""Triton's Prometheus endpoint: names, types, labels and text format, fed
from the engine's counters; values checked after known traffic."""

from __future__ import annotations

import queue
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver._proto import ModelConfig
from pyserver.backends import register_backend
from pyserver.frontends.metrics import (
    CONTENT_TYPE,
    DEFAULT_SUMMARY_QUANTILES,
    EngineCollector,
    HostSampler,
    MetricsConfig,
    MetricsConfigError,
    exposition,
)
from pyserver.frontends.metrics.endpoint import MetricsFrontend
from pyserver.testing import write_add_sub
from tests.integration.test_tracing import infer as infer_add_sub

# -- helpers ------------------------------------------------------------------

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict:
    """{(name, frozenset(labels)): value}; also checks every line's shape."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$", line), line
            continue
        m = _SAMPLE.match(line)
        assert m, f"malformed sample line: {line!r}"
        labels = frozenset(_LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def value(samples: dict, name: str, **labels):
    return samples.get((name, frozenset(labels.items())))


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == CONTENT_TYPE
        return r.read().decode("utf-8")


# -- a fake server for exact-format unit tests --------------------------------


class FakeStats:
    def __init__(self, **over):
        d = lambda c, ns: {"count": c, "ns": ns}  # noqa: E731
        self.snap = {
            "inference_count": 4, "execution_count": 3, "pending_count": 0,
            "inference_stats": {
                "success": d(3, 1_234_567), "fail": d(1, 5000), "queue": d(3, 2_999),
                "compute_input": d(3, 4000), "compute_infer": d(3, 900_000),
                "compute_output": d(3, 1500), "cache_hit": d(2, 7000), "cache_miss": d(1, 999),
            },
            "failure_reasons": {"REJECTED": 0, "CANCELED": 0, "BACKEND": 1, "OTHER": 0},
            "batch_stats": [],
        }
        self.snap.update(over)

    def snapshot(self):
        return self.snap


class FakeVersion:
    def __init__(self, name, version=1, config_text="", **stats):
        self.name = name
        self.version_str = str(version)
        self.config = ModelConfig()
        from google.protobuf import text_format
        text_format.Parse(config_text, self.config)
        self.stats = FakeStats(**stats)
        self.load_duration_s = 0.004683712


class FakeServer:
    def __init__(self, versions):
        self.versions = versions

    def loaded_versions(self):
        return self.versions


def render(versions, **config):
    config.setdefault("allow_cpu_metrics", False)
    config.setdefault("allow_gpu_metrics", False)
    from prometheus_client import CollectorRegistry
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(FakeServer(versions), MetricsConfig.from_cli(**config)))
    return exposition(registry).decode()


def test_exposition_is_tritons_text_exactly():
    text = render([FakeVersion("m")])
    assert text == """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="m",version="1"} 3
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 0
nv_inference_request_failure{model="m",reason="CANCELED",version="1"} 0
nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 1
nv_inference_request_failure{model="m",reason="OTHER",version="1"} 0
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{model="m",version="1"} 4
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="m",version="1"} 3
# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds (includes cached requests)
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="m",version="1"} 1234
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds (includes cached requests)
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="m",version="1"} 2
# HELP nv_inference_compute_input_duration_us Cumulative compute input duration in microseconds (does not include cached requests)
# TYPE nv_inference_compute_input_duration_us counter
nv_inference_compute_input_duration_us{model="m",version="1"} 4
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds (does not include cached requests)
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="m",version="1"} 900
# HELP nv_inference_compute_output_duration_us Cumulative inference compute output duration in microseconds (does not include cached requests)
# TYPE nv_inference_compute_output_duration_us counter
nv_inference_compute_output_duration_us{model="m",version="1"} 1
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="m",version="1"} 0
# HELP nv_model_load_duration_secs Model load time in seconds
# TYPE nv_model_load_duration_secs gauge
nv_model_load_duration_secs{model="m",version="1"} 0.004683712
# HELP nv_pinned_memory_pool_total_bytes Pinned memory pool total memory size, in bytes
# TYPE nv_pinned_memory_pool_total_bytes gauge
nv_pinned_memory_pool_total_bytes 0
# HELP nv_pinned_memory_pool_used_bytes Pinned memory pool used memory size, in bytes
# TYPE nv_pinned_memory_pool_used_bytes gauge
nv_pinned_memory_pool_used_bytes 0
"""
    assert "_total" not in text.replace("_total_bytes", "")


def test_metric_tags_labels_cache_families_and_escaping():
    tagged = FakeVersion("a\"b", 2, 'metric_tags { key: "team" value: "x\\\\y" }\n'
                                    'response_cache { enable: true }', pending_count=5)
    plain = FakeVersion("plain")
    text = render([tagged, plain])
    lines = text.splitlines()
    # Labels sorted by name as prometheus-cpp does: "_team" < "model" < "version".
    assert 'nv_inference_pending_request_count{_team="x\\\\y",model="a\\"b",version="2"} 5' in lines
    assert 'nv_inference_pending_request_count{model="plain",version="1"} 0' in lines
    assert ('nv_inference_request_failure{_team="x\\\\y",model="a\\"b",reason="BACKEND",'
            'version="2"} 1') in lines
    # Cache families: only for the model with response_cache.enable, in
    # Triton's order, after the pinned-memory gauges.
    names = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert names[-4:] == ["nv_cache_num_hits_per_model", "nv_cache_hit_duration_per_model",
                          "nv_cache_num_misses_per_model", "nv_cache_miss_duration_per_model"]
    samples = parse(text)
    key = {"_team": "x\\\\y", "model": 'a\\"b', "version": "2"}
    assert value(samples, "nv_cache_num_hits_per_model", **key) == 2
    assert value(samples, "nv_cache_hit_duration_per_model", **key) == 7
    assert value(samples, "nv_cache_num_misses_per_model", **key) == 1
    assert value(samples, "nv_cache_miss_duration_per_model", **key) == 0
    assert not any(k[0].startswith("nv_cache") and ("model", "plain") in k[1] for k in samples)


def test_counter_latencies_false_drops_latency_and_cache_counters():
    text = render([FakeVersion("m", config_text="response_cache { enable: true }")],
                  metrics_config=["counter_latencies=false"])
    assert "nv_inference_request_success{" in text
    assert "nv_inference_pending_request_count{" in text
    for gone in ("nv_inference_request_duration", "nv_inference_queue_duration",
                 "nv_inference_compute_input_duration", "nv_inference_compute_infer_duration",
                 "nv_inference_compute_output_duration", "nv_cache_"):
        assert gone not in text


def test_no_models_means_no_model_families():
    text = render([])
    assert "nv_inference" not in text and "nv_model_load" not in text
    assert "nv_pinned_memory_pool_total_bytes 0\n" in text


def test_values_are_written_as_cpp_prints_doubles():
    v = FakeVersion("m", inference_count=16861294592)
    v.load_duration_s = 0.02255639097744361
    samples = render([v])
    assert 'nv_inference_count{model="m",version="1"} 16861294592\n' in samples
    assert 'nv_model_load_duration_secs{model="m",version="1"} 0.02255639097744361\n' in samples


def test_foreign_collectors_use_prometheus_client_format():
    from prometheus_client import CollectorRegistry, Counter
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(FakeServer([]), MetricsConfig(allow_cpu_metrics=False)))
    Counter("custom_things", "Things counted", registry=registry).inc(2)
    text = exposition(registry).decode()
    assert "custom_things_total 2.0\n" in text


# -- host gauges -----------------------------------------------------------------


def test_host_sampler_reads_proc_once_per_interval(tmp_path):
    (tmp_path / "stat").write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n")
    (tmp_path / "meminfo").write_text(
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n")
    now = [0.0]
    host = HostSampler(2.0, proc_root=str(tmp_path), clock=lambda: now[0])
    assert (host.memory_total, host.memory_used, host.utilization) == (1024000.0, 768000.0, 0.0)
    # busy +30 (user 20, system 10), idle +70 (idle 60, iowait 10): 0.3
    (tmp_path / "stat").write_text("cpu  120 0 110 760 110 0 0 0 0 0\n")
    now[0] = 1.0
    host.refresh()
    assert host.utilization == 0.0  # inside the interval: last values
    now[0] = 2.5
    host.refresh()
    assert host.utilization == pytest.approx(0.3)


# -- MetricsConfig -----------------------------------------------------------------


def test_metrics_config_defaults_and_settings():
    c = MetricsConfig.from_cli(http_address="10.0.0.1")
    assert (c.allow_metrics, c.allow_cpu_metrics, c.allow_gpu_metrics) == (True, True, True)
    assert (c.metrics_address, c.metrics_port, c.metrics_interval_ms) == ("10.0.0.1", 8002, 2000.0)
    assert c.counter_latencies and not c.summary_latencies and not c.histogram_latencies
    assert c.summary_quantiles == DEFAULT_SUMMARY_QUANTILES
    c = MetricsConfig.from_cli(metrics_address="127.0.0.1", metrics_config=[
        "counter_latencies=false", "summary_latencies=true",
        "summary_quantiles=0.1:0.0.1,0.7:0.01"])
    assert c.metrics_address == "127.0.0.1"
    assert not c.counter_latencies and c.summary_latencies
    # Triton reads numbers with std::stod, so its own test's "0.0.1" is 0.0.
    assert c.summary_quantiles == ((0.1, 0.0), (0.7, 0.01))


@pytest.mark.parametrize("item, message", [
    ("no_such=true", "unknown setting 'no_such'"),
    ("counter_latencies", "format is <setting>=<value>. Got counter_latencies"),
    ("=true", "format is <setting>=<value>"),
    ("counter_latencies=", "format is <setting>=<value>"),
    ("group,counter_latencies=true", "format is <setting>=<value>"),
    ("counter_latencies=maybe", "expected true or false"),
    ("summary_quantiles=0.5", "is not <quantile>:<error>"),
    ("summary_quantiles=1.5:0.01", "not in [0, 1]"),
])
def test_metrics_config_errors_are_clear(item, message):
    with pytest.raises(MetricsConfigError, match=re.escape(message)):
        MetricsConfig.from_cli(metrics_config=[item])


def test_metrics_config_from_argparse():
    import argparse

    from pyserver.frontends.metrics import add_cli_arguments
    parser = argparse.ArgumentParser()
    parser.add_argument("--http-address", default="0.0.0.0")
    add_cli_arguments(parser)
    args = parser.parse_args(["--metrics-port", "9002", "--allow-cpu-metrics", "false",
                              "--metrics-interval-ms", "500", "--metrics-config",
                              "counter_latencies=false", "--http-address", "127.0.0.2"])
    c = MetricsConfig.from_args(args)
    assert (c.metrics_port, c.allow_cpu_metrics, c.metrics_interval_ms) == (9002, False, 500.0)
    assert c.metrics_address == "127.0.0.2" and not c.counter_latencies
    with pytest.raises(MetricsConfigError, match="--metrics-port"):
        MetricsConfig.from_cli(metrics_port=70000)
    with pytest.raises(MetricsConfigError, match="--metrics-interval-ms"):
        MetricsConfig.from_cli(metrics_interval_ms=0)


# -- end to end: a real server, real traffic, a real scrape ------------------------


class GateBackend:
    """OUT = IN. Raises on a negative input; 999 holds the instance until released."""

    started = threading.Event()
    release = threading.Event()

    def __init__(self, model_path, config, instance_name, device, threads):
        pass

    def execute(self, inputs):
        x = inputs["IN"]
        if (x < 0).any():
            raise ValueError("negative input")
        if (x == 999).any():
            GateBackend.started.set()
            GateBackend.release.wait(10)
        return {"OUT": x.copy()}


GATE_CONFIG = """
name: "gate"
backend: "metrics_gate"
default_model_filename: "model"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 default_timeout_microseconds: 10000000
                                          allow_timeout_override: true } }
"""


@pytest.fixture
def served(tmp_path, start_server):
    register_backend("metrics_gate", GateBackend)
    GateBackend.started = threading.Event()
    GateBackend.release = threading.Event()
    write_add_sub(tmp_path, "add_sub", size=4, max_batch_size=8,
                  extra='metric_tags { key: "team" value: "vision" }')
    write_add_sub(tmp_path, "cached", size=4, max_batch_size=8,
                  extra="response_cache { enable: true }")
    gate = tmp_path / "gate"
    (gate / "1").mkdir(parents=True)
    (gate / "1" / "model").write_text("")
    (gate / "config.pbtxt").write_text(GATE_CONFIG)
    s = start_server(tmp_path)
    metrics = MetricsFrontend(s.server, MetricsConfig.from_cli(
        metrics_address="127.0.0.1", metrics_port=0))
    s.call(metrics.start())
    yield s, metrics
    GateBackend.release.set()
    s.call(metrics.stop())


def add_sub(url, batch):
    client = httpclient.InferenceServerClient(url)
    a = np.arange(4 * batch, dtype=np.float32).reshape(batch, 4)
    inputs = [httpclient.InferInput("INPUT0", [batch, 4], "FP32"),
              httpclient.InferInput("INPUT1", [batch, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    out = client.infer("add_sub", inputs).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, a + a)


def gate(url, v, **kwargs):
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("IN", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[v]], np.float32))
    return client.infer("gate", [inp], **kwargs).as_numpy("OUT")[0][0]


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_scrape_after_known_traffic(served):
    s, metrics = served
    for batch in (1, 2, 1):
        add_sub(s.url, batch)
    assert gate(s.url, 1.0) == 1.0
    with pytest.raises(InferenceServerException) as err:
        gate(s.url, -1.0)  # reaches the backend and fails there
    assert err.value.status() == "500"

    gate_labels = {"model": "gate", "version": "1"}
    with ThreadPoolExecutor(2) as pool:
        busy = pool.submit(gate, s.url, 999.0)  # holds the only instance
        assert GateBackend.started.wait(10)
        # Waits in the queue's one slot and times out there after 50 ms:
        # Triton counts that as a failure with reason REJECTED.
        queued = pool.submit(gate, s.url, 2.0, timeout=50_000)
        assert wait_for(lambda: value(parse(scrape(metrics.port)),
                                      "nv_inference_pending_request_count", **gate_labels) == 1)
        with pytest.raises(InferenceServerException) as err:
            gate(s.url, 3.0)  # queue full: refused at enqueue, not counted (as Triton)
        assert err.value.status() == "503" and "Exceeds maximum queue size" in err.value.message()
        time.sleep(0.15)
        GateBackend.release.set()
        assert busy.result(10) == 999.0
        with pytest.raises(InferenceServerException) as err:
            queued.result(10)
        assert err.value.status() == "503" and "Request timeout expired" in err.value.message()

    text = scrape(metrics.port)
    samples = parse(text)
    tagged = {"_team": "vision", "model": "add_sub", "version": "1"}
    assert value(samples, "nv_inference_request_success", **tagged) == 3
    assert value(samples, "nv_inference_count", **tagged) == 4
    assert value(samples, "nv_inference_exec_count", **tagged) == 3
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        assert value(samples, "nv_inference_request_failure", reason=reason, **tagged) == 0
    assert value(samples, "nv_inference_pending_request_count", **tagged) == 0
    assert value(samples, "nv_inference_request_duration_us", **tagged) > 0
    assert value(samples, "nv_inference_compute_infer_duration_us", **tagged) > 0
    for name in ("queue", "compute_input", "compute_output"):
        assert value(samples, f"nv_inference_{name}_duration_us", **tagged) >= 0
    assert value(samples, "nv_model_load_duration_secs", **tagged) > 0

    g = gate_labels
    assert value(samples, "nv_inference_request_success", **g) == 2  # 1.0 and 999
    assert value(samples, "nv_inference_request_failure", reason="BACKEND", **g) == 1
    assert value(samples, "nv_inference_request_failure", reason="REJECTED", **g) == 1
    assert value(samples, "nv_inference_request_failure", reason="CANCELED", **g) == 0
    assert value(samples, "nv_inference_request_failure", reason="OTHER", **g) == 0
    assert value(samples, "nv_inference_count", **g) == 2  # the failed batch is not counted
    assert value(samples, "nv_inference_exec_count", **g) == 2
    assert value(samples, "nv_inference_pending_request_count", **g) == 0
    # 999 was held >= 150 ms inside the backend.
    assert value(samples, "nv_inference_request_duration_us", **g) >= 150_000
    assert value(samples, "nv_inference_compute_infer_duration_us", **g) >= 150_000
    assert value(samples, "nv_inference_queue_duration_us", **g) >= 0

    # Cache counters for the model with response_cache only.
    c = {"model": "cached", "version": "1"}
    assert value(samples, "nv_cache_num_hits_per_model", **c) == 0
    assert value(samples, "nv_cache_num_misses_per_model", **c) == 0
    assert not any(k[0].startswith("nv_cache") and ("model", "cached") not in k[1]
                   for k in samples)

    assert value(samples, "nv_cpu_memory_total_bytes") > 0
    assert 0 < value(samples, "nv_cpu_memory_used_bytes") <= value(
        samples, "nv_cpu_memory_total_bytes")
    assert 0 <= value(samples, "nv_cpu_utilization") <= 1
    assert value(samples, "nv_pinned_memory_pool_total_bytes") == 0
    # The line format tests grep for.
    assert 'nv_inference_pending_request_count{model="gate",version="1"} 0' in text.splitlines()
    assert "# TYPE nv_inference_request_success counter" in text.splitlines()


def test_wrong_path_and_method(served):
    _, metrics = served
    base = f"http://127.0.0.1:{metrics.port}"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/v2/health/ready", timeout=10)
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x"), timeout=10)
    assert err.value.code == 405
    with urllib.request.urlopen(base + "/metrics?name=x", timeout=10) as r:
        assert b"nv_inference_request_success" in r.read()


def test_keep_alive_serves_several_scrapes_on_one_connection(served):
    import http.client
    _, metrics = served
    conn = http.client.HTTPConnection("127.0.0.1", metrics.port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            assert r.status == 200 and b"nv_model_load_duration_secs" in r.read()
    finally:
        conn.close()


def test_cpu_metrics_can_be_turned_off(served):
    s, _ = served
    metrics = MetricsFrontend(s.server, MetricsConfig.from_cli(
        metrics_address="127.0.0.1", metrics_port=0, allow_cpu_metrics=False))
    s.call(metrics.start())
    try:
        text = scrape(metrics.port)
    finally:
        s.call(metrics.stop())
    assert "nv_cpu_" not in text
    assert 'nv_inference_request_success{_team="vision",model="add_sub",version="1"} 0' in text


def test_summary_latencies_are_published_from_engine_samples(tmp_path, start_server):
    write_add_sub(tmp_path, name="sm", extra="dynamic_batching { }")
    s = start_server(tmp_path, summary_latencies=True)
    client = httpclient.InferenceServerClient(s.url)
    a = np.ones((1, 16), np.float32)
    for _ in range(5):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        client.infer("sm", inputs)
    config = MetricsConfig.from_cli(metrics_config=["summary_latencies=true",
                                                    "summary_quantiles=0.5:0.05,0.99:0.001"])
    text = exposition_of(s.server, config)
    assert "# TYPE nv_inference_request_summary_us summary" in text
    assert re.search(r'nv_inference_request_summary_us_count\{model="sm",version="1"\} 5\n', text)
    p50 = float(re.search(
        r'nv_inference_queue_summary_us\{model="sm",version="1",quantile="0.5"\} (\S+)', text).group(1))
    total = float(re.search(r'nv_inference_request_summary_us_sum\{model="sm",version="1"\} (\S+)',
                            text).group(1))
    assert p50 >= 0 and total > 0
    assert 'quantile="0.99"' in text


def exposition_of(server, config):
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(server, config))
    return exposition(registry).decode()


# -- the first-response histogram (histogram_latencies=true) -------------------------

_BUCKETS_50MS = """model_metrics { metric_control [ {
  metric_identifier { family: "nv_inference_first_response_histogram_ms" }
  histogram_options { buckets: [ 10, 30000 ] } } ] }"""


def test_first_response_histogram(tmp_path, start_server):
    write_add_sub(tmp_path, name="fast", extra="dynamic_batching { }")
    # A lone request waits 50 ms for company: its first response lands in
    # the config's second bucket.
    write_add_sub(tmp_path, name="waits", extra=(
        "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 50000 }\n"
        + _BUCKETS_50MS))
    s = start_server(tmp_path, histogram_latencies=True, summary_latencies=True)
    client = httpclient.InferenceServerClient(s.url)
    infer_add_sub(client, 3, "fast")
    infer_add_sub(client, 2, "waits")
    client.close()
    config = MetricsConfig.from_cli(metrics_config=["histogram_latencies=true",
                                                    "summary_latencies=true"])
    text = exposition_of(s.server, config)
    samples = parse(text)
    name = "nv_inference_first_response_histogram_ms"
    assert f"# TYPE {name} histogram" in text
    assert f"# HELP {name} Duration from request to first response in milliseconds" in text
    # Triton's default buckets, cumulative, +Inf last; integer milliseconds
    fast = {"model": "fast", "version": "1"}
    assert value(samples, name + "_count", **fast) == 3
    assert value(samples, name + "_sum", **fast) < 3 * 5000
    counts = [value(samples, name + "_bucket", le=le, **fast)
              for le in ("100", "500", "2000", "5000", "+Inf")]
    assert counts == sorted(counts) and counts[-2:] == [3, 3]  # cumulative
    assert re.search(r'nv_inference_first_response_histogram_ms_bucket\{model="fast",'
                     r'version="1",le="\+Inf"\} 3\n', text)  # le last, as prometheus-cpp writes
    waits = {"model": "waits", "version": "1"}
    assert value(samples, name + "_count", **waits) == 2
    assert value(samples, name + "_sum", **waits) >= 2 * 50
    assert value(samples, name + "_bucket", le="10", **waits) == 0
    assert value(samples, name + "_bucket", le="30000", **waits) == 2
    assert value(samples, name + "_bucket", le="+Inf", **waits) == 2
    assert value(samples, name + "_bucket", le="100", **waits) is None
    # Triton's registry order: cache counters, this histogram, then the summaries
    assert text.index(f"# TYPE {name} ") < text.index("# TYPE nv_inference_request_summary_us ")
    assert text.index("# TYPE nv_model_load_duration_secs ") < text.index(f"# TYPE {name} ")

    # off by default: no family
    assert name not in exposition_of(s.server, MetricsConfig.from_cli())


def test_first_response_histogram_counts_a_decoupled_request_once(tmp_path, start_server):
    """A decoupled request counts once, when its first response is sent (its
    batch ended long before: mode "slow" answers from a thread, 50 ms apart)."""
    import shutil

    import tritonclient.grpc as grpcclient

    from pyserver.frontends.grpc import GrpcFrontend

    models = Path(__file__).resolve().parents[1] / "models" / "python"
    shutil.copytree(models / "repeat", tmp_path / "repeat")
    with open(tmp_path / "repeat" / "config.pbtxt", "a") as f:
        f.write(_BUCKETS_50MS + "\n")
    s = start_server(tmp_path, histogram_latencies=True)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{frontend.port}")
        got = queue.Queue()
        client.start_stream(lambda result, error: got.put((result, error)))
        for _ in range(2):
            inp = grpcclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([2], np.int32))
            client.async_stream_infer("repeat", [inp], parameters={"mode": "slow"})
        for _ in range(4):  # two responses per request
            result, error = got.get(timeout=30)
            assert error is None
        client.stop_stream()
        client.close()
        name = "nv_inference_first_response_histogram_ms"
        labels = {"model": "repeat", "version": "1"}
        for _ in range(100):  # the final flags follow the last responses
            samples = parse(exposition_of(s.server, MetricsConfig.from_cli(
                metrics_config=["histogram_latencies=true"])))
            if value(samples, "nv_inference_request_success", **labels) == 2:
                break
            time.sleep(0.02)
        assert value(samples, name + "_count", **labels) == 2  # requests, not responses
        assert value(samples, name + "_bucket", le="10", **labels) == 0
        assert value(samples, name + "_bucket", le="30000", **labels) == 2
        assert value(samples, name + "_sum", **labels) >= 2 * 50
    finally:
        s.call(frontend.stop(1))
