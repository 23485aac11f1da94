# cython: language_level=3
"""Protocol-neutral request and response objects shared by every frontend
(pyserver.kernel.types re-exports them).

A frontend decodes its wire format into an ``InferRequest`` (tensors as numpy
arrays, views over the received bytes where possible), awaits
``Server.infer(request)`` and encodes the ``InferResponse`` it gets back.

Extension types rather than Python classes because a request makes several
of them on the event loop's thread: built here they cost a third (measured:
230 ns an InferTensor against 670 ns as a class with __slots__), and the
codecs fill them in C. Their attributes behave as plain attributes.
"""

import asyncio
import logging

_log = logging.getLogger("pyserver.core")


cdef class InferTensor:
    """One named tensor: wire datatype, shape, data.

    ``data`` is a numpy array of the given shape; for BYTES it is an object
    array of ``bytes``.
    """

    def __init__(self, name, datatype, shape, data, parameters=None):
        self.name = name
        self.datatype = datatype
        self.shape = list(shape)
        self.data = data
        self.parameters = parameters if parameters else {}

    def __repr__(self):
        return f"InferTensor({self.name!r}, {self.datatype}, {self.shape})"


cdef class RequestedOutput:
    """An output the client asked for, with its per-output parameters
    (``binary_data``, ``classification``, shared memory ...)."""

    def __init__(self, name, parameters=None):
        self.name = name
        self.parameters = parameters if parameters else {}

    def __repr__(self):
        return f"RequestedOutput({self.name!r})"


cdef class InferRequest:
    """One inference request as the core sees it.

    ``model_version`` is the string from the URL / RPC; "" means "let the
    version policy choose". ``outputs`` empty means "all outputs".
    ``priority`` 0 and ``timeout_us`` 0 mean "model default".
    ``parent_trace``: None for a client's request (its model's trace
    settings sample it); for one the server makes itself (an ensemble's
    step, a BLS call) the id of the trace it belongs under, or 0 when it is
    not traced, as Triton traces such requests only as children.
    ``trace``: None, or a frontend's receive stamps, then the request's
    trace record once it is sampled (runtime/tracing.py).
    """

    def __init__(self, model_name, model_version="", id="", inputs=None, outputs=None,
                 parameters=None, priority=0, timeout_us=0, parent_trace=None):
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.inputs = inputs if inputs is not None else []
        self.outputs = outputs if outputs is not None else []
        self.parameters = parameters if parameters else {}
        self.priority = priority
        self.timeout_us = timeout_us
        self.parent_trace = parent_trace

    def __repr__(self):
        return f"InferRequest({self.model_name!r}, {self.model_version!r}, id={self.id!r})"


cdef class InferResponse:
    """The result of one request: outputs in the order the client asked for
    them (or the model's config order when it asked for none)."""

    def __init__(self, model_name, model_version, id, outputs, parameters=None):
        self.model_name = model_name
        self.model_version = model_version
        self.id = id
        self.outputs = outputs
        self.parameters = parameters if parameters else {}

    def __repr__(self):
        return f"InferResponse({self.model_name!r}, {self.model_version!r}, id={self.id!r})"


cdef class PendingRequest:
    """A request in flight: what the engine carries through its queue (as an
    opaque token) and hands back in a Batch; ``response`` is set when its
    batch has run, ``id`` is its queue token, ``trace`` its trace record
    while it is traced."""

    def __init__(self, request, future, arrays, batch_size):
        _init_pending(self, request, future, arrays, batch_size)


cdef inline void _init_pending(PendingRequest p, request, future, arrays, batch_size):
    p.request = request
    p.future = future
    p.arrays = arrays
    p.batch_size = batch_size
    p.response = None
    p.id = 0
    p.trace = None



cdef class PlainPending(PendingRequest):
    """A plain request (no parameters the model sees, no trace, inputs its
    model's PlainSpec takes) that a protocol's reader made into its queue
    entry itself, with no InferRequest (``request`` is None): ``arrays``
    its inputs by name, ``request_id`` and ``wanted`` (the outputs it named,
    or None for all) what its worker and its answer need. Its ``response``,
    once its batch ran, is the outputs its backend gave (a dict), or
    ``(outputs, parameters)``, or an exception: its reader's protocol
    writes the answer (request_path.RequestPath.response). A protocol
    subclasses it with what its writer keeps per request."""

    def __init__(self, future, dict arrays, batch_size, request_id, list wanted):
        init_plain(self, future, arrays, batch_size, request_id, wanted)


cdef int init_plain(PlainPending p, future, dict arrays, batch_size, request_id,
                    list wanted) except -1:
    _init_pending(p, None, future, arrays, batch_size)
    p.request_id = request_id
    p.wanted = wanted
    return 0


cdef class DoneCallback:
    """A done-callback an ImmediateFuture calls as a C call (``done``), with
    no Python call per request; as a callable (``__call__``) it serves an
    asyncio future too. The protocols' answer steps subclass it, in Cython
    (``done`` is a C method: a Python subclass could not override it)."""

    cdef int done(self, fut) except -1:
        raise NotImplementedError

    def __call__(self, fut):
        self.done(fut)


cdef class ImmediateFuture:
    """A future for ``Server.submit`` whose done-callback runs the moment the
    outcome is set, inside the completion of the request's batch, rather
    than from the next loop iteration as an asyncio.Future's does: no
    handle scheduled, no iteration waited, per request. For a frontend that
    answers from a callback and never awaits (the gRPC ModelInfer handler).
    It has what Server and such a frontend use of asyncio.Future: one
    done-callback, set_result / set_exception, cancel, done, cancelled,
    result, exception. A callback's exception is logged, as the event loop
    would, and never reaches the code that set the outcome."""

    def done(self):
        return self._state != 0

    def cancelled(self):
        return self._state == 2

    def set_result(self, result):
        self._settle(result, None)

    def set_exception(self, exception):
        self._settle(None, exception)

    cdef _settle(self, result, exception):
        if self._state:
            raise asyncio.InvalidStateError("the outcome is already set")
        self._result = result
        self._exception = exception
        self._state = 1
        self._fire()

    def cancel(self, msg=None):
        if self._state:
            return False
        self._state = 2
        self._fire()
        return True

    def result(self):
        if self._state == 2:
            raise asyncio.CancelledError()
        if self._state == 0:
            raise asyncio.InvalidStateError("the outcome is not set yet")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self):
        if self._state == 2:
            raise asyncio.CancelledError()
        if self._state == 0:
            raise asyncio.InvalidStateError("the outcome is not set yet")
        return self._exception

    def add_done_callback(self, fn, *, context=None):
        if self._callback is not None:
            raise RuntimeError("an ImmediateFuture takes one done-callback")
        if self._state:
            self._call(fn)
        else:
            self._callback = fn

    cdef _fire(self):
        fn, self._callback = self._callback, None
        if fn is not None:
            self._call(fn)

    cdef _call(self, fn):
        try:
            if isinstance(fn, DoneCallback):
                (<DoneCallback>fn).done(self)
            else:
                fn(self)
        except Exception:
            _log.exception("a done-callback failed")


cdef InferTensor new_tensor(object name, object datatype, list shape, object data,
                            dict parameters):
    """An InferTensor without the call: ``shape`` is taken, not copied."""
    cdef InferTensor t = InferTensor.__new__(InferTensor)
    t.name = name
    t.datatype = datatype
    t.shape = shape
    t.data = data
    t.parameters = parameters if parameters is not None else {}
    return t


cdef InferResponse new_response(object model_name, object model_version, object id,
                                list outputs):
    cdef InferResponse r = InferResponse.__new__(InferResponse)
    r.model_name = model_name
    r.model_version = model_version
    r.id = id
    r.outputs = outputs
    r.parameters = {}
    return r


cdef RequestedOutput new_output(object name, dict parameters):
    cdef RequestedOutput o = RequestedOutput.__new__(RequestedOutput)
    o.name = name
    o.parameters = parameters if parameters else {}
    return o


cdef InferRequest new_request(object model_name, object model_version, object id, list inputs,
                              list outputs, dict parameters, object priority, object timeout_us):
    """An InferRequest without the call: the lists and ``parameters`` are
    taken, not copied."""
    cdef InferRequest r = InferRequest.__new__(InferRequest)
    r.model_name = model_name
    r.model_version = model_version
    r.id = id
    r.inputs = inputs
    r.outputs = outputs
    r.parameters = parameters
    r.priority = priority
    r.timeout_us = timeout_us
    return r


# Request parameters the frontends turn into request properties; the rest
# are the model's own (a Python model's InferenceRequest.parameters(), a C
# backend's TRITONBACKEND_RequestParameter).
RESERVED_PARAMETERS = frozenset(("sequence_id", "sequence_start", "sequence_end", "priority",
                                 "timeout", "binary_data_output"))
SEQUENCE_START_FLAG = 1  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
SEQUENCE_END_FLAG = 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_END


cpdef tuple request_properties(object params):
    """(correlation ID (an int or a str; 0 when none), Triton's request
    flags, the model's own parameters) from a request's parameters."""
    if not params:
        return 0, 0, {}
    cdef int flags = 0
    if params.get("sequence_start") is True:
        flags |= SEQUENCE_START_FLAG
    if params.get("sequence_end") is True:
        flags |= SEQUENCE_END_FLAG
    user = {k: v for k, v in params.items() if k not in RESERVED_PARAMETERS}
    return params.get("sequence_id", 0), flags, user
