# engine/plain_spec.pyx: the plain case of a request's inputs and outputs,
# one set of rules for the protocols' readers and the request path.

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector


# What a plain request's input must be.
cdef struct PlainInput:
    string name
    string datatype
    vector[int64_t] dims  # without the batch dimension; every one fixed (> 0)


cdef class PlainSpec:
    cdef vector[PlainInput] inputs  # every input of the model (all required), config order
    cdef vector[string] outputs  # every output's name, config order
    cdef readonly bint batching
    cdef readonly uint32_t max_batch_size

    cdef Py_ssize_t match_input(self, const char* name, size_t name_size, const char* datatype,
                                size_t datatype_size, const vector[int64_t]& shape,
                                bint first_input, int64_t* batch_size, uint64_t* seen) noexcept
    cdef Py_ssize_t match_tensor(self, name, datatype, shape, bint first_input,
                                 int64_t* batch_size, uint64_t* seen) except -2
    cdef Py_ssize_t _match(self, const char* name, size_t name_size, const char* datatype,
                           size_t datatype_size, const int64_t* shape, size_t ndim,
                           bint first_input, int64_t* batch_size, uint64_t* seen) noexcept
    cdef Py_ssize_t match_output(self, const char* name, size_t size, uint64_t* seen) noexcept
    cdef Py_ssize_t match_output_name(self, name, uint64_t* seen) except -2
    cdef int64_t match_request(self, list inputs, list outputs) except -2
    cdef bint _shape_fits(self, size_t k, const int64_t* shape, size_t ndim, bint first_input,
                          int64_t* batch_size) noexcept
