"""The tracer's bookkeeping of open traces: what a child may name, what a
refused request leaves, and the bound on traces never finished."""

import json

from pyserver.kernel.types import InferRequest
from pyserver.runtime import tracing
from pyserver.runtime.settings import TraceSettings


def tracer(tmp_path) -> tracing.Tracer:
    settings = TraceSettings()
    settings.update(None, {"trace_file": str(tmp_path / "t.json"), "trace_level": ["TIMESTAMPS"],
                           "trace_rate": "1", "trace_count": "-1", "log_frequency": "0"})
    t = tracing.Tracer(settings)
    t.refresh([])
    return t


def test_children_name_an_open_parent_only(tmp_path):
    t = tracer(tmp_path)
    parent = t.start("ensemble", 1, 10, InferRequest("ensemble", id="r"))
    child = t.start("step", 1, 11, InferRequest("step", id="r", parent_trace=parent["id"]))
    assert child["parent_id"] == parent["id"] and child["id"] != parent["id"]
    assert t.start("step", 1, 12, InferRequest("step", parent_trace=0)) is None  # untraced
    t.finish(child, 20)
    t.finish(parent, 30)
    # the parent is over: a late child is not traced
    assert t.start("step", 1, 40, InferRequest("step", parent_trace=parent["id"])) is None
    t.flush()
    written = json.loads((tmp_path / "t.json").read_text())
    assert [w["id"] for w in written] == [child["id"], parent["id"]]
    assert list(written[0])[:5] == ["id", "model_name", "model_version", "request_id",
                                    "parent_id"]


def test_a_discarded_trace_is_neither_open_nor_written(tmp_path):
    t = tracer(tmp_path)
    record = t.start("m", 1, 10, InferRequest("m"))
    t.discard(record)
    assert t.start("step", 1, 11, InferRequest("step", parent_trace=record["id"])) is None
    t.flush()
    assert not (tmp_path / "t.json").exists()


def test_traces_never_finished_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(tracing, "MAX_OPEN", 3)
    t = tracer(tmp_path)
    records = [t.start("m", 1, i, InferRequest("m")) for i in range(5)]
    assert len(t._open) == 3  # the oldest went
    assert t.start("s", 1, 9, InferRequest("s", parent_trace=records[0]["id"])) is None
    assert t.start("s", 1, 9, InferRequest("s", parent_trace=records[4]["id"])) is not None


def test_a_trace_ending_in_two_parts_stays_open_until_the_second(tmp_path):
    """A decoupled request's trace: open for children after its batch
    completes, ended (REQUEST_END, written) by the second finish."""
    t = tracer(tmp_path)
    parent = t.start("decoupled", 1, 10, InferRequest("decoupled", id="r"))
    t.end_in_two_parts(parent)
    t.finish(parent, 20)  # its batch completed; the model still works
    child = t.start("step", 1, 21, InferRequest("step", parent_trace=parent["id"]))
    assert child is not None and child["parent_id"] == parent["id"]
    t.finish(child, 25)
    t.finish(parent, 30)  # its final response
    assert t.start("step", 1, 40, InferRequest("step", parent_trace=parent["id"])) is None
    t.flush()
    written = {w["id"]: w for w in json.loads((tmp_path / "t.json").read_text())}
    ends = [s["ns"] for s in written[parent["id"]]["timestamps"] if s["name"] == "REQUEST_END"]
    assert ends == [30] and child["id"] in written
