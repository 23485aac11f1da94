"""bench/loop_instructions.py: the requests it sends and the dump it reads
(no valgrind, no server)."""

import json

import numpy as np
import pytest

from bench.loop_instructions import (
    grpc_request,
    http_request,
    instructions,
    print_splits,
    split_per_batch,
    summary,
)
from pyserver._proto import message_class


def test_http_requests_as_json_and_as_perf_analyzer_sends_them():
    body, headers = http_request("add_sub_dyn", binary=False)
    doc = json.loads(body)
    assert headers == {"Content-Type": "application/json"}
    assert [(t["name"], t["shape"], t["data"][:3]) for t in doc["inputs"]] == [
        ("INPUT0", [1, 16], [0.0, 1.0, 2.0]), ("INPUT1", [1, 16], [0.0, 1.0, 2.0])]
    body, headers = http_request("add_sub", binary=True)
    hlen = int(headers["Inference-Header-Content-Length"])
    doc = json.loads(body[:hlen])
    assert [t["shape"] for t in doc["inputs"]] == [[16], [16]]  # unbatched
    assert all(t["parameters"] == {"binary_data_size": 64} for t in doc["inputs"])
    assert doc["id"] == ""
    assert doc["outputs"] == [{"name": n, "parameters": {"binary_data": True}}
                              for n in ("OUTPUT0", "OUTPUT1")]
    raw = np.frombuffer(body[hlen:], np.float32)
    np.testing.assert_array_equal(raw, np.concatenate([np.arange(16)] * 2))


def test_grpc_request_carries_raw_contents():
    request = message_class("inference.ModelInferRequest").FromString(
        grpc_request("add_sub_dyn"))
    assert request.model_name == "add_sub_dyn"
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("INPUT0", "FP32", [1, 16]), ("INPUT1", "FP32", [1, 16])]
    assert [len(c) for c in request.raw_input_contents] == [64, 64]


def test_a_dump_is_read_for_its_summary(tmp_path):
    dump = tmp_path / "callgrind.42.3"
    dump.write_text("version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 123456\n"
                    "totals: 130000\n")
    assert summary(dump) == 123456
    assert instructions(tmp_path, 42) == 123456
    (tmp_path / "callgrind.7.1").write_text("events: Ir\n")
    with pytest.raises(RuntimeError, match="no summary"):
        summary(tmp_path / "callgrind.7.1")


def test_cells_split_into_a_cost_per_request_and_one_per_batch():
    """a + b / batch recovered from cells made of it; none from one batch size."""
    cells = [(60_000 + 32_000 / n, n) for n in (1.0, 1.9, 4.0, 7.6)]
    a, b = split_per_batch(cells)
    assert a == pytest.approx(60_000) and b == pytest.approx(32_000)
    assert split_per_batch([(90_000, 1.0), (91_000, 1.0)]) is None
    assert split_per_batch([(90_000, 1.0)]) is None
    rows = [{"system": "pyserver", "model": "m", "protocol": "http", "batch_size": n,
             "instructions_per_request": 50_000 + 20_000 / n,
             "worker_instructions_per_request": 30_000 + 24_000 / n} for n in (1.0, 4.0)]
    rows.append({"system": "pyserver", "model": "m", "protocol": "grpc", "batch_size": 1.0,
                 "instructions_per_request": 1})
    assert print_splits(rows) == [
        {"system": "pyserver", "model": "m", "protocol": "http", "process": "server",
         "per_request": 50_000, "per_batch": 20_000},
        {"system": "pyserver", "model": "m", "protocol": "http", "process": "workers",
         "per_request": 30_000, "per_batch": 24_000}]
