# engine/batch_results.pyx: a batch whose backend answered per request,
# finished on the event loop in one call.

from libc.stdint cimport uint64_t

from pyserver.engine.batcher cimport Batch, Scheduler


cdef class BatchResults:
    cdef object model
    cdef object responses
    cdef object other
    cdef Scheduler scheduler

    cpdef bint finish(self, Batch batch, object results, uint64_t start_ns, uint64_t output_ns)
