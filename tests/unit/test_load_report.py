"""The ORCA endpoint load report (frontends/load_report.py) from the custom
metric store, as Triton's orca_http.cc derives it."""

import json

from pyserver.frontends.load_report import KV_CACHE_FAMILY, load_report
from pyserver.runtime.custom_metrics import CustomMetrics

GAUGE = 1


def store(**blocks):
    metrics = CustomMetrics()
    family = metrics.new_family(KV_CACHE_FAMILY, "kv", GAUGE, owner="m")
    for kind, value in blocks.items():
        metric = metrics.new_metric(family, {"kv_cache_block_type": kind}, None, owner="m")
        metrics.operate(metric, "set", value)
    return metrics


def test_json_and_text():
    metrics = store(tokens_per=32, used=3, max=12)
    got = load_report(b"json", metrics)
    assert got.startswith(b"JSON ")
    assert json.loads(got[5:]) == {"named_metrics": {"kv_cache_utilization": 0.25,
                                                     "max_token_capacity": 384}}
    assert load_report(b"text", metrics) == (
        b"TEXT named_metrics.kv_cache_utilization=0.250000, "
        b"named_metrics.max_token_capacity=384")
    assert load_report(None, metrics) is None


def test_no_blocks_means_no_header(caplog):
    with caplog.at_level("ERROR", logger="pyserver"):
        assert load_report(b"json", CustomMetrics()) is None
        assert load_report(b"json", store(tokens_per=32, used=3)) is None
        assert load_report(b"json", None) is None
    assert "One or more of the kv metrics was not found or invalid." in caplog.text
    assert "no header written. orca_type=json" in caplog.text


def test_zero_blocks_is_zero_utilization_and_negatives_are_not_read():
    got = load_report(b"json", store(tokens_per=16, used=0, max=0))
    assert json.loads(got[5:])["named_metrics"] == {"kv_cache_utilization": 0.0,
                                                    "max_token_capacity": 0}
    assert load_report(b"json", store(tokens_per=16, used=-1, max=4)) is None


def test_other_families_and_labels_are_ignored():
    metrics = store(tokens_per=8, used=1, max=2)
    other = metrics.new_family("my_gauge", "", GAUGE, owner="m")
    metrics.operate(metrics.new_metric(other, {"kv_cache_block_type": "used"}, None, "m"),
                    "set", 2)
    family = metrics.new_family(KV_CACHE_FAMILY, "kv", GAUGE, owner="m")
    metrics.operate(metrics.new_metric(family, {"kind": "used"}, None, "m"), "set", 2)
    assert json.loads(load_report(b"json", metrics)[5:])["named_metrics"][
        "kv_cache_utilization"] == 0.5
