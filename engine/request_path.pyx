# cython: language_level=3
"""Two per-request steps of pyserver.model.version, compiled for the common case:
checking a request's inputs against the model's, and cutting a batch's
outputs into each request's response.

Both run on the event loop's thread for every request, and as Python they
cost ~6 µs of the ~60 µs a gRPC call takes there (measured at c16). The
check only says yes: for anything out of the ordinary (an error, a reshape,
optional or variable-size inputs) it returns None and the Python code, which
owns every rule and error text, decides. So a request is accepted here only
if ModelVersion.validate would accept it with the same result.
"""

from pyserver.engine.types cimport InferRequest, InferTensor, new_response, new_tensor


cdef class RequestPath:
    """One model version's input specs and outputs, as the two steps need them."""

    cdef dict inputs  # name -> (datatype, dims) for the fast check
    cdef Py_ssize_t n_inputs
    cdef bint checks  # every input is plain: fixed dims, no reshape, required
    cdef bint batching
    cdef object max_batch_size
    cdef dict output_types  # name -> datatype
    cdef list all_outputs  # RequestedOutput per output, config order
    cdef object model_name
    cdef object version
    cdef object output_tensor  # ModelVersion._output_tensor (classification)
    cdef object wire_of  # numpy dtype -> wire datatype (core.dtypes.numpy_to_wire)
    cdef dict wire_types  # what wire_of said, by dtype

    def __init__(self, model_name, version, inputs, outputs, max_batch_size, all_outputs,
                 output_tensor, wire_of):
        """``inputs``/``outputs``: core.model TensorSpec by name."""
        self.wire_of = wire_of
        self.wire_types = {}
        self.model_name = model_name
        self.version = version
        self.max_batch_size = max_batch_size
        self.batching = max_batch_size > 0
        self.checks = all(not s.variable and s.reshape is None and not s.optional
                          and not s.ragged for s in inputs.values())
        self.inputs = {name: (s.datatype, s.dims) for name, s in inputs.items()}
        self.n_inputs = len(inputs)
        self.output_types = {name: s.datatype for name, s in outputs.items()}
        self.all_outputs = list(all_outputs)
        self.output_tensor = output_tensor

    cpdef tuple check(self, InferRequest request):
        """``(arrays by name, batch size, shape key 0)`` for a request that
        passes every rule; None when the Python validate must decide."""
        if not self.checks:
            return None
        cdef list inputs = request.inputs
        if len(inputs) != self.n_inputs:
            return None
        cdef dict arrays = {}
        cdef InferTensor t
        cdef tuple spec, dims
        cdef list shape
        cdef Py_ssize_t i, nd, first = 1 if self.batching else 0
        batch_size = 0
        for item in inputs:
            if type(item) is not InferTensor:
                return None
            t = <InferTensor>item
            spec = self.inputs.get(t.name)
            if spec is None or t.name in arrays or t.datatype != spec[0]:
                return None
            if type(t.shape) is not list:
                return None
            shape = <list>t.shape
            dims = <tuple>spec[1]
            nd = len(dims)
            if len(shape) != nd + first:
                return None
            if first:
                if not arrays:
                    batch_size = int(shape[0])
                    if batch_size < 0:
                        return None
                elif shape[0] != batch_size:
                    return None
            for i in range(nd):
                if shape[i + first] != dims[i]:
                    return None
            arrays[t.name] = t.data
        if first and batch_size > self.max_batch_size:
            return None
        cdef list outputs = request.outputs
        if outputs:
            names = set()
            for out in outputs:
                name = out.name
                if name not in self.output_types or name in names:
                    return None
                names.add(name)
        return (arrays, batch_size, 0)

    cdef object _tensor(self, out, value, datatype):
        """One requested output as sent back: as is, or (asked for
        classification) through ModelVersion._output_tensor."""
        if out.parameters and "classification" in out.parameters:
            return self.output_tensor(out, value, datatype, self.batching)
        return new_tensor(out.name, datatype, list(value.shape), value, None)

    def scatter(self, list requests, dict outputs, Py_ssize_t total, dict split=None):
        """Sets each pending request's ``response``: its rows of the outputs
        it asked for (views, no copies). The batch dimension of ``outputs``
        was checked by the caller. ``split``: outputs already cut per request
        (batch outputs), {name: [part of each request]}."""
        cdef Py_ssize_t n = len(requests), i, offset
        cdef dict rows
        if n == 1 or not self.batching:
            rows = {name: (value,) for name, value in outputs.items()}
        elif total == n:  # a row each: numpy splits them in C
            rows = {name: list(value.reshape((total, 1) + value.shape[1:]))
                    for name, value in outputs.items()}
        else:
            bounds = []
            offset = 0
            for p in requests:
                size = p.batch_size
                bounds.append((offset, offset + size))
                offset += size
            rows = {name: [value[a:b] for a, b in bounds] for name, value in outputs.items()}
        if split:
            rows.update(split)
        cdef list tensors
        cdef InferRequest req
        cdef dict types = self.output_types
        for i in range(n):
            p = requests[i]
            req = <InferRequest?>p.request
            tensors = []
            for out in (req.outputs or self.all_outputs):
                name = out.name
                value = rows[name][i]
                tensors.append(self._tensor(out, value, types[name]))
            p.response = new_response(self.model_name, self.version, req.id, tensors)

    def response(self, p, dict outputs, parameters):
        """The response of pending request ``p`` from the outputs its backend
        made for it alone (a backend that answers per request): those it
        asked for (all, when it named none) that the backend gave, in its
        order, typed by their arrays."""
        cdef InferRequest req = <InferRequest?>p.request
        cdef list tensors = []
        for out in (req.outputs or self.all_outputs):
            name = out.name
            value = outputs.get(name)
            if value is None:
                continue
            dtype = value.dtype
            if dtype.hasobject:
                datatype = "BYTES"
            else:
                datatype = self.wire_types.get(dtype)
                if datatype is None:
                    datatype = self.wire_types[dtype] = self.wire_of(dtype)
            tensors.append(self._tensor(out, value, datatype))
        r = new_response(self.model_name, self.version, req.id, tensors)
        if parameters:
            r.parameters = parameters
        return r
