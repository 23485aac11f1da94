"""What a backend is to the model that runs it, typed: the capabilities it
declares, the outcome of one batch, and the one interface every execution
driver (the thing that feeds an instance its batches) implements.

A backend object is one model instance, built with ``(model_path, config,
instance_name, device, threads)`` (and ``context=``, the server's
ServerContext, when it declares ``Capability.SERVER_CONTEXT``); ``device``
is ``"cuda:N"`` for an instance on GPU N and ``"cpu"`` otherwise
(_common.instance_device). It offers
``execute(inputs: dict[name, ndarray]) -> dict[name, ndarray]``, or with
``Capability.TAKES_REQUESTS`` ``execute_requests(pending requests) -> one
result per request``; and, optionally, ``close()``, ``healthy()`` (False
while it cannot take work), ``is_ready()`` (with ``Capability.READINESS``:
the model's own answer), ``attach(model)`` (the model version it serves,
for backends that answer on their own) and ``loop_driver(model, instance,
loop)`` (with ``Capability.LOOP_DRIVEN``: the ExecutionDriver that feeds it
from the event loop instead of a thread).
"""

from __future__ import annotations

import asyncio
import enum
from typing import NamedTuple


class Capability(enum.Flag):
    """What a backend instance can do, declared as its ``capabilities``."""

    NONE = 0
    # execute_requests(requests): Triton's execute(requests) API, one result each
    TAKES_REQUESTS = enum.auto()
    # computes in another process: the event loop spinning for its answer
    # only takes that process's core away
    OUT_OF_PROCESS = enum.auto()
    # computes in this process on the CPU: while its batches are cheap the
    # event loop may run them itself (pyserver/model/inline.py)
    RUNS_INLINE = enum.auto()
    # fed from the event loop by the driver loop_driver() returns, where the
    # model's batching allows it (one request per batch)
    LOOP_DRIVEN = enum.auto()
    # is_ready(): the model answers readiness itself (Triton's Python backend)
    READINESS = enum.auto()
    # built with context=: the server's services (BLS, metrics, memory pools)
    SERVER_CONTEXT = enum.auto()
    # with TAKES_REQUESTS: reads a pending request only through
    # engine/region_io.pyx (its id, parameters, outputs and arrays), so a
    # plain record with no InferRequest (engine/types.pyx PlainPending) will do
    TAKES_PLAIN_RECORDS = enum.auto()


class _Rescheduled:
    """A backend's result for a request its model released with
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (an iterative sequence's
    request runs again: model/sequence.py)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RESCHEDULED"


RESCHEDULED = _Rescheduled()


class _AnsweredLater:
    """A backend's result for a request it still holds when its batch ends
    (a Triton C backend that returned from Execute and answers from its own
    thread): the instance moves on, and the backend hands the response to
    the server's ``answer_late`` (ServerContext) when it comes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ANSWERED_LATER"


ANSWERED_LATER = _AnsweredLater()


def capabilities_of(backend) -> Capability:
    """A backend's declared capabilities (none for one that declares none)."""
    return getattr(backend, "capabilities", Capability.NONE)


class BatchOutcome(NamedTuple):
    """How one batch went: its four timestamps (what Scheduler.complete and
    the statistics take) and, when it failed, the code and message that fail
    its requests. Splatted into Scheduler.complete(batch, *outcome)."""

    start_ns: int
    input_end_ns: int
    output_start_ns: int
    end_ns: int
    code: int = 0  # Code.OK
    message: str = ""


class TimedResults(list):
    """What ``execute_requests`` returns when its backend measured the batch
    itself: ``times`` is (start, compute start, compute end, end) in the
    engine clock's ns (steady clock, as Triton's backends stamp them), or
    None. ``states``: per request, its implicit states after the run
    ({output name: array}) when they do not travel in its outputs (a
    decoupled model's results are None), else None."""

    __slots__ = ("times", "states")

    def __init__(self, results=()):
        super().__init__(results)
        self.times = None
        self.states = None


class ExecutionDriver:
    """Feeds a model version's batches to an instance. Three kinds: an
    instance thread (model/version.py), the event loop itself for cheap
    in-process models (model/inline.py), and the event loop as the
    relay to a Python model's worker process (backends/python/loop_driver.py,
    returned by that backend's loop_driver())."""

    def start(self) -> None:
        """Begins taking batches."""

    def dispatch(self) -> None:
        """On the event loop, after a request was queued: take what is queued
        (drivers that the loop drives; a thread takes its own)."""

    def stop(self, timeout: float) -> None:
        """After the scheduler stopped: lets the batch in flight end, then
        lets go (from any thread)."""
        raise NotImplementedError


def running_loop():
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
