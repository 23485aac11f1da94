# cython: language_level=3
"""The plain case of a request against its model: the rules a request's
inputs and requested outputs must meet for it to take the common path with
no further check. One set of rules, read two ways: from what csrc's readers
parsed (names, datatypes and shapes as bytes and C++ vectors, no Python
object per request: the HTTP and gRPC readers of direct runs) and from an
InferRequest's tensors (RequestPath.check, for every other plain request).

A model is plain here when every input has fixed dims, no reshape, and is
required (RequestPath decides, and builds the spec). The rules only say
yes: a request they decline goes to RequestPath's general walk, the one
authority for every error and its text.
"""

from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcmp

from pyserver.engine.types cimport InferTensor, RequestedOutput


cdef inline bint _same(const char* a, size_t size, const string& b) noexcept:
    return size == b.size() and memcmp(a, b.data(), size) == 0


# The readers keep a bit per input and per output (a uint64_t).
DEF MAX_NAMED = 64
# An InferTensor's shape is read into this many dims on the stack (more: the walk).
DEF MAX_DIMS = 32


cdef class PlainSpec:
    """``inputs``: (name, datatype, dims without the batch dimension) each,
    ``outputs``: names, both in the config's order; ``max_batch_size``: the
    model's (0: it does not batch)."""

    def __init__(self, inputs, outputs, uint32_t max_batch_size):
        cdef PlainInput spec
        for name, datatype, dims in inputs:
            spec.name = name.encode()
            spec.datatype = datatype.encode()
            spec.dims = list(dims)
            self.inputs.push_back(spec)
        for name in outputs:
            self.outputs.push_back(name.encode())
        self.batching = max_batch_size > 0
        self.max_batch_size = max_batch_size

    cdef Py_ssize_t match_input(self, const char* name, size_t name_size, const char* datatype,
                                size_t datatype_size, const vector[int64_t]& shape,
                                bint first_input, int64_t* batch_size, uint64_t* seen) noexcept:
        """One input as read: its index among the model's inputs, or -1
        where it is not the model's, was given before (``seen``, a bit per
        input), has another datatype or another shape. The first input of a
        request (``first_input``) sets ``*batch_size``."""
        return self._match(name, name_size, datatype, datatype_size, shape.data(), shape.size(),
                           first_input, batch_size, seen)

    cdef Py_ssize_t match_tensor(self, name, datatype, shape, bint first_input,
                                 int64_t* batch_size, uint64_t* seen) except -2:
        """match_input for an input as Python objects (an InferTensor's
        name and datatype, str, and shape, a list of int); -1 for anything
        of another type."""
        cdef Py_ssize_t name_size, datatype_size
        cdef const char* name_utf8
        cdef const char* datatype_utf8
        cdef int64_t dims[MAX_DIMS]
        cdef size_t n = 0
        if type(name) is not str or type(datatype) is not str or type(shape) is not list \
                or len(<list>shape) > MAX_DIMS:
            return -1
        for d in <list>shape:
            if type(d) is not int:
                return -1
            try:
                dims[n] = <int64_t>d
            except OverflowError:
                return -1
            n += 1
        name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_size)
        datatype_utf8 = PyUnicode_AsUTF8AndSize(datatype, &datatype_size)
        return self._match(name_utf8, <size_t>name_size, datatype_utf8, <size_t>datatype_size,
                           dims, n, first_input, batch_size, seen)

    cdef Py_ssize_t _match(self, const char* name, size_t name_size, const char* datatype,
                           size_t datatype_size, const int64_t* shape, size_t ndim,
                           bint first_input, int64_t* batch_size, uint64_t* seen) noexcept:
        cdef size_t k
        if self.inputs.size() > MAX_NAMED:
            return -1
        for k in range(self.inputs.size()):
            if _same(name, name_size, self.inputs[k].name):
                break
        else:
            return -1
        if (seen[0] >> k) & 1 or not _same(datatype, datatype_size, self.inputs[k].datatype) \
                or not self._shape_fits(k, shape, ndim, first_input, batch_size):
            return -1
        seen[0] |= (<uint64_t>1) << k
        return <Py_ssize_t>k

    cdef Py_ssize_t match_output(self, const char* name, size_t size, uint64_t* seen) noexcept:
        """The output called ``name``, asked for once (``seen``: a bit per
        output), by index; -1."""
        cdef size_t k
        if self.outputs.size() > MAX_NAMED:
            return -1
        for k in range(self.outputs.size()):
            if _same(name, size, self.outputs[k]):
                if (seen[0] >> k) & 1:
                    return -1
                seen[0] |= (<uint64_t>1) << k
                return <Py_ssize_t>k
        return -1

    cdef Py_ssize_t match_output_name(self, name, uint64_t* seen) except -2:
        """match_output for a name as a str; -1 for anything else."""
        cdef Py_ssize_t size
        cdef const char* utf8
        if type(name) is not str:
            return -1
        utf8 = PyUnicode_AsUTF8AndSize(name, &size)
        return self.match_output(utf8, <size_t>size, seen)

    cdef bint _shape_fits(self, size_t k, const int64_t* shape, size_t ndim, bint first_input,
                          int64_t* batch_size) noexcept:
        """Whether ``shape``, read for input ``k``, is the model's: its dims
        after a batch dimension when the model batches, that dimension in
        1..max_batch_size and the same for every input (the first input
        sets ``*batch_size``)."""
        cdef const PlainInput* spec = &self.inputs[k]
        cdef size_t j, nd = spec.dims.size(), first = 1 if self.batching else 0
        if ndim != nd + first:
            return False
        if first:
            if first_input:
                if shape[0] <= 0 or shape[0] > <int64_t>self.max_batch_size:
                    return False
                batch_size[0] = shape[0]
            elif shape[0] != batch_size[0]:
                return False
        for j in range(nd):
            if shape[j + first] != spec.dims[j] or spec.dims[j] <= 0:
                return False
        return True

    cdef int64_t match_request(self, list inputs, list outputs) except -2:
        """A request's tensors (InferTensor) and requested outputs (objects
        with a ``name``): its batch size (0 for a model that does not
        batch), or -1 where the rules decline."""
        cdef int64_t batch_size = 0
        cdef uint64_t seen = 0
        cdef InferTensor t
        cdef bint first = True
        if len(inputs) != <Py_ssize_t>self.inputs.size():
            return -1
        for item in inputs:
            if type(item) is not InferTensor:
                return -1
            t = <InferTensor>item
            if self.match_tensor(t.name, t.datatype, t.shape, first, &batch_size, &seen) < 0:
                return -1
            first = False
        seen = 0
        for out in outputs:
            if self.match_output_name(out.name, &seen) < 0:
                return -1
        return batch_size

    def check(self, list inputs, list outputs):
        """match_request for Python callers (tests): ``inputs`` as (name,
        datatype, shape) each, ``outputs`` names; the batch size, or None."""
        cdef InferTensor t
        cdef list tensors = []
        for name, datatype, shape in inputs:
            t = InferTensor(name, datatype, [], None)
            t.shape = shape  # as given (the constructor would make it a list)
            tensors.append(t)
        cdef int64_t batch_size = self.match_request(
            tensors, [RequestedOutput(name) for name in outputs])
        return None if batch_size < 0 else batch_size
