"""The compiled batch path of a plain model (engine/batch_execution.pyx) and
the answering of a finished batch (engine/settle.pyx: the cut, the ledger,
each future settled), each against what ModelVersion and Server did in
Python."""

import asyncio

import numpy as np
import pytest

from pyserver.engine import CompletionQueue, ModelStats, Scheduler, now_ns
from pyserver.engine.admission import Ledger
from pyserver.engine.batch_execution import InlineBatches, NamedRun, gather_inputs, run_plain
from pyserver.engine.settle import Answers, settle
from pyserver.engine.types import ImmediateFuture, PendingRequest
from pyserver.kernel.errors import Code, ServerError


class Model:
    """What the compiled path asks of a ModelVersion."""

    def __init__(self):
        self.checked = []
        self.gathered_each = 0

    def _gather_each(self, requests):
        self.gathered_each += 1
        return {name: np.concatenate([p.arrays[name] for p in requests])
                for name in requests[0].arrays}

    def _check_outputs(self, outputs, total):
        self.checked.append(total)
        raise ServerError(Code.INTERNAL, f"output has batch dimension, expected {total}")

    @staticmethod
    def batch_error(err):
        if isinstance(err, ServerError):
            return int(err.code), err.message
        return int(Code.INTERNAL), f"{type(err).__name__}: {err}"


def pending(value, future=None):
    return PendingRequest(None, future if future is not None else ImmediateFuture(),
                          {"X": np.array([[value]], dtype=np.float32)}, 1)


def dynamic(max_batch_size=8):
    stats = ModelStats()
    return Scheduler.dynamic({"max_batch_size": max_batch_size}, stats, CompletionQueue()), stats


def test_gather_inputs_lone_request_is_not_copied_and_objects_go_to_the_model():
    model = Model()
    one = pending(1.0)
    assert gather_inputs([one], model._gather_each) is one.arrays
    both = gather_inputs([pending(1.0), pending(2.0)], model._gather_each)
    assert both["X"].ravel().tolist() == [1.0, 2.0] and model.gathered_each == 0
    words = [PendingRequest(None, None, {"S": np.array([b"a"], dtype=object)}, 1),
             PendingRequest(None, None, {"S": np.array([b"b"], dtype=object)}, 1)]
    assert gather_inputs(words, model._gather_each)["S"].tolist() == [b"a", b"b"]
    assert model.gathered_each == 1  # BYTES: the model's own gather


def test_run_plain_times_outputs_and_the_models_errors():
    sched, _ = dynamic()
    model = Model()
    for v in (1.0, 2.0):
        sched.enqueue(pending(v), 1)
    batch = sched.try_next_batch()
    before = now_ns()
    start, input_end, output_start, end, code, message = run_plain(
        batch, lambda inputs: {"Y": inputs["X"] * 2}, model, sched, True)
    assert before <= start <= input_end <= output_start <= end and code == 0 and message == ""
    assert batch.outputs["Y"].ravel().tolist() == [2.0, 4.0] and batch.model is model
    # a batch dimension that is not the batch's: the model's own text
    sched.enqueue(pending(3.0), 1)
    batch = sched.try_next_batch()
    *_, code, message = run_plain(batch, lambda inputs: {"Y": np.zeros((3, 1))}, model, sched,
                                  True)
    assert (code, message) == (int(Code.INTERNAL), "output has batch dimension, expected 1")
    assert batch.outputs is None
    # the backend fails: the batch fails with what batch_error says
    sched.enqueue(pending(4.0), 1)
    batch = sched.try_next_batch()
    start, input_end, output_start, end, code, message = run_plain(
        batch, lambda inputs: 1 / 0, model, sched, True)
    assert code == int(Code.INTERNAL) and message.startswith("ZeroDivisionError")
    assert input_end == output_start == end >= start


def test_inline_batches_run_record_and_answer_every_ready_batch():
    sched, stats = dynamic(max_batch_size=2)
    model = Model()
    answered = []
    runner = InlineBatches(sched, lambda inputs: {"Y": inputs["X"] + 1}, model,
                           lambda batch, code, message: answered.append(
                               (len(batch), code, batch.outputs["Y"].ravel().tolist())),
                           True, 10**9, 2 * 10**9)
    for v in range(5):
        sched.enqueue(pending(float(v)), 1)
    assert runner.run() is False  # queue empty, not costly
    assert answered == [(2, 0, [1.0, 2.0]), (2, 0, [3.0, 4.0]), (1, 0, [5.0])]
    snap = stats.snapshot()
    assert snap["execution_count"] == 3 and snap["inference_count"] == 5
    assert runner.average_ns > 0


def test_inline_batches_report_failures_and_costly_batches():
    sched, stats = dynamic()
    answered = []
    runner = InlineBatches(sched, lambda inputs: (_ for _ in ()).throw(ValueError("boom")),
                           Model(), lambda batch, code, message: answered.append((code, message)),
                           True, 10**9, 2 * 10**9)
    sched.enqueue(pending(1.0), 1)
    assert runner.run() is False
    assert answered == [(int(Code.INTERNAL), "ValueError: boom")]
    assert stats.snapshot()["inference_stats"]["fail"]["count"] == 1
    # batches over costly_ns (1 ns here): the first one says so and the rest
    # stays queued (for the instance threads)
    ones, _ = dynamic(max_batch_size=1)
    slow = InlineBatches(ones, lambda inputs: {"Y": inputs["X"]}, Model(),
                         lambda batch, code, message: None, True, 1, 2 * 10**9)
    ones.enqueue(pending(1.0), 1)
    ones.enqueue(pending(2.0), 1)
    assert slow.run() is True and ones.queued_count == 1
    # an outlier counts for at most outlier_ns
    capped = InlineBatches(sched, None, Model(), None, True, 10**9, 1000)
    assert capped.note(10**9) is False and capped.average_ns == pytest.approx(125.0)


def test_named_run_names_outputs_and_falls_back_on_error():
    calls = []

    def native(names, feed, options):
        calls.append("native")
        if feed.get("fail"):
            raise RuntimeError("native refused")
        return [feed["a"] + 1, feed["a"] - 1]

    def wrapper(names, feed, options):
        calls.append(("wrapper", options))
        raise ValueError("the wrapper's own text")

    run = NamedRun(native, ["p", "m"], "opts", wrapper)
    assert run({"a": 1}) == {"p": 2, "m": 0} and calls == ["native"]
    with pytest.raises(ValueError, match="the wrapper's own text"):
        run({"a": 1, "fail": True})
    assert calls[-1] == ("wrapper", "opts")


class Again:
    def __init__(self, model):
        self.model = model


LATER = object()  # a response its backend sends after the batch (Answers.answer_late)


class Tracer:
    def __init__(self):
        self.finished = []

    def finish(self, trace, ns, response):
        self.finished.append((trace, response))


def test_settle_answers_each_future_as_server_resolve_did():
    loop = asyncio.new_event_loop()
    try:
        immediate, plain, cancelled, failed, again = (
            ImmediateFuture(), loop.create_future(), ImmediateFuture(), loop.create_future(),
            ImmediateFuture())
        seen = []
        immediate.add_done_callback(lambda f: seen.append(f.result()))
        requests = [pending(0.0, f) for f in (immediate, plain, cancelled, failed, again)]
        error = ServerError(Code.INVALID_ARG, "this request only")
        for p, response in zip(requests, ("r0", "r1", "r2", error, Again("m"))):
            p.response = response
        requests[1].trace = "t1"
        cancelled.cancel()
        handles = {p.future: ("scheduler", i) for i, p in enumerate(requests)}
        tracer = Tracer()
        rerun = settle(requests, handles, Again, LATER, tracer)
        assert rerun == [requests[4]] and list(handles) == [again]  # it keeps its handle
        assert seen == ["r0"] and plain.result() == "r1"
        assert cancelled.cancelled() and failed.exception() is error
        assert tracer.finished == [("t1", "r1")]
        assert settle([requests[0]], {immediate: 1}, Again, LATER, tracer) is None  # done: left
    finally:
        loop.close()


class Cutter(Model):
    """A model whose cut gives each request its rows (or fails)."""

    def __init__(self, fail=False):
        super().__init__()
        self.fail = fail

    def cut_outputs(self, requests, outputs, total):
        if self.fail:
            raise ValueError("cannot classify BYTES")
        for i, p in enumerate(requests):
            p.response = float(outputs["Y"][i, 0])


def ready_batch(model, *values):
    sched, _ = dynamic()
    requests = [pending(v) for v in values]
    for p in requests:
        sched.enqueue(p, 1)
    batch = sched.try_next_batch()
    batch.outputs = {"Y": np.array([[v * 10] for v in values], dtype=np.float32)}
    batch.model = model
    return batch, requests


def test_answers_cut_settle_and_book_a_batch_that_ran_and_hand_failures_back():
    failed = []
    ledger = Ledger()
    answers = Answers(ledger, Again, LATER, lambda p, model: None, Tracer(),
                      lambda obj, code, message: failed.append((obj, code, message)))
    batch, requests = ready_batch(Cutter(), 1.0, 2.0)
    ledger.inflight = 3
    for p in requests:
        ledger.handles[p.future] = ("scheduler", p.id)
    answers.answer(batch, 0, "")
    assert [p.future.result() for p in requests] == [10.0, 20.0]
    assert ledger.inflight == 1 and ledger.handles == {} and failed == []
    assert batch.outputs is None  # cut once
    # a failed batch, and a cut that fails, go back to the server as they are
    batch, requests = ready_batch(Cutter(), 3.0)
    answers.answer(batch, int(Code.UNAVAILABLE), "instance gone")
    assert failed == [(batch, int(Code.UNAVAILABLE), "instance gone")]
    failed.clear()
    batch, requests = ready_batch(Cutter(fail=True), 4.0)
    answers.answer(batch, 0, "")
    assert failed == [(batch, int(Code.INTERNAL), "ValueError: cannot classify BYTES")]
    assert not requests[0].future.done() and ledger.inflight == 1


def test_answers_now_sets_the_drained_event_after_the_last_request():
    loop = asyncio.new_event_loop()
    try:
        ledger = Ledger()
        answers = Answers(ledger, Again, LATER, lambda p, model: None, Tracer(),
                          lambda *args: None)
        ledger.drained = asyncio.Event()
        first, one = ready_batch(Cutter(), 1.0)
        second, two = ready_batch(Cutter(), 2.0)
        ledger.inflight = 2
        for p in one + two:
            ledger.handles[p.future] = ("scheduler", p.id)
        answers.answer_now(first, 0, "")
        assert not ledger.drained.is_set()
        answers.answer_now(second, 0, "")
        assert ledger.drained.is_set() and ledger.inflight == 0
    finally:
        loop.close()


def test_a_request_its_backend_answers_after_the_batch_stays_in_flight_until_answered():
    loop = asyncio.new_event_loop()
    try:
        ledger = Ledger()
        tracer = Tracer()
        answers = Answers(ledger, Again, LATER, lambda p, model: None, tracer,
                          lambda *args: None)
        ledger.drained = asyncio.Event()

        class Later(Model):
            def cut_outputs(self, requests, outputs, total):
                requests[0].response = LATER  # the backend still holds it
                for p in requests[1:]:
                    p.response = "now"

        batch, (held, done) = ready_batch(Later(), 1.0, 2.0)
        held.trace = "t0"
        ledger.inflight = 2
        for p in (held, done):
            ledger.handles[p.future] = ("scheduler", p.id)
        answers.answer_now(batch, 0, "")
        assert done.future.result() == "now" and not held.future.done()
        assert ledger.inflight == 1 and list(ledger.handles) == [held.future]
        assert not ledger.drained.is_set() and tracer.finished == []
        answers.answer_late(held, "late")
        assert held.future.result() == "late" and tracer.finished == [("t0", "late")]
        assert ledger.inflight == 0 and ledger.handles == {} and ledger.drained.is_set()
        # one the client cancelled meanwhile: its late answer is dropped
        batch, (held,) = ready_batch(Later(), 3.0)
        ledger.inflight = 1
        ledger.handles[held.future] = ("scheduler", held.id)
        answers.answer(batch, 0, "")
        held.future.cancel()
        answers.answer_late(held, ServerError(Code.INTERNAL, "too late"))
        assert held.future.cancelled() and ledger.inflight == 0 and ledger.handles == {}
    finally:
        loop.close()


# -- a batch answered per request by its backend (engine/batch_results.pyx) --------------

class PerRequestModel:
    """What BatchResults asks of a ModelVersion, recording its own steps."""

    def __init__(self, answer):
        self.tracing = False
        self.context = type("Context", (), {"answer": answer})()
        self.finished = []

    def failed_batch(self, t_start, err):
        return (t_start, t_start, t_start, t_start, int(Code.INTERNAL), str(err))

    def finish_on_loop(self, batch, outcome):
        self.finished.append((len(batch.requests), outcome[4], outcome[5]))


def _responses(requests, results, other):
    for p, result in zip(requests, results):
        if isinstance(result, Exception):
            raise result
        p.response = result


def test_batch_results_answer_the_common_case_and_decline_the_rest():
    from pyserver.engine.batch_results import BatchResults

    sched, stats = dynamic(max_batch_size=2)
    answered = []
    model = PerRequestModel(lambda batch, code, message: answered.append((len(batch), code)))
    results = BatchResults(model, _responses, None, sched)
    for v in range(2):
        sched.enqueue(pending(float(v)), 1)
    batch = sched.try_next_batch()
    start = now_ns()
    # the model's own steps where it is not the common case, nothing done here
    model.tracing = True
    assert results.finish(batch, [{"Y": 1}, {"Y": 2}], start, start + 1) is False
    model.tracing = False
    assert results.finish(batch, [{"Y": 1}], start, start + 1) is False  # a result missing
    assert results.finish(batch, ({"Y": 1}, {"Y": 2}), start, start + 1) is False  # not a list
    model.context.answer = None  # no server answers this model's batches
    assert results.finish(batch, [{"Y": 1}, {"Y": 2}], start, start + 1) is False
    assert answered == [] and all(p.response is None for p in batch.requests)
    assert stats.snapshot()["execution_count"] == 0
    # the common case: responses made, the batch recorded and answered
    model.context.answer = lambda b, code, message: answered.append((len(b), code))
    assert results.finish(batch, [{"Y": 1}, {"Y": 2}], start, start + 1) is True
    assert [p.response for p in batch.requests] == [{"Y": 1}, {"Y": 2}]
    assert answered == [(2, 0)] and model.finished == []
    snap = stats.snapshot()
    assert snap["execution_count"] == 1 and snap["inference_count"] == 2


def test_batch_results_hand_a_failure_to_the_models_failure_path():
    from pyserver.engine.batch_results import BatchResults

    sched, _ = dynamic()
    model = PerRequestModel(lambda batch, code, message: None)
    results = BatchResults(model, _responses, None, sched)
    sched.enqueue(pending(1.0), 1)
    batch = sched.try_next_batch()
    assert results.finish(batch, [ValueError("bad result")], now_ns(), now_ns()) is True
    assert model.finished == [(1, int(Code.INTERNAL), "bad result")]
