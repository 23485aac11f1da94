"""The autoscaling rule and the dashboard, evaluated by Prometheus itself
(Debian's prometheus package, unpacked into build/prometheus by `make
prometheus-tools`; these tests skip where it is missing):

- promtool's rule tests evaluate the prometheus-adapter rule's query, as the
  adapter sends it for a pod, on synthetic counters with a known answer;
- a Prometheus server scrapes a real pyserver whose requests wait in a
  batching queue, and answers the rule's query and every dashboard query.
"""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import tritonclient.http as httpclient
import yaml

from pyserver.testing import write_add_sub
from tests.ports import free_ports

from .manifests import DEPLOY, PROMQL_STANDINS, ROOT, load_one
from .test_runtime_commands import COMMAND, Process, _infer


def _tool(name: str) -> str:
    path = ROOT / "build" / "prometheus" / "usr" / "bin" / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is missing (make prometheus-tools unpacks it into build/prometheus)")
    return found


def _rule() -> dict:
    (rule,) = load_one(DEPLOY / "helm" / "prometheus-adapter-values.yaml")["rules"]["custom"]
    return rule


def _adapter_query(namespace: str, pod_regex: str) -> str:
    """The rule's metricsQuery as prometheus-adapter sends it for the pods of
    one namespace, grouped by pod."""
    return (_rule()["metricsQuery"]
            .replace("<<.LabelMatchers>>", f'namespace="{namespace}",pod=~"{pod_regex}"')
            .replace("<<.GroupBy>>", "pod"))


def test_adapter_rule_on_synthetic_counters(tmp_path):
    """Pod p-1 serves two models: a answers 4 requests/s that wait 1000 us
    each, b 4/s that do not wait: 500 us on average. Pod p-2 is idle: 0, not
    NaN. (Samples every 15 s, as Prometheus' default scrape interval.)"""
    promtool = _tool("promtool")
    series = [
        ('nv_inference_queue_duration_us{namespace="ml",pod="p-1",model="a",version="1"}', "0+60000x20"),
        ('nv_inference_request_success{namespace="ml",pod="p-1",model="a",version="1"}', "0+60x20"),
        ('nv_inference_queue_duration_us{namespace="ml",pod="p-1",model="b",version="1"}', "0+0x20"),
        ('nv_inference_request_success{namespace="ml",pod="p-1",model="b",version="1"}', "0+60x20"),
        ('nv_inference_queue_duration_us{namespace="ml",pod="p-2",model="a",version="1"}', "5+0x20"),
        ('nv_inference_request_success{namespace="ml",pod="p-2",model="a",version="1"}', "7+0x20"),
        # another namespace's pod is not in the answer
        ('nv_inference_queue_duration_us{namespace="other",pod="p-1",model="a",version="1"}', "0+9x20"),
        ('nv_inference_request_success{namespace="other",pod="p-1",model="a",version="1"}', "0+1x20"),
    ]
    tests = {"rule_files": [], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "promql_expr_test": [{
            "expr": _adapter_query("ml", "p-.*"), "eval_time": "4m",
            "exp_samples": [{"labels": '{pod="p-1"}', "value": 500}, {"labels": '{pod="p-2"}', "value": 0}],
        }],
    }]}
    path = tmp_path / "adapter_rule_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def _query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads((DEPLOY / "grafana" / "pyserver-dashboard.json").read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for key, value in {**PROMQL_STANDINS, "$namespace": ".*", "$pod": ".*", "$model": ".*"}.items():
                expr = expr.replace(key, value)
            out.append((panel["title"], expr))
    return out


def test_live_prometheus_scrapes_pyserver(tmp_path):
    prometheus = _tool("prometheus")
    # a model whose requests wait for a batch: 20 ms in the queue each
    write_add_sub(tmp_path / "models", extra="dynamic_batching { max_queue_delay_microseconds: 20000 "
                                             "preferred_batch_size: [ 8 ] }")
    http, grpc, metrics, web = free_ports(4)
    server = Process([*COMMAND, f"--model-repository={tmp_path / 'models'}", f"--http-port={http}",
                      f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--http-address=127.0.0.1",
                      "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"], tmp_path / "server.log")
    # the labels a ServiceMonitor's scrape gives the series
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "pyserver", "metrics_path": "/metrics",
                                  "static_configs": [{"targets": [f"127.0.0.1:{metrics}"],
                                                      "labels": {"namespace": "serving", "pod": "pyserver-0"}}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prom = Process([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web}"],
                   tmp_path / "prometheus.log")
    try:
        server.wait_for(http, "/v2/health/ready")
        prom.wait_for(web, "/-/ready")
        # Prometheus hands new targets to its scrapers every few seconds:
        # the first sample, before the traffic
        deadline = time.monotonic() + 60
        while not _query(web, 'up{job="pyserver"} == 1'):
            assert time.monotonic() < deadline, prom.output()
            time.sleep(0.2)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
        # requests over a few scrapes, one at a time: each waits out the queue delay
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            _infer(client)
        time.sleep(2.5)  # the last counts scraped
        (sample,) = _query(web, _adapter_query("serving", "pyserver-.*"))
        assert sample["metric"] == {"pod": "pyserver-0"}
        average_us = float(sample["value"][1])
        assert 15000 <= average_us <= 200000, average_us  # about the 20 ms delay
        # every dashboard query runs; those over what this server exports
        # (no GPU, no response cache here) have an answer
        empty_ok = ("GPU", "Cache")
        for title, expr in _dashboard_queries():
            result = _query(web, expr)
            if not title.startswith(empty_ok):
                assert result, f"{title}: {expr} answered nothing"
    finally:
        prom.close()
        server.close()
