# cython: language_level=3
"""A batch whose backend answered per request (a Python model's worker),
finished on the event loop in one call.

ModelVersion's ``requests_outcome`` (each request's response from its
result) and ``finish_on_loop`` (the batch's statistics, then its answer)
are a dozen Python frames per batch, once per request for an unbatched
model. ``BatchResults.finish`` takes their common case: no trace to stamp,
a server that answers the batch, one result per request in a plain list.
It declines, having done nothing, anywhere else, and a failure while the
responses are made goes to the model's own failure path: the rules and
their error texts stay the model's.
"""

from libc.stdint cimport uint64_t

from pyserver.engine.batcher cimport Batch, Scheduler


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef class BatchResults:
    """``finish(batch, results, start_ns, output_ns)`` for one model
    version (``model``: its ModelVersion; ``responses``: its request path's
    responses(requests, results, other); ``other``: its handler of a
    result that is not outputs)."""

    cdef object model
    cdef object responses
    cdef object other
    cdef Scheduler scheduler

    def __init__(self, model, responses, other, Scheduler scheduler):
        self.model = model
        self.responses = responses
        self.other = other
        self.scheduler = scheduler

    cpdef bint finish(self, Batch batch, object results, uint64_t start_ns, uint64_t output_ns):
        """Answers ``batch`` from ``results`` (its worker started it at
        ``start_ns`` and answered at ``output_ns``); False, with nothing
        done, where the model's own steps must (requests_outcome, then
        finish_on_loop)."""
        model = self.model
        if type(results) is not list or model.tracing:
            return False
        answer = model.context.answer
        cdef list requests = batch.requests
        if answer is None or len(<list>results) != len(requests):
            return False
        try:
            self.responses(requests, results, self.other)
        except Exception as err:
            model.finish_on_loop(batch, model.failed_batch(start_ns, err))
            return True
        self.scheduler.record(batch, start_ns, start_ns, output_ns, NowNs(), 0, "")
        answer(batch, 0, "")
        return True
