# cython: language_level=3
"""A batch that ran, answered: cut into responses and each request's
future settled, on the event loop's thread (Server.resolve; failures go
back to the server).

Compiled because it runs once per request: in Python its walk cost ~1 µs
per request on the loop (ONNX add_sub over gRPC at c64). The futures the
gRPC frontend hands in (ImmediateFuture) are settled without a call.
"""

from libc.stdint cimport uint64_t

from pyserver.engine.admission cimport Ledger
from pyserver.engine.batcher cimport Batch
from pyserver.engine.types cimport ImmediateFuture, PendingRequest


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cpdef list settle(list requests, dict handles, object reschedule, object later, object tracer):
    """Answers ``requests`` (PendingRequest) whose batch ran: each leaves
    ``handles``; its future gets its response, or the exception a backend
    that answers per request gave as that response; a traced one's record
    ends (``tracer.finish(trace, now, response)``, the engine's clock). A future already
    done (cancelled) is left as it is. Returns the requests left unanswered,
    or None: those whose response is a ``reschedule`` instance (iterative
    sequences: they run again, the caller queues them) or the ``later``
    object (their backend answers them after their batch: Answers.answer_late);
    they keep their handle."""
    cdef PendingRequest p
    cdef ImmediateFuture immediate
    cdef list again = None
    for obj in requests:
        p = <PendingRequest>obj
        response = p.response
        if type(response) is reschedule or response is later:
            if again is None:
                again = []
            again.append(p)
            continue
        future = p.future
        del handles[future]
        if p.trace is not None:
            tracer.finish(p.trace, NowNs(), response)
        if type(future) is ImmediateFuture:
            immediate = <ImmediateFuture>future
            if immediate._state:
                continue
            if isinstance(response, BaseException):
                immediate._settle(None, response)
            else:
                immediate._settle(response, None)
        elif not future.done():
            if isinstance(response, BaseException):
                future.set_exception(response)
            else:
                future.set_result(response)
    return again


cdef class Answers:
    """``answer(obj, code, message)``: what the completion queue carries,
    answered (Server.resolve). A batch that ran is cut into responses
    (its model's ``cut_outputs``), leaves the ledger and is settled, in one
    call; a failure goes to ``fail(obj, code, message)``: a failed batch, a
    request the engine failed alone, or a cut that failed (with the model's
    batch error). ``answer_now`` is ``answer`` that then sets the ledger's
    drained event when it answered the last request: what the server calls
    for every batch (the completion queue's, and those the loop ran
    itself). ``answer_late(p, response)`` answers, on the loop, a request
    its batch left to its backend (its response was ``later``). Handed: the
    server's ledger, the type of a rescheduled request's response and
    ``requeue(p, model)`` (iterative sequences), ``later``, the tracer, and
    ``fail``."""

    cdef Ledger ledger
    cdef object reschedule
    cdef object later
    cdef object requeue
    cdef object tracer
    cdef object fail

    def __init__(self, Ledger ledger, reschedule, later, requeue, tracer, fail):
        self.ledger = ledger
        self.reschedule = reschedule
        self.later = later
        self.requeue = requeue
        self.tracer = tracer
        self.fail = fail

    cpdef answer(self, obj, int code, message):
        cdef Batch batch
        cdef list requests
        cdef list again
        if code != 0 or type(obj) is not Batch:
            self.fail(obj, code, message)
            return
        batch = <Batch>obj
        requests = batch.requests
        outputs = batch.outputs
        if outputs is not None:  # cut per request here (ModelVersion.execute_batch)
            batch.outputs = None
            model = batch.model
            try:
                model.cut_outputs(requests, outputs, batch.c.batch_size)
            except Exception as err:  # e.g. classification of a BYTES output
                code, message = model.batch_error(err)
                self.fail(obj, code, message)
                return
        self.ledger.inflight -= len(requests)
        # each future gets its response (a backend that answers per request
        # may fail one request of a batch: its response is the error); a
        # rescheduled request runs again; one answered later stays in flight
        again = settle(requests, self.ledger.handles, self.reschedule, self.later, self.tracer)
        if again is not None:
            for p in again:
                response = (<PendingRequest>p).response
                if response is self.later:
                    self.ledger.inflight += 1
                else:
                    self.requeue(p, response.model)

    def answer_now(self, obj, int code, message):
        self.answer(obj, code, message)
        self._check_drained()

    def answer_late(self, PendingRequest p, response):
        """A request whose backend answered it after its batch: ``response``
        (an InferResponse, or the exception that fails it) goes to its future."""
        p.response = response
        self.ledger.inflight -= 1
        settle([p], self.ledger.handles, self.reschedule, self.later, self.tracer)
        self._check_drained()

    cdef void _check_drained(self):
        drained = self.ledger.drained
        if drained is not None and self.ledger.inflight == 0:
            drained.set()
