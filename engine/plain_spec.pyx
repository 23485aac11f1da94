# cython: language_level=3
"""The plain case of a request against its model (csrc's PlainSpec: the
rules, for any thread), read two ways: in csrc from what the protocols'
readers parsed (csrc/protocol ReadPlainRequest, no Python object per
request: the HTTP and gRPC direct runs, handed ``c``) and here from an
InferRequest's tensors (RequestPath.check, for every other plain request).

A model is plain here when every input has fixed dims, no reshape, and is
required (RequestPath decides, and builds the spec). The rules only say
yes: a request they decline goes to RequestPath's general walk, the one
authority for every error and its text.
"""

from cpython.unicode cimport PyUnicode_AsUTF8AndSize

from pyserver.engine.types cimport InferTensor, RequestedOutput

from pyserver.kernel.dtypes import WIRE_TO_NUMPY


# An InferTensor's shape is read into this many dims on the stack (more: the walk).
DEF MAX_DIMS = 32


cdef class PlainSpec:
    """``inputs``: (name, datatype, dims without the batch dimension) each,
    ``outputs``: names, both in the config's order; ``max_batch_size``: the
    model's (0: it does not batch)."""

    def __init__(self, inputs, outputs, uint32_t max_batch_size):
        cdef vector[PlainInput] specs
        cdef vector[string] names
        cdef PlainInput spec
        for name, datatype, dims in inputs:
            spec.name = name.encode()
            spec.datatype = datatype.encode()
            spec.dims = list(dims)
            specs.push_back(spec)
        for name in outputs:
            names.push_back(name.encode())
        self.c.reset(new CPlainSpec(specs, names, max_batch_size))

    cdef Py_ssize_t match_tensor(self, name, datatype, shape, PlainMatch* match) except -2:
        """One input as Python objects (an InferTensor's name and datatype,
        str, and shape, a list of int): its index among the model's inputs,
        or -1 where it is not the model's, came before in this request
        (``match``), has another datatype or shape, or is of another type."""
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
        return self.c.get().MatchInput(string_view(name_utf8, <size_t>name_size),
                                       string_view(datatype_utf8, <size_t>datatype_size),
                                       dims, n, match)

    cdef Py_ssize_t match_output_name(self, name, PlainMatch* match) except -2:
        """The output called ``name`` (a str), asked for once in this
        request (``match``), by index; -1, or for anything else."""
        cdef Py_ssize_t size
        cdef const char* utf8
        if type(name) is not str:
            return -1
        utf8 = PyUnicode_AsUTF8AndSize(name, &size)
        return self.c.get().MatchOutput(string_view(utf8, <size_t>size), match)

    cdef int64_t match_request(self, list inputs, list outputs) except -2:
        """A request's tensors (InferTensor) and requested outputs (objects
        with a ``name``): its batch size (0 for a model that does not
        batch), or -1 where the rules decline."""
        cdef PlainMatch match
        cdef InferTensor t
        if len(inputs) != <Py_ssize_t>self.c.get().inputs().size():
            return -1
        for item in inputs:
            if type(item) is not InferTensor:
                return -1
            t = <InferTensor>item
            if self.match_tensor(t.name, t.datatype, t.shape, &match) < 0:
                return -1
        for out in outputs:
            if self.match_output_name(out.name, &match) < 0:
                return -1
        return match.batch_size

    cdef const string* output_name(self, size_t k) noexcept:
        return &self.c.get().outputs()[k]

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


cdef class PlainModel:
    """A model as the protocols' readers and writers of its plain requests
    see it: ``spec`` (the model's RequestPath.plain); ``inputs``: (name,
    numpy dtype) each; ``outputs``: (name, datatype) each, in the config's
    order; its name and version as the answer names them. A request it
    reads either runs as it is read (batch_execution.DirectRoute) or is
    queued as a plain record (types.PlainPending; admission.Route.records).
    ``respond(request_id, wanted, outputs, parameters)``: for records, the
    model's maker of the response a writer declines to write itself
    (RequestPath.plain_response or plain_answer); None for direct runs.
    ``typed_by_arrays``: the answer names an output's datatype by its array,
    as RequestPath.response does for a backend that answers per request;
    else by the config, as RequestPath.scatter does for a batch's rows (and
    a direct run's outputs)."""

    def __init__(self, PlainSpec spec, list inputs, list outputs, model_name, version,
                 respond=None, bint typed_by_arrays=False):
        self.spec = spec
        self.input_names = []
        self.input_dtypes = []
        for name, dtype in inputs:
            self.input_names.append(name)
            self.input_dtypes.append(dtype)
            self.input_itemsizes.push_back(0 if dtype.hasobject else dtype.itemsize)
        self.output_names = []
        self.output_types = []
        self.output_dtypes = []
        for name, datatype in outputs:
            self.output_datatypes.push_back(datatype.encode())
            self.output_names.append(name)
            self.output_types.append(datatype)
            self.output_dtypes.append(None if datatype in ("BF16", "BYTES")
                                      else WIRE_TO_NUMPY.get(datatype))
        self.model_name = model_name
        self.version = version
        self.respond = respond
        self.typed_by_arrays = typed_by_arrays
