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


def test_a_programs_trace_turns_tracing_on_until_it_goes_back():
    """A request carrying a program's trace (TRITONSERVER_InferenceTraceNew)
    is traced with server-side tracing off: the tracer is active from before
    its submit until its record goes back to the program, and a child of it
    reports to the same program without ending that hold. A trace that got
    no record (the request was refused before its queue) goes back at once.
    (A bare reference names no program: what it reports is dropped by the
    library's callback thread; tests/integration/test_c_api_server.py checks
    what a real program receives.)"""
    from pyserver.engine.triton_bls import ProgramTraceRef, drain

    t = tracing.Tracer(TraceSettings())
    t.refresh([])
    changes = []
    t.on_change = lambda: (changes.append(t._programs), t.refresh([]))
    assert not t.active
    ref = ProgramTraceRef.__new__(ProgramTraceRef)
    t.program_begun()
    assert t.active and changes == [1]
    own = t.start("ensemble", 1, 10, InferRequest("ensemble", id="r", parent_trace=ref))
    assert ref.recorded and "_file" not in own
    t.program_settled(ref)  # recorded: it goes back when it finishes
    child = t.start("step", 1, 11, InferRequest("step", parent_trace=own["id"]))
    assert child["parent_id"] == own["id"] and child["_program"] is ref
    t.finish(child, 20)
    assert t.active  # the program's own trace is still out
    t.finish(own, 30)
    assert not t.active and changes == [1, 0]
    t.flush()  # nothing of a program's goes to a file

    refused = ProgramTraceRef.__new__(ProgramTraceRef)
    t.program_begun()
    t.program_settled(refused)
    assert refused.recorded and not t.active and changes == [1, 0, 1, 0]
    drain()
