# engine/region_io.pyx: a batch's tensors into, and a worker's answers out
# of, a Python-backend worker's shared-memory regions.

from libc.stdint cimport uint64_t


cpdef uint64_t batch_start(tuple reply, uint64_t default)


cdef class ResultReader:
    cdef dict dtypes
    cdef object error_of
    cdef object again

    cpdef list read(self, worker, tuple reply)
