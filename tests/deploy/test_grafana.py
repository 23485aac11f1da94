"""deploy/grafana: the dashboard is well-formed Grafana JSON and every
metric and label it queries is one pyserver exports (a live scrape, with the
response cache on; the GPU families, absent without a GPU, from the GPU
collector's own table)."""

import json
import re
import time

import tritonclient.http as httpclient

from pyserver.frontends.metrics.gpu import GPU_FAMILIES
from pyserver.testing import write_add_sub
from tests.ports import free_ports

from .manifests import DEPLOY, parse_promql
from .test_runtime_commands import COMMAND, Process, _infer

DASHBOARD = DEPLOY / "grafana" / "pyserver-dashboard.json"
METRIC = re.compile(r"\b(nv_[a-z0-9_]+)")
# labels a query groups or filters by (the {{...}} of a legend too)
LABEL = re.compile(r"(?:by \(|\{\{|,|\{)\s*([a-z_]+)\s*(?:=~|=|\)|\}\}|,)")
# what Prometheus' service discovery adds to every scraped series
TARGET_LABELS = {"namespace", "pod"}


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _queries(dashboard: dict):
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            yield target["expr"], target.get("legendFormat", "")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"], ""


def test_dashboard_structure():
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in _panels(dashboard):
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            for name in re.findall(r"\$(\w+)", expr):
                assert name in variables or name.startswith("__"), (name, expr)
            # as Prometheus parses it, each variable at its "All" value
            parse_promql(expr, {f"${name}": variables[name].get("allValue", ".*")
                                for name in variables if name != "datasource"})
    # the panels the brief names
    exprs = "\n".join(e for e, _ in _queries(dashboard))
    assert "nv_inference_count" in exprs and "nv_inference_exec_count" in exprs  # batch size
    assert 'sum by (model, reason) (rate(nv_inference_request_failure' in exprs
    for name in ("nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_cache_num_hits_per_model", "nv_gpu_utilization"):
        assert name in exprs


def test_dashboard_metrics_are_exported(tmp_path):
    write_add_sub(tmp_path / "models", extra="response_cache { enable: true }")
    http, grpc, metrics = free_ports(3)
    server = Process([*COMMAND, f"--model-repository={tmp_path / 'models'}", f"--http-port={http}",
                      f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--http-address=127.0.0.1",
                      "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
                      "--cache-config=local,size=1048576"], tmp_path / "server.log")
    try:
        server.wait_for(http, "/v2/health/ready")
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        _infer(client)
        _infer(client)  # a cache hit
        deadline = time.monotonic() + 30
        while True:
            status, body = server.get(metrics, "/metrics")
            text = body.decode()
            if "nv_cache_num_hits_per_model{" in text:
                break
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
    finally:
        server.close()
    exported = set(re.findall(r"^# TYPE (\S+) ", text, re.M)) | {name for name, _ in GPU_FAMILIES}
    labels = set(re.findall(r"[{,]([a-z_]+)=\"", text)) | {"gpu_uuid"} | TARGET_LABELS
    for expr, legend in _queries(_dashboard()):
        for name in METRIC.findall(expr):
            assert name in exported, f"{name} (in {expr}) is not a metric pyserver exports"
        for label in LABEL.findall(expr + " " + legend):
            assert label in labels, f"label {label} (in {expr} {legend}) is not one pyserver exports"
