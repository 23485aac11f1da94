"""pyserver.EmbeddedServer: the blocking in-process API (no network), from
several threads at once, with Triton's errors; and infer_raw, the byte-level
form the C++ embedding API uses."""

import threading

import numpy as np
import pytest

import pyserver
from pyserver.kernel import dtypes
from pyserver.testing import write_add_sub


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    write_add_sub(repo, extra="dynamic_batching { }")
    with pyserver.EmbeddedServer(str(repo)) as server:
        yield server


def test_infer_with_numpy(embedded):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    out = embedded.infer("add_sub", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    only = embedded.infer("add_sub", {"INPUT0": a, "INPUT1": b}, outputs=["OUTPUT1"])
    assert list(only) == ["OUTPUT1"]
    assert embedded.is_ready() and embedded.model_ready("add_sub")
    assert embedded.model_config("add_sub")["max_batch_size"] == 8


def test_errors_are_tritons(embedded):
    a = np.zeros((1, 16), np.float32)
    with pytest.raises(pyserver.ServerError, match="Request for unknown model: 'nope' is not found"):
        embedded.infer("nope", {"INPUT0": a})
    with pytest.raises(pyserver.ServerError, match="expected 2 inputs but got 1 inputs"):
        embedded.infer("add_sub", {"INPUT0": a})


def test_threads_are_batched_together(embedded):
    errors = []

    def worker(k):
        try:
            for i in range(20):
                a = np.full((1, 16), k * 100 + i, np.float32)
                out = embedded.infer("add_sub", {"INPUT0": a, "INPUT1": a})
                assert (out["OUTPUT0"] == 2 * a).all()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    stats = embedded.statistics("add_sub")["model_stats"][0]
    assert stats["inference_count"] >= 160


def test_infer_raw_round_trip(embedded):
    a = np.arange(16, dtype=np.float32)
    raw = a.tobytes()
    out = embedded.infer_raw("add_sub", {"INPUT0": ("FP32", [1, 16], raw),
                                         "INPUT1": ("FP32", [1, 16], raw)})
    datatype, shape, data = out["OUTPUT0"]
    assert (datatype, shape) == ("FP32", [1, 16])
    np.testing.assert_array_equal(np.frombuffer(data, np.float32), 2 * a)
    assert dtypes.serialize_bytes_tensor(np.array([b"x"], dtype=object)) == b"\x01\x00\x00\x00x"
