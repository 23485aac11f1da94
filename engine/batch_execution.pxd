# engine/batch_execution.pyx: a plain model's batches run on the loop, and
# its requests that need no queue run as they are read.

from libc.stdint cimport uint32_t, uint64_t

from pyserver.engine.batcher cimport Scheduler


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


cdef class DirectRoute:
    cdef InlineBatches batches
    cdef object driver
    cdef object running
    cdef readonly dict inputs  # name -> (datatype, dims): plain inputs only
    cdef readonly Py_ssize_t n_inputs
    cdef readonly list output_names  # config order
    cdef readonly dict output_types  # name -> datatype
    cdef readonly bint batching
    cdef readonly uint32_t max_batch_size
    cdef readonly object model_name
    cdef readonly object version
    cdef readonly uint64_t runs  # requests run so (for tests and the bench)

    cdef bint ready(self)
    cdef int _note(self, uint64_t wall_ns) except -1
    cpdef object run(self, dict feed, uint32_t batch_size, uint64_t received_ns)
