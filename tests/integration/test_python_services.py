"""What a Python model asks of the server besides inference: custom
metrics (pb_utils.MetricFamily / Metric, scraped from /metrics) and model
control (pb_utils.load_model / unload_model / is_model_ready)."""

import json
import shutil
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pyserver.frontends.metrics import MetricsConfig
from pyserver.frontends.metrics.endpoint import MetricsFrontend
from tests.integration.conftest import use_execution_mode
from tests.integration.test_metrics import parse, value

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


def run(url, data, **params):
    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("IN", [len(data)], "FP32")
    inp.set_data_from_numpy(np.array(data, np.float32))
    result = client.infer("control", [inp], parameters=params or None)
    return result.as_numpy("OUT").tolist(), [n.decode() for n in result.as_numpy("NOTE")]


@pytest.fixture
def control(tmp_path, start_server, python_mode):
    repo = tmp_path / "models"
    repo.mkdir()
    for name in ("control", "add_sub"):
        shutil.copytree(MODELS / name, repo / name)
    use_execution_mode(repo, python_mode)
    s = start_server(repo, model_control_mode="explicit", load_models=["control"])
    metrics = MetricsFrontend(s.server, MetricsConfig.from_cli(
        metrics_address="127.0.0.1", metrics_port=0))
    s.call(metrics.start())
    s.metrics = metrics
    yield s
    s.call(metrics.stop())


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def test_custom_metrics_on_the_metrics_endpoint(control):
    out, notes = run(control.url, [0.5, 5.0, 50.0, 500.0])
    assert out == [1.0, 4.0]
    out, _ = run(control.url, [2.0])
    assert out == [2.0, 1.0]
    text = scrape(control.metrics.port)
    samples = parse(text)
    labels = {"model": "control", "version": "1"}
    assert "# HELP control_requests Requests the control model executed" in text
    assert "# TYPE control_requests counter" in text
    assert "# TYPE control_last_size gauge" in text
    assert "# TYPE control_values histogram" in text
    assert value(samples, "control_requests", **labels) == 2
    assert value(samples, "control_last_size", **labels) == 1
    assert value(samples, "control_values_count", **labels) == 5
    assert value(samples, "control_values_sum", **labels) == 557.5
    buckets = {le: value(samples, "control_values_bucket", le=le, **labels)
               for le in ("1", "10", "100", "+Inf")}
    assert buckets == {"1": 1, "10": 3, "100": 4, "+Inf": 5}
    # what each kind refuses, with Triton's texts
    assert notes == [
        "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be "
        "incremented monotonically by non-negative values.",
        "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
        "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
        "Failed to observe metric value: TRITONSERVER_METRIC_KIND_GAUGE does not support Observe",
        "Error when creating MetricFamily: Invalid metric name: 'bad name'",
        "Failed to create metric. Missing required buckets.",
        "Failed to create metric. Unexpected buckets found.",
    ]
    # unloading the model takes its metrics off the endpoint
    control.call(control.server.unload_model("control"))
    assert "control_requests" not in scrape(control.metrics.port)


def test_model_control_from_a_model(control):
    out, notes = run(control.url, [0], op="ready", target="add_sub")
    assert out == [0.0] and notes == []
    out, notes = run(control.url, [0], op="load", target="add_sub")
    assert notes == []
    out, _ = run(control.url, [0], op="ready", target="add_sub")
    assert out == [1.0]
    assert httpclient.InferenceServerClient(control.url).is_model_ready("add_sub")
    out, _ = run(control.url, [0], op="ready", target="add_sub", version="2")
    assert out == [0.0]
    out, notes = run(control.url, [0], op="ready", target="add_sub", version="x")
    assert notes[0].startswith("Failed to check model readiness: failed to get model version "
                               "from specified version string 'x'")
    # a model made from a config and files sent by the model
    source = (MODELS / "add_sub" / "1" / "model.py").read_text()
    config = json.dumps({"backend": "python",
                         "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                                   {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
                         "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                                    {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}]})
    out, notes = run(control.url, [0], op="load", target="made", config=config, file=source)
    assert notes == []
    client = httpclient.InferenceServerClient(control.url)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones(4, np.float32))
    assert client.infer("made", inputs).as_numpy("OUTPUT0").tolist() == [2, 2, 2, 2]
    out, notes = run(control.url, [0], op="unload", target="add_sub")
    assert notes == []
    assert not client.is_model_ready("add_sub")
    out, notes = run(control.url, [0], op="load", target="missing")
    assert len(notes) == 1 and notes[0].startswith("Failed to load model: ")
    assert "missing" in notes[0]
