# cython: language_level=3
"""A batch that ran, answered: each request's future settled with its
response, on the event loop's thread (Server.resolve decides the rest).

Compiled because it runs once per request: in Python its walk cost ~1 µs
per request on the loop (ONNX add_sub over gRPC at c64). The futures the
gRPC frontend hands in (ImmediateFuture) are settled without a call.
"""

from libc.stdint cimport uint64_t

from pyserver.engine.types cimport ImmediateFuture, PendingRequest


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cpdef list settle(list requests, dict handles, object reschedule, object tracer):
    """Answers ``requests`` (PendingRequest) whose batch ran: each leaves
    ``handles``; its future gets its response, or the exception a backend
    that answers per request gave as that response; a traced one's record
    ends (``tracer.finish(trace, now, response)``, the engine's clock). A future already
    done (cancelled) is left as it is. Returns the requests whose response
    is a ``reschedule`` instance (iterative sequences: they run again, the
    caller queues them; they keep their handle) or None."""
    cdef PendingRequest p
    cdef ImmediateFuture immediate
    cdef list again = None
    for obj in requests:
        p = <PendingRequest>obj
        response = p.response
        if type(response) is reschedule:
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
