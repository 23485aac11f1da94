"""ImmediateFuture (engine/types.pyx): the Server.submit future whose
done-callback runs as the outcome is set, not from a later loop iteration."""

import asyncio
import logging

import numpy as np
import pytest

from pyserver.kernel.types import ImmediateFuture, InferRequest, InferTensor
from pyserver.testing import write_add_sub


def test_the_callback_runs_as_the_outcome_is_set():
    seen = []
    f = ImmediateFuture()
    f.add_done_callback(lambda fut: seen.append((fut.done(), fut.result())))
    assert not f.done() and seen == []
    f.set_result(7)
    assert seen == [(True, 7)]
    with pytest.raises(asyncio.InvalidStateError):
        f.set_result(8)
    with pytest.raises(asyncio.InvalidStateError):
        f.set_exception(ValueError())
    assert not f.cancel() and f.exception() is None


def test_a_callback_added_after_the_outcome_runs_at_once():
    f = ImmediateFuture()
    error = KeyError("k")
    f.set_exception(error)
    seen = []
    f.add_done_callback(seen.append)
    assert seen == [f] and f.exception() is error
    with pytest.raises(KeyError):
        f.result()
    g = ImmediateFuture()
    g.add_done_callback(seen.append)
    with pytest.raises(RuntimeError):  # one callback
        g.add_done_callback(seen.append)


def test_cancel_runs_the_callback_and_the_outcome_is_refused():
    f = ImmediateFuture()
    with pytest.raises(asyncio.InvalidStateError):
        f.result()
    seen = []
    f.add_done_callback(lambda fut: seen.append(fut.cancelled()))
    assert f.cancel() and seen == [True]
    assert f.done() and f.cancelled() and not f.cancel()
    with pytest.raises(asyncio.CancelledError):
        f.result()
    with pytest.raises(asyncio.CancelledError):
        f.exception()
    with pytest.raises(asyncio.InvalidStateError):
        f.set_result(1)


def test_a_failing_callback_is_logged_not_raised_to_the_setter(caplog):
    f = ImmediateFuture()

    def boom(fut):
        raise RuntimeError("in the callback")

    f.add_done_callback(boom)
    with caplog.at_level(logging.ERROR, logger="pyserver.core"):
        f.set_result(1)  # the batch's completion goes on
    assert "in the callback" in caplog.text


def test_server_answers_in_the_batch_completion_not_an_iteration_later(tmp_path):
    """With an ImmediateFuture the callback has run by the time the server's
    completion of the batch returns; an asyncio.Future's runs after it."""
    from pyserver.server.server import Server

    write_add_sub(tmp_path / "repo", extra="dynamic_batching { }")
    a = np.arange(16, dtype=np.float32).reshape(1, 16)

    order = []

    class Recording:  # around the server's compiled answers (engine/settle.pyx)
        def __init__(self, answers):
            self.answers = answers

        def answer(self, *args):
            self.answers.answer(*args)
            order.append("resolved")

        def answer_now(self, *args):
            self.answers.answer_now(*args)
            order.append("resolved")

    async def main():
        server = Server(str(tmp_path / "repo"))
        # before start(): the models are handed resolve_now as they load
        server._answers = Recording(server._answers)
        server.resolve_now = server._answers.answer_now
        await server.start()
        try:
            for immediate in (True, False, True):
                order.clear()
                request = InferRequest("add_sub", "", "", [InferTensor("INPUT0", "FP32", [1, 16], a),
                                                         InferTensor("INPUT1", "FP32", [1, 16], a)],
                                       [], {})
                fut = server.submit(request, ImmediateFuture() if immediate else None)
                assert isinstance(fut, ImmediateFuture) == immediate
                done = asyncio.get_running_loop().create_future()

                def answered(f):
                    order.append("answered")
                    np.testing.assert_array_equal(f.result().outputs[0].data, a + a)
                    done.set_result(None)

                fut.add_done_callback(answered)
                await asyncio.wait_for(done, 10)
                await asyncio.sleep(0)
                expected = ["answered", "resolved"] if immediate else ["resolved", "answered"]
                assert order == expected
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_done_callback_is_called_as_a_c_call_and_as_a_callable(caplog):
    """DoneCallback (the protocols' answer steps): an ImmediateFuture calls
    its ``done``; an asyncio future calls it, and it calls ``done`` too. The
    base's ``done`` is the subclasses' to write: its error is logged, never
    raised to the setter."""
    from pyserver.engine.types import DoneCallback

    f = ImmediateFuture()
    f.add_done_callback(DoneCallback())
    with caplog.at_level(logging.ERROR, logger="pyserver"):
        f.set_result(1)
    assert "done-callback failed" in caplog.text and "NotImplementedError" in caplog.text
    with pytest.raises(NotImplementedError):
        DoneCallback()(f)
