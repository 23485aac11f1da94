# engine/plain_spec.pyx: the plain case of a request's inputs and outputs,
# one set of rules (csrc's PlainSpec) for the protocols' readers and the
# request path.

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector


cdef extern from "pyserver/plain_spec.h" namespace "pyserver" nogil:
    cdef cppclass PlainInput "pyserver::PlainSpec::Input":
        string name
        string datatype
        vector[int64_t] dims

    # What one request has matched so far; a fresh one per request.
    cdef cppclass PlainMatch "pyserver::PlainSpec::Match":
        int64_t batch_size
        uint64_t inputs_seen
        uint64_t outputs_seen

    cdef cppclass CPlainSpec "pyserver::PlainSpec":
        CPlainSpec(vector[PlainInput] inputs, vector[string] outputs, uint32_t max_batch_size)
        int MatchInput(string_view name, string_view datatype, const int64_t* shape,
                       size_t ndim, PlainMatch* match) const
        int MatchOutput(string_view name, PlainMatch* match) const
        const vector[PlainInput]& inputs() const
        const vector[string]& outputs() const
        bool batching() const
        uint32_t max_batch_size() const


cdef class PlainSpec:
    # shared: a reader on another thread may hold the rules past the model
    cdef shared_ptr[CPlainSpec] c

    cdef Py_ssize_t match_tensor(self, name, datatype, shape, PlainMatch* match) except -2
    cdef Py_ssize_t match_output_name(self, name, PlainMatch* match) except -2
    cdef int64_t match_request(self, list inputs, list outputs) except -2
    cdef const string* output_name(self, size_t k) noexcept


cdef class PlainModel:
    # What a protocol's reader and writer need of a model to take its plain
    # requests without an InferRequest: the rules and, in the config's
    # order, its inputs' and outputs' names and types.
    cdef readonly PlainSpec spec
    cdef readonly list input_names  # its inputs' names as str
    cdef readonly list input_dtypes  # the same inputs' numpy dtypes
    cdef vector[size_t] input_itemsizes  # their elements' byte sizes (0: BYTES)
    cdef vector[string] output_datatypes  # every output's datatype
    cdef readonly list output_names  # their names as str
    cdef readonly list output_types  # their datatypes as str
    cdef readonly list output_dtypes  # their numpy dtypes (None: BF16, BYTES)
    cdef readonly object model_name
    cdef readonly object version
    cdef readonly object respond  # see PlainModel
    cdef readonly bint typed_by_arrays  # see PlainModel
