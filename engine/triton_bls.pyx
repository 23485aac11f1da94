# BLS from Triton C backends: the hooks csrc/src/triton_inference.cc calls
# when a backend runs inference on another model of its server. This module
# only converts: a TRITONSERVER_InferenceRequest into plain Python values for
# the server's router (pyserver/backends/triton_bls.py), a response of the
# server into a Completion the library's callback thread hands the backend.
# cython: language_level=3
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.utility cimport move
from libcpp.vector cimport vector

import numpy as np

from pyserver.engine.triton_parameters cimport Parameter, parameter_of, parameter_value

from pyserver.kernel.dtypes import BYTES_CODE, CODE_TO_NUMPY, WIRE_TO_CODE
from pyserver.kernel.dtypes import deserialize_bytes_tensor, serialize_bytes_tensor
from pyserver.kernel.errors import Code, ServerError


cdef extern from "pyserver/triton/inference.h" nogil:
    ctypedef enum TRITONSERVER_Error_Code:
        TRITONSERVER_ERROR_INTERNAL
    ctypedef enum TRITONSERVER_DataType:
        TRITONSERVER_TYPE_INVALID
    TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg)

    cdef cppclass InputSpan "pyserver::triton::InputSpan":
        const void* base
        size_t byte_size

    cdef cppclass RequestInput "pyserver::triton::RequestInput":
        string name
        TRITONSERVER_DataType datatype
        vector[int64_t] shape
        cbool raw
        vector[InputSpan] spans
        uint64_t byte_size

    cdef cppclass TRITONSERVER_InferenceRequest:
        string model_name
        int64_t model_version
        string id
        uint32_t flags
        uint64_t correlation_id
        string correlation_id_string
        cbool correlation_id_is_string
        uint64_t priority
        uint64_t timeout_us
        vector[RequestInput] inputs
        vector[string] requested_outputs
        vector[Parameter] parameters
        uint64_t parent_trace
        TRITONSERVER_InferenceTrace* program_trace

    ctypedef enum TRITONSERVER_InferenceTraceActivity:
        TRITONSERVER_TRACE_CUSTOM_ACTIVITY
    ctypedef enum TRITONSERVER_InferenceTraceLevel:
        TRITONSERVER_TRACE_LEVEL_TIMESTAMPS
        TRITONSERVER_TRACE_LEVEL_TENSORS

    cdef cppclass ProgramTrace "pyserver::triton::ProgramTrace":
        uint32_t level

    cdef cppclass TRITONSERVER_InferenceTrace:
        uint64_t id
        uint64_t parent_id
        ProgramTrace program

    cdef cppclass TraceActivity "pyserver::triton::TraceActivity":
        TRITONSERVER_InferenceTraceActivity activity
        uint64_t timestamp_ns
        cbool tensor
        string name
        TRITONSERVER_DataType datatype
        vector[int64_t] shape
        vector[char] bytes

    cdef cppclass TraceReport "pyserver::triton::TraceReport":
        TRITONSERVER_InferenceTrace* trace
        ProgramTrace program
        uint64_t id
        uint64_t parent_id
        string model_name
        int64_t model_version
        string request_id
        vector[TraceActivity] activities

    void DeliverTrace "pyserver::triton::DeliverTrace"(TraceReport report)

    cdef cppclass Submission "pyserver::triton::Submission":
        uint64_t token

    cdef cppclass ResponseTensor "pyserver::triton::ResponseTensor":
        string name
        TRITONSERVER_DataType datatype
        vector[int64_t] shape
        const char* data
        size_t byte_size
        shared_ptr[const void] keep

    cdef cppclass Completion "pyserver::triton::Completion":
        cbool has_response
        cbool has_error
        TRITONSERVER_Error_Code error_code
        string error_message
        int64_t model_version
        vector[ResponseTensor] outputs
        vector[Parameter] parameters
        cbool final

    ctypedef TRITONSERVER_Error* (*ModelInfoFn)(void*, const char*, int64_t, cbool*, uint32_t*)
    ctypedef TRITONSERVER_Error* (*SubmitFn)(void*, TRITONSERVER_InferenceRequest*,
                                             shared_ptr[Submission])

    ctypedef TRITONSERVER_Error* (*LoadModelFn)(void*, const char*,
                                                const vector[const Parameter*]&)
    ctypedef TRITONSERVER_Error* (*UnloadModelFn)(void*, const char*, cbool)
    ctypedef TRITONSERVER_Error* (*CancelFn)(void*, uint64_t)

    cdef cppclass ServerHooks "pyserver::triton::ServerHooks":
        ModelInfoFn model_info
        SubmitFn submit
        LoadModelFn load_model
        UnloadModelFn unload_model
        CancelFn cancel

    void SetServerHooks "pyserver::triton::SetServerHooks"(const ServerHooks& hooks)
    void Deliver "pyserver::triton::Deliver"(shared_ptr[Submission] submission,
                                             Completion completion)
    void DrainDeliveries "pyserver::triton::DrainDeliveries"()
    shared_ptr[const void] Lend "pyserver::triton::Lend"(void* owner)
    vector[void*] TakeReturned "pyserver::triton::TakeReturned"()


cdef class ServerHandle:
    """One server as C backends see it: TRITONBACKEND_ModelServer names it to
    the models made with it. ``router`` answers model_info(name, version)
    -> (ready, decoupled), submit(request_description, call),
    load_model(name, parameters), unload_model(name, dependents) and
    cancel(token) (a submitted call's ``token``) from any thread
    (pyserver.backends.triton_bls.BlsRouter)."""

    def __cinit__(self, router):
        self.router = router
        self.server.owner = <void*>self


cdef TRITONSERVER_Error* server_error(err):
    if isinstance(err, ServerError):
        code, message = int(err.code) - 1, str(err.message)
    else:
        code, message = int(Code.INTERNAL) - 1, f"{type(err).__name__}: {err}"
    return TRITONSERVER_ErrorNew(<TRITONSERVER_Error_Code><int>code, message.encode())


cdef TRITONSERVER_Error* _model_info(void* owner, const char* name, int64_t version,
                                     cbool* ready, uint32_t* txn_flags) noexcept with gil:
    try:
        is_ready, decoupled = (<ServerHandle>owner).router.model_info(
            name.decode("utf-8", "replace"), version)
        ready[0] = is_ready
        txn_flags[0] = 2 if decoupled else 1  # TRITONSERVER_TXN_DECOUPLED / _ONE_TO_ONE
        return NULL
    except BaseException as err:
        return server_error(err)


cdef object _input_array(RequestInput& inp):
    """The input as a numpy array: a view of the backend's bytes when they
    are one span (valid until the request's release callback, which comes
    after the final response), else a copy of them joined."""
    cdef size_t i
    if inp.spans.size() == 1 and inp.byte_size > 0:
        data = memoryview(<char[:inp.byte_size]><char*>inp.spans[0].base)
    else:
        data = b"".join([(<char*>inp.spans[i].base)[:inp.spans[i].byte_size]
                         for i in range(inp.spans.size()) if inp.spans[i].byte_size])
    shape = tuple(inp.shape)
    if inp.raw:
        return np.frombuffer(data, dtype=np.uint8)
    code = <int>inp.datatype
    if code == BYTES_CODE:
        return deserialize_bytes_tensor(bytes(data)).reshape(shape)
    dtype = CODE_TO_NUMPY.get(code)
    if dtype is None:
        raise ServerError(Code.INVALID_ARG, f"input '{inp.name.decode()}' has an unknown data "
                                            f"type {code}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


cdef TRITONSERVER_Error* _submit(void* owner, TRITONSERVER_InferenceRequest* r,
                                 shared_ptr[Submission] submission) noexcept with gil:
    cdef size_t i
    cdef BlsCall call
    try:
        inputs = []
        for i in range(r.inputs.size()):
            inputs.append((r.inputs[i].name.decode(), <int>r.inputs[i].datatype,
                           bool(r.inputs[i].raw), _input_array(r.inputs[i])))
        parameters = {}
        for i in range(r.parameters.size()):
            parameters[r.parameters[i].name.decode()] = parameter_value(r.parameters[i])
        if r.correlation_id_is_string:
            correlation_id = r.correlation_id_string.decode()
        else:
            correlation_id = r.correlation_id
        description = {
            "model_name": r.model_name.decode(), "model_version": r.model_version,
            "id": r.id.decode("utf-8", "replace"), "flags": r.flags,
            "correlation_id": correlation_id, "priority": r.priority,
            "timeout_us": r.timeout_us, "inputs": inputs,
            "outputs": [r.requested_outputs[i].decode()
                        for i in range(r.requested_outputs.size())],
            "parameters": parameters,
            "trace": r.parent_trace,
            "program_trace": _program_trace(r.program_trace) if r.program_trace else None,
        }
        global _last_token
        _last_token += 1  # under the GIL
        submission.get().token = _last_token
        call = BlsCall.__new__(BlsCall)
        call.submission = submission
        call.token = _last_token
        (<ServerHandle>owner).router.submit(description, call)
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _load_model(void* owner, const char* name,
                                     const vector[const Parameter*]& given) noexcept with gil:
    cdef size_t i
    try:
        parameters = {}
        for i in range(given.size()):
            parameters[given[i].name.decode()] = parameter_value(given[i][0])
        (<ServerHandle>owner).router.load_model(name.decode("utf-8", "replace"), parameters)
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _unload_model(void* owner, const char* name,
                                       cbool unload_dependents) noexcept with gil:
    try:
        (<ServerHandle>owner).router.unload_model(name.decode("utf-8", "replace"),
                                                  bool(unload_dependents))
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _cancel(void* owner, uint64_t token) noexcept with gil:
    try:
        (<ServerHandle>owner).router.cancel(token)
        return NULL
    except BaseException as err:
        return server_error(err)


# Names the submitted calls (Submission::token), for the cancel hook.
cdef uint64_t _last_token = 0


# The activities by the names the server's tracer records them under;
# what is not among them is a backend's own (CUSTOM_ACTIVITY).
_ACTIVITIES = {name: code for code, name in enumerate((
    "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "TENSOR_QUEUE_INPUT",
    "TENSOR_BACKEND_INPUT", "TENSOR_BACKEND_OUTPUT"))}



cdef ProgramTraceRef _program_trace(TRITONSERVER_InferenceTrace* trace):
    cdef ProgramTraceRef ref = ProgramTraceRef.__new__(ProgramTraceRef)
    ref.trace = trace
    ref.program = trace.program
    ref.id = trace.id
    ref.parent_id = trace.parent_id
    return ref


cdef class ProgramTraceRef:
    """A trace a program made and gave to TRITONSERVER_ServerInferAsync
    (TRITONSERVER_InferenceTraceNew): the request is traced as it (``id``,
    ``parent_id``, ``level``: TRACE_LEVEL_* bits), and so are the requests
    the server spawns for it, each a child with an id of its own. The
    program owns the trace; report() hands it back."""
    cdef TRITONSERVER_InferenceTrace* trace
    cdef ProgramTrace program
    cdef readonly uint64_t id
    cdef readonly uint64_t parent_id
    # the server's tracer made a record for it (else it is released unrecorded)
    cdef public bint recorded

    @property
    def timestamps(self):
        """Whether the program asked for the timestamps (its level)."""
        return bool(self.program.level & TRITONSERVER_TRACE_LEVEL_TIMESTAMPS)

    @property
    def tensors(self):
        """Whether the program asked for the tensors (its level)."""
        return bool(self.program.level & TRITONSERVER_TRACE_LEVEL_TENSORS)

    def report(self, bint own, uint64_t trace_id, uint64_t parent_id, str model_name,
               model_version, str request_id, list timestamps, list tensors):
        """What one request traced under this trace recorded, to the
        program's callbacks on the library's callback thread: ``own``, this
        trace's own request's (else a child's, ``trace_id``); ``timestamps``
        (name, ns) pairs; ``tensors`` (activity name, tensor name, wire
        datatype, array). Then the trace goes to the program's release
        callback."""
        cdef TraceReport report
        cdef TraceActivity* activity
        cdef const unsigned char[::1] view
        report.trace = self.trace if own else NULL
        report.program = self.program
        report.id = trace_id
        report.parent_id = parent_id
        report.model_name = model_name.encode()
        report.model_version = int(model_version) if model_version not in (None, "") else -1
        report.request_id = request_id.encode()
        report.activities.resize(len(timestamps) + len(tensors))
        i = 0
        for name, ns in timestamps:
            activity = &report.activities[i]
            code = _ACTIVITIES.get(name, <int>TRITONSERVER_TRACE_CUSTOM_ACTIVITY)
            activity.activity = <TRITONSERVER_InferenceTraceActivity><int>code
            activity.timestamp_ns = ns
            i += 1
        for kind, name, datatype, array in tensors:
            activity = &report.activities[i]
            activity.activity = <TRITONSERVER_InferenceTraceActivity><int>_ACTIVITIES[kind]
            activity.tensor = True
            activity.name = name.encode()
            activity.datatype = <TRITONSERVER_DataType><int>WIRE_TO_CODE[datatype]
            activity.shape = list(array.shape)
            if datatype == "BYTES":
                data = np.frombuffer(serialize_bytes_tensor(array), dtype=np.uint8)
            else:
                data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
            view = data
            if view.shape[0]:
                activity.bytes.assign(<const char*>&view[0], <const char*>&view[0] + view.shape[0])
            i += 1
        DeliverTrace(move(report))


cdef class BlsCall:
    """One submitted request: respond() (the server's on_response) hands each
    response to the backend, through the library's callback thread;
    ``token`` names it to TRITONSERVER_InferenceRequestCancel."""
    cdef shared_ptr[Submission] submission
    cdef readonly uint64_t token

    def respond(self, response, error, bint final):
        cdef Completion completion
        if not self.submission:
            return  # already final
        completion.final = final
        if error is not None:
            completion.has_error = True
            if isinstance(error, ServerError):
                completion.error_code = <TRITONSERVER_Error_Code><int>(int(error.code) - 1)
                completion.error_message = str(error.message).encode()
            else:
                completion.error_code = TRITONSERVER_ERROR_INTERNAL
                completion.error_message = f"{type(error).__name__}: {error}".encode()
        elif response is not None:
            completion.has_response = True
            version = response.model_version
            completion.model_version = int(version) if version not in (None, "") else -1
            _fill_outputs(completion, response.outputs)
            _fill_parameters(completion, response.parameters)
        Deliver(self.submission, move(completion))
        if final:
            self.submission.reset()


cdef _fill_outputs(Completion& completion, list outputs):
    """The response's tensors, lent to the callback thread without a copy:
    each array is held (Lend) until its bytes are in the backend's buffer."""
    cdef const unsigned char[::1] view
    cdef ResponseTensor* tensor
    _drop_returned()
    completion.outputs.resize(len(outputs))
    for i, t in enumerate(outputs):
        tensor = &completion.outputs[i]
        tensor.name = t.name.encode()
        tensor.datatype = <TRITONSERVER_DataType><int>WIRE_TO_CODE[t.datatype]
        arr = t.data
        tensor.shape = list(arr.shape)
        if t.datatype == "BYTES":
            data = np.frombuffer(serialize_bytes_tensor(arr), dtype=np.uint8)
        else:
            data = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        view = data
        tensor.byte_size = view.shape[0]
        tensor.data = <const char*>&view[0] if tensor.byte_size else NULL
        Py_INCREF(data)  # the lender's, until _drop_returned
        tensor.keep = Lend(<void*>data)


cdef _drop_returned():
    """Drops the references to arrays the callback thread is done with."""
    cdef vector[void*] returned = TakeReturned()
    for i in range(returned.size()):
        Py_DECREF(<object>returned[i])


cdef _fill_parameters(Completion& completion, dict parameters):
    for name, value in (parameters or {}).items():
        completion.parameters.push_back(parameter_of(name, value))


def drain():
    """Waits until every response delivered so far reached its backend (and
    lets go of the arrays they lent)."""
    with nogil:
        DrainDeliveries()
    _drop_returned()



cdef ServerHooks _hooks
_hooks.model_info = _model_info
_hooks.submit = _submit
_hooks.load_model = _load_model
_hooks.unload_model = _unload_model
_hooks.cancel = _cancel
SetServerHooks(_hooks)
