# engine/batch_execution.pyx: a plain model's batches run on the loop, and
# its requests that need no queue run as they are read.

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.batcher cimport Scheduler


# What a direct request's input must be, as a decoder compares it with what
# it read (no Python objects per request).
cdef struct DirectInput:
    string name
    string datatype
    vector[int64_t] dims  # without the batch dimension


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
    cdef vector[DirectInput] input_specs  # every input (all plain), config order
    cdef readonly list input_names  # the same, as str
    cdef readonly list input_dtypes  # the same, as numpy dtypes
    cdef vector[string] output_specs  # every output's name, config order
    cdef vector[string] output_datatypes  # the same outputs' datatypes
    cdef readonly list output_names  # their names as str
    cdef readonly list output_types  # their datatypes as str
    cdef readonly bint batching
    cdef readonly uint32_t max_batch_size
    cdef readonly object model_name
    cdef readonly object version
    cdef readonly uint64_t runs  # requests run so (for tests and the bench)

    cdef bint ready(self)
    cdef Py_ssize_t match_input(self, const char* name, size_t name_size, const char* datatype,
                                size_t datatype_size, const vector[int64_t]& shape,
                                bint first_input, int64_t* batch_size, uint64_t* seen) noexcept
    cdef Py_ssize_t match_output(self, const char* name, size_t size, uint64_t* seen) noexcept
    cdef bint _shape_fits(self, Py_ssize_t k, const vector[int64_t]& shape, bint first_input,
                          int64_t* batch_size) noexcept
    cdef int _note(self, uint64_t wall_ns) except -1
    cpdef object run(self, dict feed, uint32_t batch_size, uint64_t received_ns)
