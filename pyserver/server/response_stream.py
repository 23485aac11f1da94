"""ResponseStream: the responses of one request submitted with
Server.submit_stream, 1 (any model) or 0..N (a decoupled one), delivered on
the event loop in the order sent."""

from __future__ import annotations

import asyncio
import logging
import threading

from pyserver.engine import now_ns
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")


class ResponseWindow:
    """How many responses of one request may be on their way to the client
    at once (gRPC's --grpc-max-response-pool-size): a decoupled model that
    sends more waits in ``take`` until the frontend has written one
    (``give``), as Triton's response queue makes its backend wait. Never
    waits on the event loop's own thread (the loop is what drains it) or
    once closed (the request was cancelled or its client is gone)."""

    __slots__ = ("_cond", "_free", "_open", "_loop_thread")

    def __init__(self, size: int, loop_thread: int):
        self._cond = threading.Condition(threading.Lock())
        self._free = size
        self._open = True
        self._loop_thread = loop_thread

    def take(self) -> None:
        with self._cond:
            if threading.get_ident() != self._loop_thread:
                while self._free <= 0 and self._open:
                    self._cond.wait()
            self._free -= 1

    def give(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._open = False
            self._cond.notify_all()


class ResponseStream:
    """The responses of one request submitted with ``Server.submit_stream``.

    To the engine it stands where a request's future stands (``done``,
    ``cancelled``, ``cancel``, ``set_result``, ``set_exception``): the
    batch completing (``set_result``) only releases the request; a backend
    that answers through the batch (a non-decoupled model) gives its one
    response there. A decoupled backend calls ``push`` from any thread, as
    many times as the model sends. Every response, error and the final flag
    reach ``on_response(response, error, final)`` on the event loop, in the
    order sent; nothing is delivered after the final one or a cancel.
    """

    __slots__ = ("_loop", "_on_response", "_final", "_cancelled", "_dropping", "_final_pushed",
                 "first_response", "window", "held", "on_final")

    def __init__(self, loop, on_response, window: ResponseWindow | None = None):
        self._loop = loop
        self._on_response = on_response
        self._final = False
        self._cancelled = False
        self._dropping = False
        self._final_pushed = False  # the backend sent the final response itself
        # (model stats, arrival ns) while the first response of a decoupled
        # model's request is still to come (histogram_latencies=true).
        self.first_response = None
        # With a window, ``held`` tells on_response that the response it is
        # handed holds a place there: the consumer gives it back once written.
        self.window = window
        self.held = False
        # called once, on the loop, as the final response (or error) is
        # delivered or dropped: a decoupled request's trace ends then
        self.on_final = None

    def _observe_first_response(self) -> None:
        first, self.first_response = self.first_response, None
        if first is not None:
            first[0].observe_first_response(now_ns() - first[1])

    # -- the engine's side (event loop) ----------------------------------------

    def done(self) -> bool:
        return self._final or self._dropping

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self, drop: bool = True) -> bool:
        """Marks the request cancelled (the model sees it); with ``drop``
        nothing more is delivered, else its responses still come, up to the
        final one (a BLS caller keeps reading its iterator)."""
        if self._final or self._cancelled:
            return False
        self._cancelled = True
        self._dropping = drop
        if self.window is not None:
            self.window.close()
        return True

    def set_result(self, response) -> None:
        if response is not None and not self._final_pushed:
            self._observe_first_response()
            self._deliver(response, None, True)

    def set_exception(self, error) -> None:
        if not self._final_pushed:  # else it is on its way, after what came before it
            self._observe_first_response()
            self._deliver(None, error, True)

    # -- the backend's side (any thread) ---------------------------------------

    def push(self, response, error=None, final=False) -> None:
        if self.first_response is not None:
            self._observe_first_response()
        held = self.window is not None and (response is not None or error is not None)
        if held:
            self.window.take()
        if final:
            self._final_pushed = True
        self._loop.call_soon_threadsafe(self._deliver, response, error, final, held)

    def _deliver(self, response, error, final, held=False) -> None:
        if final and self.on_final is not None:
            on_final, self.on_final = self.on_final, None
            on_final()
        if self._final or self._dropping:
            if held:
                self.window.give()
            return
        if final:
            self._final = True
            if self.window is not None:
                self.window.close()
        self.held = held
        try:
            self._on_response(response, error, final)
        except Exception:
            log.exception("a response stream's consumer failed")
        finally:
            self.held = False


def end_stream(stream: ResponseStream, task: asyncio.Task) -> None:
    """An ensemble request submitted as a stream: its one response, final."""
    if task.cancelled():
        stream.set_exception(ServerError(Code.CANCELLED, "Request was cancelled"))
    elif task.exception() is not None:
        stream.set_exception(task.exception())
    else:
        stream.set_result(task.result())
