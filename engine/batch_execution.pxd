# engine/batch_execution.pyx: a plain model's batches run on the loop, and
# its requests that need no queue run as they are read.

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.batcher cimport Scheduler
from pyserver.engine.plain_spec cimport PlainModel, PlainSpec


cdef class InlineBatches:
    cdef Scheduler scheduler
    cdef object execute
    cdef object model
    cdef object answer
    cdef bint batching
    cdef double _average_ns
    cdef uint64_t costly_ns
    cdef uint64_t outlier_ns

    cpdef bint note(self, uint64_t wall_ns)


cdef class DirectRoute(PlainModel):
    cdef InlineBatches batches
    cdef object driver
    cdef object running
    cdef readonly uint64_t runs  # requests run so (for tests and the bench)

    cdef bint ready(self)
    cdef int _note(self, uint64_t wall_ns) except -1
    cpdef object run(self, dict feed, uint32_t batch_size, uint64_t received_ns)
