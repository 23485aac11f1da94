# cython: language_level=3
"""Two per-request steps of pyserver.model.version, compiled: validating a
request against the model's inputs and outputs, and cutting a batch's
outputs into each request's response.

Both run on the event loop's thread for every request, and as Python they
cost ~6 µs of the ~60 µs a gRPC call takes there (measured at c16).
``validate`` is the one authority, with Triton's rules and texts; its
typed first stage (``check``) takes the plain case (fixed dims, no reshape,
every input required) and says yes only, so anything else (an error, a
reshape, optional or variable-size inputs) runs the general walk, which
decides. A model whose inputs are not all plain skips the first stage.
"""

from libc.stdint cimport int64_t

from pyserver.engine.plain_spec cimport PlainSpec
from pyserver.engine.types cimport (
    InferRequest,
    InferTensor,
    PendingRequest,
    PlainPending,
    RequestedOutput,
    new_output,
    new_response,
    new_tensor,
)

from pyserver.kernel.errors import Code, ServerError


cdef object invalid_arg(str message):
    return ServerError(Code.INVALID_ARG, message)


cdef str _rid(request):
    """Triton's prefix of a request's validation errors (built only for one)."""
    return f"[request id: {request.id or '<id_unknown>'}] "


cdef str _fmt_shape(shape):
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


# Core's note on the shape error of a model that batches.
_IMPLICIT_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size.")


cdef object _shape_error(request, str input_name, str model_name, tuple expected, shape,
                         bint batching):
    """Core's text for an input whose shape the config does not allow."""
    return invalid_arg(
        f"{_rid(request)}unexpected shape for input '{input_name}' for model '{model_name}'. "
        f"Expected {_fmt_shape(expected)}, got {_fmt_shape(shape)}. "
        + (_IMPLICIT_BATCH_NOTE if batching else ""))


cdef class RequestPath:
    """One model version's input specs and outputs, as the two steps need them."""

    # every input is plain (fixed dims, no reshape, required, not ragged):
    # the first stage's rules, which the protocols' direct readers share;
    # else None (the walk decides every request)
    cdef readonly PlainSpec plain
    cdef bint batching
    cdef object max_batch_size
    cdef dict output_types  # name -> datatype
    cdef list all_outputs  # RequestedOutput per output, config order
    cdef object model_name
    cdef object version
    cdef object output_tensor  # ModelVersion._output_tensor (classification)
    cdef object wire_of  # numpy dtype -> wire datatype (core.dtypes.numpy_to_wire)
    cdef dict wire_types  # what wire_of said, by dtype
    cdef dict specs  # name -> TensorSpec (the general walk)
    cdef list required_inputs
    cdef bint has_optional
    cdef list enforced  # variable-size, not ragged: the equal-shape rule's inputs
    cdef bint enforce_shapes

    def __init__(self, model_name, version, inputs, outputs, max_batch_size, all_outputs,
                 output_tensor, wire_of, required_inputs=(), enforced=(),
                 enforce_shapes=False):
        """``inputs``/``outputs``: model.version TensorSpec by name."""
        self.specs = dict(inputs)
        self.required_inputs = list(required_inputs)
        self.has_optional = any(s.optional for s in inputs.values())
        self.enforced = list(enforced)
        self.enforce_shapes = enforce_shapes
        self.wire_of = wire_of
        self.wire_types = {}
        self.model_name = model_name
        self.version = version
        self.max_batch_size = max_batch_size
        self.batching = max_batch_size > 0
        plain = all(not s.variable and s.reshape is None and not s.optional and not s.ragged
                    for s in inputs.values())
        self.plain = PlainSpec([(name, s.datatype, s.dims) for name, s in inputs.items()],
                               list(outputs), max_batch_size) if plain else None
        self.output_types = {name: s.datatype for name, s in outputs.items()}
        self.all_outputs = list(all_outputs)
        self.output_tensor = output_tensor

    cpdef tuple validate(self, InferRequest request):
        """``(arrays by name, batch size, shape key for the equal-shape
        rule)``; ServerError with Triton's text when the request breaks a
        rule."""
        cdef tuple plain = self.check(request)
        if plain is not None:
            return plain
        return self.walk(request)

    def _count_error(self, InferRequest request, list given):
        """Core's text for a request without every required input, or with
        more inputs than the model has."""
        got = ",".join(f"'{n}'" for n in given)
        lack = ",".join(f"'{n}'" for n in self.required_inputs if n not in given)
        n_req = len(self.required_inputs)
        if self.has_optional:
            expected = f"expected number of inputs between {n_req} and {len(self.specs)}"
        else:
            expected = f"expected {n_req} inputs"
        raise invalid_arg(
            f"{_rid(request)}{expected} but got {len(given)} inputs for model "
            f"'{self.model_name}'. Got input(s) [{got}], but missing required input(s) [{lack}]. "
            "Please provide all required input(s).")

    def walk(self, InferRequest request):
        """Every rule, in Triton's order, with its text: validate without its
        first stage (the differential tests compare the two)."""
        name = self.model_name
        arrays = {}
        batching = self.max_batch_size > 0
        batch_size = 0
        # As core meets them: a tensor named twice (as the request is made),
        # a requested output the model lacks, how many inputs came, then each
        # input. Core's texts; the model-lookup ones carry no request id.
        names = set()
        for t in request.inputs:
            if t.name in names:
                raise invalid_arg(f"{_rid(request)}input '{t.name}' already exists in request")
            names.add(t.name)
        seen = set()
        for out in request.outputs:
            if out.name in seen:
                raise invalid_arg(f"{_rid(request)}output '{out.name}' already exists in request")
            seen.add(out.name)
        for out in request.outputs:
            if out.name not in self.output_types:
                raise invalid_arg(f"unexpected inference output '{out.name}' for model '{name}'")
        if len(names) > len(self.specs) or len(names) < len(self.required_inputs):
            self._count_error(request, [t.name for t in request.inputs])
        for t in request.inputs:
            spec = self.specs.get(t.name)
            if spec is None:
                raise invalid_arg(f"unexpected inference input '{t.name}' for model '{name}'")
            if t.datatype != spec.datatype:
                raise invalid_arg(
                    f"{_rid(request)}inference input '{t.name}' data-type is '{t.datatype}', but model "
                    f"'{name}' expects '{spec.datatype}'")
            shape = t.shape
            if batching:
                if not shape:
                    raise _shape_error(request, t.name, name, (-1,) + spec.dims, shape, True)
                if not arrays:
                    batch_size = int(shape[0])
                elif int(shape[0]) != batch_size:
                    raise invalid_arg(
                        f"{_rid(request)}input '{t.name}' batch size does not match other "
                        f"inputs for '{name}'")
                dims = shape[1:]
            else:
                dims = shape
            if not spec.matches(dims):
                raise _shape_error(request, t.name, name,
                                   ((-1,) if batching else ()) + spec.dims, shape, batching)
            data = t.data
            if spec.reshape is not None:
                data = data.reshape(((batch_size,) if batching else ()) + spec.reshape)
            arrays[t.name] = data
        if len(arrays) < len(self.specs):
            if any(n not in arrays for n in self.required_inputs):
                self._count_error(request, list(arrays))
        if batching and batch_size > self.max_batch_size:
            raise invalid_arg(
                f"{_rid(request)}inference request batch-size must be <= {self.max_batch_size} for '{name}'")
        if batching and batch_size == 0 and arrays:
            # a batch of no rows has nothing to run and no outputs to shape
            raise invalid_arg(
                f"{_rid(request)}inference request batch-size must be >= 1 for '{name}'")
        shape_key = 0
        if self.enforce_shapes and batching:
            key = tuple(tuple(arrays[n].shape[1:]) if n in arrays else None for n in self.enforced)
            if self.has_optional:
                key = (key, tuple(sorted(arrays)))
            shape_key = hash(key) & 0xFFFFFFFFFFFFFFFF
        return arrays, batch_size, shape_key

    cpdef tuple check(self, InferRequest request):
        """``(arrays by name, batch size, shape key 0)`` for a plain request
        that passes every rule (``plain``'s); None when the general walk
        must decide."""
        cdef PlainSpec plain = self.plain
        if plain is None:
            return None
        cdef list inputs = request.inputs
        cdef int64_t batch_size = plain.match_request(inputs, request.outputs)
        if batch_size < 0:
            return None
        cdef dict arrays = {}
        cdef InferTensor t
        for item in inputs:
            t = <InferTensor>item
            arrays[t.name] = t.data
        return (arrays, batch_size, 0)

    cdef object _tensor(self, RequestedOutput out, value, datatype):
        """One requested output as sent back: as is, or (asked for
        classification) through ModelVersion._output_tensor."""
        if out.parameters and "classification" in out.parameters:
            return self.output_tensor(out, value, datatype, self.batching)
        return new_tensor(out.name, datatype, list(value.shape), value, None)

    def scatter(self, list requests, dict outputs, Py_ssize_t total, dict split=None):
        """Sets each pending request's ``response``: its rows of the outputs
        it asked for (views, no copies). The batch dimension of ``outputs``
        was checked by the caller. ``split``: outputs already cut per request
        (batch outputs), {name: [part of each request]}. A plain record's
        (types.PlainPending) is its rows of every output by name: its
        protocol writes its answer, typed by the config as here
        (plain_answer where its writer declines)."""
        cdef Py_ssize_t n = len(requests), i, offset
        cdef dict rows
        cdef PendingRequest first
        if n == 1 and not split:
            first = <PendingRequest?>requests[0]
            first.response = outputs if isinstance(first, PlainPending) else \
                self.answer(first.request, outputs)
            return
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
            if isinstance(p, PlainPending):
                p.response = {name: parts[i] for name, parts in rows.items()}
                continue
            req = <InferRequest?>p.request
            tensors = []
            for out in (req.outputs or self.all_outputs):
                name = out.name
                value = rows[name][i]
                tensors.append(self._tensor(out, value, types[name]))
            p.response = new_response(self.model_name, self.version, req.id, tensors)

    cpdef object answer(self, InferRequest req, dict outputs):
        """The response of a request that ran alone: the outputs it asked for
        (all, when it named none), as ``scatter`` cuts them."""
        return self._answer(req.id, req.outputs or self.all_outputs, outputs)

    def plain_answer(self, request_id, list wanted, dict outputs, parameters=None):
        """``answer``'s InferResponse for a plain record whose rows
        ``scatter`` gave it (its id, the output names it asked for or None
        for all), for the answer its protocol's own writer does not write."""
        return self._answer(request_id, self.all_outputs if wanted is None else
                            [new_output(name, None) for name in wanted], outputs)

    cdef object _answer(self, request_id, wanted, dict outputs):
        cdef list tensors = []
        cdef dict types = self.output_types
        for out in wanted:
            name = (<RequestedOutput?>out).name
            tensors.append(self._tensor(out, outputs[name], types[name]))
        return new_response(self.model_name, self.version, request_id, tensors)

    def responses(self, list requests, results, object other):
        """Each request's ``response`` from its backend's result, for a
        backend that answers per request: outputs (a dict) or (outputs,
        parameters) become the response (see response), an exception stays
        as it is, None (answered through its stream) stays None; any other
        result is ``other(p, result)``'s to set."""
        cdef Py_ssize_t i
        cdef PendingRequest p
        for i in range(len(requests)):
            p = <PendingRequest?>requests[i]
            result = results[i]
            kind = type(result)
            if kind is dict:
                p.response = self.response(p, result, None)
            elif kind is tuple:
                p.response = self.response(p, result[0], result[1])
            elif result is None:
                p.response = None
            elif isinstance(result, BaseException):
                p.response = result
            else:
                other(p, result)

    cpdef object response(self, p, dict outputs, parameters):
        """The response of pending request ``p`` from the outputs its backend
        made for it alone (a backend that answers per request): those it
        asked for (all, when it named none) that the backend gave, in its
        order, typed by their arrays. A plain record's (types.PlainPending)
        is its outputs, or ``(outputs, parameters)``, as they are: its
        protocol writes its answer (plain_response where its writer
        declines)."""
        if isinstance(p, PlainPending):
            return (outputs, parameters) if parameters else outputs
        cdef InferRequest req = <InferRequest?>(<PendingRequest?>p).request
        return self._response(req.id, req.outputs or self.all_outputs, outputs, parameters)

    cpdef object plain_response(self, request_id, list wanted, dict outputs, parameters):
        """``response``'s InferResponse for a plain record (its id, the
        output names it asked for or None for all), for the answer its
        protocol's own writer does not write."""
        return self._response(request_id, self.all_outputs if wanted is None else
                              [new_output(name, None) for name in wanted], outputs, parameters)

    cdef object _response(self, request_id, wanted, dict outputs, parameters):
        cdef list tensors = []
        cdef RequestedOutput out
        for item in wanted:
            out = <RequestedOutput?>item
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
                if datatype == "UINT16" and self.output_types.get(name) == "BF16":
                    datatype = "BF16"  # numpy has no bfloat16: its words travel as uint16
            tensors.append(self._tensor(out, value, datatype))
        r = new_response(self.model_name, self.version, request_id, tensors)
        if parameters:
            r.parameters = parameters
        return r
