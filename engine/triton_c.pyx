# Backends built for Triton's C API (libtriton_NAME.so), driven through
# csrc/src/triton_*.cc: this module only converts a batch's arrays into
# TRITONBACKEND_Request objects, runs ModelInstanceExecute with the GIL
# released, and turns what the backend sent back into numpy arrays.
# cython: language_level=3
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t
from libcpp cimport bool as cbool
from libcpp.atomic cimport atomic
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from cpython.ref cimport Py_INCREF, Py_DECREF

import logging
import threading

import numpy as np

from pyserver.engine.batcher cimport BatchStrategy, CBatchStrategy, CScheduler, Scheduler
from pyserver.engine.memory cimport CMemoryPool, CudaMemoryPool, PinnedMemoryPool
from pyserver.engine.stats cimport CModelStats, ModelStats
from pyserver.engine.status cimport Status, check_status
from pyserver.engine.types cimport request_properties
from pyserver.engine.triton_bls cimport ServerHandle, TRITONSERVER_Server
from pyserver.engine.triton_parameters cimport Parameter, parameter_of, parameter_value
from pyserver.kernel.dtypes import CODE_TO_NUMPY, BYTES_CODE, WIRE_TO_CODE
from pyserver.kernel.dtypes import deserialize_bytes_tensor, serialize_bytes_tensor

log = logging.getLogger(__name__)


cdef extern from "pyserver/triton/response_sink.h" namespace "pyserver::triton" nogil:
    cdef cppclass OutputTensor:
        string name
        int datatype
        vector[int64_t] shape
        vector[char] data

    cdef cppclass SentResponse:
        vector[unique_ptr[OutputTensor]] outputs
        vector[Parameter] parameters
        cbool has_response
        cbool has_error
        int error_code
        string error_message
        cbool final

    ctypedef cbool (*DeliverHook)(void* owner, SentResponse* sent, cbool last) noexcept
    ctypedef void (*DoneHook)(void* owner) noexcept

    cdef cppclass OutputReshape "pyserver::triton::OutputRules::Reshape":
        vector[int64_t] to "to"
        vector[int64_t] from_ "from"

    cdef cppclass OutputRules:
        string model_name
        cbool batching
        vector[string] names
        vector[pair[string, OutputReshape]] reshapes

    cdef cppclass ResponseSink:
        void SetOutputRules(shared_ptr[OutputRules] rules)
        void WaitDone()
        vector[SentResponse] Take()
        cbool HandOff()
        void SetCancelled()
        const shared_ptr[atomic[cbool]]& cancelled_flag()
        vector[unique_ptr[OutputTensor]] TakeStates()
        void GoLate(DeliverHook deliver, DoneHook done, void* owner)
        cbool GoLateUnlessDone(DeliverHook deliver, DoneHook done, void* owner)
        cbool Detach()


cdef extern from "pyserver/triton/objects.h" nogil:
    ctypedef enum TRITONSERVER_MemoryType:
        pass
    const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype)

    ctypedef enum TRITONSERVER_DataType:
        TRITONSERVER_TYPE_INVALID

    cdef struct TRITONBACKEND_Input:
        string name
        TRITONSERVER_DataType datatype
        vector[int64_t] shape
        const void* data
        uint64_t byte_size

    ctypedef void (*TraceReportFn)(void*, uint64_t, uint64_t, const char*) noexcept

    cdef cppclass TRITONSERVER_InferenceTrace:
        uint64_t id
        uint64_t parent_id
        string model_name
        int64_t model_version
        string request_id
        TraceReportFn report
        void* reporter

    cdef cppclass TRITONBACKEND_Request:
        TRITONBACKEND_Request()
        string id
        TRITONSERVER_InferenceTrace trace
        uint64_t correlation_id
        string correlation_id_string
        cbool correlation_is_string
        uint32_t flags
        uint64_t timeout_us
        vector[Parameter] parameters
        vector[TRITONBACKEND_Input] inputs
        vector[string] requested_outputs
        shared_ptr[ResponseSink] sink
        const vector[string]* state_names
        string model_name

    cdef cppclass BatchTimes "pyserver::triton::BatchTimes":
        uint64_t exec_start_ns
        uint64_t compute_start_ns
        uint64_t compute_end_ns
        uint64_t exec_end_ns


cdef extern from "pyserver/triton/log.h" namespace "pyserver::triton" nogil:
    cdef cppclass CBackendLog "pyserver::triton::BackendLog":
        @staticmethod
        CBackendLog& Get()
        void SetLevels(cbool info, cbool warning, cbool error, cbool verbose)
        Status SetOutput(const string& path, cbool iso8601, cbool escape)


cdef extern from "pyserver/triton/objects.h" namespace "pyserver::triton" nogil:
    cdef cppclass MetricSample:
        vector[pair[string, string]] labels
        double value
        vector[double] buckets
        vector[uint64_t] bucket_counts

    cdef cppclass MetricFamilySnapshot:
        string name
        string description
        int kind
        vector[MetricSample] samples

    vector[MetricFamilySnapshot] SnapshotMetrics()


cdef extern from "pyserver/triton/library.h" namespace "pyserver::triton" nogil:
    cdef cppclass CBackendLibrary "pyserver::triton::BackendLibrary":
        pass

    cdef cppclass MemoryUsageEntry "pyserver::triton::MemoryUsage::Entry":
        TRITONSERVER_MemoryType type
        int64_t id
        uint64_t byte_size

    cdef cppclass CModel "pyserver::triton::Model":
        const string& config_json()
        vector[MemoryUsageEntry] memory_usage()

    cdef cppclass CInstance "pyserver::triton::Instance":
        Status Execute(vector[TRITONBACKEND_Request*]& requests, BatchTimes* reported)
        void SetStats(shared_ptr[CModelStats] stats)
        cbool has_ready_check()
        Status Ready()
        vector[MemoryUsageEntry] memory_usage()

    Status CreateLibrary "pyserver::triton::BackendLibrary::Create"(
        const string& path, const string& name, const string& config_json,
        unique_ptr[CBackendLibrary]* out)
    Status CreateInstance "pyserver::triton::Instance::Create"(
        CModel* model, const string& name, int kind, int device_id,
        const string& host_policy_json, unique_ptr[CInstance]* out)


cdef extern from "pyserver/triton/memory_manager.h" nogil:
    cdef cppclass TRITONBACKEND_MemoryManager:
        void UsePinnedPool(shared_ptr[CMemoryPool] pool)
        void UseDevicePool(int64_t device, shared_ptr[CMemoryPool] pool)


cdef extern from "pyserver/triton/memory_manager.h" namespace "pyserver::triton" nogil:
    TRITONBACKEND_MemoryManager& ServerMemoryManager()


cdef extern from "pyserver/triton/batch_strategy.h" namespace "pyserver::triton" nogil:
    cdef cppclass CLibraryBatchStrategy "pyserver::triton::LibraryBatchStrategy"(CBatchStrategy):
        pass

    Status CreateBatchStrategy "pyserver::triton::LibraryBatchStrategy::Create"(
        const string& path, const string& model_name, uint64_t model_version,
        const string& repository, const string& config_json,
        shared_ptr[CLibraryBatchStrategy]* out)


cdef extern from "pyserver/triton/inference.h" namespace "pyserver::triton" nogil:
    # Model::Create, the model naming `server` (TRITONBACKEND_ModelServer, BLS)
    Status CreateServedModel "pyserver::triton::CreateServedModel"(
        CBackendLibrary* library, const string& name, uint64_t version,
        const string& repository, const string& config_json, cbool auto_complete,
        TRITONSERVER_Server* server, unique_ptr[CModel]* out)


cdef class BackendLibrary:
    """One libtriton_NAME.so, TRITONBACKEND_Initialize'd."""
    cdef unique_ptr[CBackendLibrary] lib

    def __init__(self, str path, str name, str config_json):
        check_status(CreateLibrary(path.encode(), name.encode(), config_json.encode(), &self.lib))

    def close(self):
        """TRITONBACKEND_Finalize and dlclose."""
        self.lib.reset()


cdef class Model:
    """A model of a backend library, TRITONBACKEND_ModelInitialize'd."""
    cdef unique_ptr[CModel] model
    cdef BackendLibrary library
    cdef ServerHandle server  # what TRITONBACKEND_ModelServer names (BLS), or None

    def __init__(self, BackendLibrary library, str name, uint64_t version, str repository,
                 str config_json, bint auto_complete, ServerHandle server=None):
        self.library = library
        self.server = server
        check_status(CreateServedModel(library.lib.get(), name.encode(), version,
                                       repository.encode(), config_json.encode(), auto_complete,
                                       &server.server if server is not None else NULL,
                                       &self.model))

    @property
    def config_json(self):
        return self.model.get().config_json().decode()

    def memory_usage(self):
        """What the backend last reported the model holds
        (TRITONBACKEND_ModelReportMemoryUsage): [(memory type name, id, bytes)]."""
        if self.model.get() == NULL:
            return []
        return _usage(self.model.get().memory_usage())

    def close(self):
        self.model.reset()


cdef list _usage(vector[MemoryUsageEntry] entries):
    # the memory type by Triton's name for it (TRITONSERVER_MemoryTypeString)
    return [(TRITONSERVER_MemoryTypeString(entries[i].type).decode(), entries[i].id,
             entries[i].byte_size) for i in range(entries.size())]


cdef object _array(OutputTensor* t):
    """A tensor the backend filled, as a numpy array of its own bytes."""
    shape = tuple(t.shape)
    raw = t.data.data()[:t.data.size()] if t.data.size() else b""
    if t.datatype == BYTES_CODE:
        return deserialize_bytes_tensor(raw).reshape(shape)
    return np.frombuffer(raw, dtype=CODE_TO_NUMPY[t.datatype]).reshape(shape)


cdef object _to_python(SentResponse& sent):
    """(outputs dict or None, (code, message) or None, final, response
    parameters dict or None)."""
    cdef OutputTensor* t
    error = None
    outputs = None
    if sent.has_error:
        error = (<int>sent.error_code + 1, sent.error_message.decode("utf-8", "replace"))
    elif sent.has_response:
        outputs = {}
        for i in range(sent.outputs.size()):
            t = sent.outputs[i].get()
            outputs[t.name.decode()] = _array(t)
    parameters = None
    if sent.parameters.size():
        parameters = {}
        for i in range(sent.parameters.size()):
            parameters[sent.parameters[i].name.decode()] = parameter_value(sent.parameters[i])
    return outputs, error, sent.final, parameters


cdef class _Late:
    """A request still running after its batch's Execute returned: what its
    sink hands its responses to (and the bytes its inputs point at, kept
    until the backend released it). Decoupled, each response goes on as it
    is sent; otherwise they are collected and go on together at the last
    (``collected`` is then a list), and the scheduler keeps flagging the
    request cancelled until it is released (``scheduler`` watches ``id``)."""
    cdef object pending, keep, on_response
    cdef list collected
    cdef Scheduler scheduler
    cdef uint64_t id
    cdef Instance instance  # counts it among the requests its backend holds


cdef _Late _hold_late(Instance instance, pending, keep, on_response):
    """A _Late its request's sink owns (until _drop_late), counted held by
    ``instance`` meanwhile."""
    cdef _Late late = _Late()
    late.pending, late.keep, late.on_response = pending, keep, on_response
    late.instance = instance
    with instance.held_changed:
        instance.held += 1
    Py_INCREF(late)  # the sink's
    return late


cdef void _drop_late(_Late late):
    """The sink let ``late`` go (the backend released its request, or never
    took it): one request fewer that the instance's close() waits for."""
    cdef Instance instance = late.instance
    with instance.held_changed:
        instance.held -= 1
        instance.held_changed.notify_all()
    Py_DECREF(late)


cdef cbool _deliver_late(void* owner, SentResponse* sent, cbool last) noexcept with gil:
    cdef _Late late = <_Late>owner
    try:
        if late.collected is None:
            late.on_response(late.pending, _to_python(sent[0]) if sent != NULL else None)
        else:
            if sent != NULL:
                late.collected.append(_to_python(sent[0]))
            if last:
                late.on_response(late.pending, late.collected)
        return _cancelled(late.pending)
    except BaseException:
        log.exception("delivering a response of a Triton C backend failed")
        return False


cdef inline bint _cancelled(p):
    future = p.future
    return future is not None and future.cancelled()


cdef void _release_late(void* owner) noexcept with gil:
    cdef _Late late = <_Late>owner
    try:
        if late.scheduler is not None:
            late.scheduler.c.get().UnwatchRunning(late.id)
        _drop_late(late)
    except BaseException:
        log.exception("releasing a request of a Triton C backend failed")


cdef void _report_activity(void* tracer, uint64_t trace_id, uint64_t ns,
                           const char* name) noexcept with gil:
    # TRITONSERVER_InferenceTraceReportActivity, from any backend thread
    try:
        (<object>tracer).activity(trace_id, name.decode("utf-8", "replace"), ns)
    except BaseException:
        log.exception("recording a backend's trace activity failed")


cdef int _describe(TRITONBACKEND_Request* r, p, all_outputs, list keep,
                   frozenset bf16_inputs=None) except -1:
    """What a backend reads of pending request ``p``: its id, sequence
    properties, timeout, parameters, inputs (their bytes appended to
    ``keep``, which must outlive ``r``) and requested outputs (``all_outputs``,
    the model's names as bytes, when it names none). ``bf16_inputs``: the
    inputs the config types BF16 (numpy holds them as uint16 words)."""
    cdef TRITONBACKEND_Input tin
    cdef const unsigned char[::1] view
    request = p.request
    r.id = str(request.id).encode()
    corr, flags, user = request_properties(request.parameters)
    if isinstance(corr, str):
        r.correlation_id_string = corr.encode()
        r.correlation_is_string = True
    else:
        r.correlation_id = corr
    r.flags = flags
    r.timeout_us = request.timeout_us or 0
    for key, value in user.items():
        r.parameters.push_back(parameter_of(key, value))
    for name, arr in p.arrays.items():
        tin.name = name.encode()
        tin.shape = list(arr.shape)
        if arr.dtype == object:
            tin.datatype = <TRITONSERVER_DataType>BYTES_CODE
            data = serialize_bytes_tensor(arr)
        else:
            wire = "BF16" if bf16_inputs is not None and name in bf16_inputs \
                else _wire(arr.dtype)  # numpy holds BF16 as uint16 words
            tin.datatype = <TRITONSERVER_DataType><int>WIRE_TO_CODE[wire]
            data = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        keep.append(data)
        view = data
        tin.data = &view[0] if len(view) else NULL
        tin.byte_size = len(view)
        r.inputs.push_back(tin)
    if request.outputs:
        for out in request.outputs:
            r.requested_outputs.push_back(out.name.encode())
    else:
        for name in all_outputs:
            r.requested_outputs.push_back(name)
    return 0


cdef class RequestView:
    """A queued request as a custom batching library sees it (a
    TRITONBACKEND_Request over its arrays); ``address`` goes to
    Scheduler.enqueue, and the view must live while the request is queued."""
    cdef unique_ptr[TRITONBACKEND_Request] r
    cdef list keep

    @property
    def address(self):
        return <uintptr_t>self.r.get()


cdef class LibraryBatchStrategy(BatchStrategy):
    """A custom batching library built for Triton (csrc's
    LibraryBatchStrategy): opened, and its batcher initialized for the
    model, when made; finalized when the last scheduler using it goes."""
    cdef list all_outputs

    def __init__(self, str path, str model_name, uint64_t version, str repository,
                 str config_json, list all_outputs):
        cdef shared_ptr[CLibraryBatchStrategy] made
        check_status(CreateBatchStrategy(path.encode(), model_name.encode(), version,
                                         repository.encode(), config_json.encode(), &made))
        self.c = <shared_ptr[CBatchStrategy]>made
        self.all_outputs = all_outputs

    def view(self, p):
        """The view of pending request ``p`` (engine/types.pyx PendingRequest)."""
        cdef RequestView v = RequestView.__new__(RequestView)
        v.keep = []
        v.r.reset(new TRITONBACKEND_Request())
        _describe(v.r.get(), p, self.all_outputs, v.keep)
        return v


cdef class Instance:
    """A model instance; execute() runs one batch of pending requests."""
    cdef unique_ptr[CInstance] instance
    cdef Model owner
    cdef object tracer  # the server's (runtime/tracing.py), for backends' own activities
    cdef vector[string] state_names  # implicit state outputs (TRITONBACKEND_StateNew)
    cdef string model_name
    cdef shared_ptr[OutputRules] output_rules  # what its responses may carry (or none)
    cdef frozenset bf16_inputs  # inputs the config types BF16 (or None)
    cdef Scheduler scheduler  # the model's: it flags a running request cancelled (or None)
    # requests its backend still holds after their batch's Execute returned
    # (their sinks went late), which close() waits for
    cdef int held
    cdef object held_changed

    def __init__(self, Model model, str name, int kind, int device_id, str host_policy_json,
                 list state_names=None, str model_name=""):
        """``host_policy_json``: the instance's host policy as the backend
        reads it (TRITONBACKEND_ModelInstanceHostPolicy)."""
        self.owner = model
        self.held_changed = threading.Condition()
        for state in state_names or ():
            self.state_names.push_back(state.encode())
        self.model_name = model_name.encode()
        check_status(CreateInstance(model.model.get(), name.encode(), kind, device_id,
                                    host_policy_json.encode(), &self.instance))

    def set_output_rules(self, str model_name, bint batching, list outputs):
        """The config's outputs, as ``[(name, reshape.shape or None, dims)]``:
        a response output of another name is refused, a reshaped one
        reported with the config's dims (Triton's core does both)."""
        cdef OutputRules* rules = new OutputRules()
        cdef pair[string, OutputReshape] entry
        self.output_rules.reset(rules)
        rules.model_name = model_name.encode()
        rules.batching = batching
        for name, reshape, dims in outputs:
            rules.names.push_back(name.encode())
            if reshape is not None:
                entry.first = name.encode()
                entry.second.from_ = list(reshape)
                entry.second.to = list(dims)
                rules.reshapes.push_back(entry)

    def set_bf16_inputs(self, names):
        """The inputs the config types BF16: the backend is told BF16, not
        the uint16 of the words numpy holds them in."""
        self.bf16_inputs = frozenset(names) or None

    @property
    def has_ready_check(self):
        """Whether the backend exports TRITONBACKEND_ModelInstanceReady."""
        return self.instance.get() != NULL and self.instance.get().has_ready_check()

    def ready(self):
        """TRITONBACKEND_ModelInstanceReady (GIL released): None when the
        instance is ready, else the backend's error message."""
        cdef Status status
        if self.instance.get() == NULL:
            return "the instance is closed"
        with nogil:
            status = self.instance.get().Ready()
        return None if status.ok() else status.message().decode("utf-8", "replace")

    def memory_usage(self):
        """What the backend last reported this instance holds
        (TRITONBACKEND_ModelInstanceReportMemoryUsage): [(memory type name, id, bytes)]."""
        if self.instance.get() == NULL:
            return []
        return _usage(self.instance.get().memory_usage())

    def set_tracer(self, tracer):
        """The server's tracer, where TRITONSERVER_InferenceTraceReportActivity
        records a traced request's activities (held while this instance is)."""
        self.tracer = tracer

    def set_scheduler(self, Scheduler scheduler):
        """The model's scheduler: a request cancelled while its batch runs
        (Scheduler.cancel of a request no longer queued) is then flagged
        where TRITONBACKEND_RequestIsCancelled reads, as Triton's is."""
        self.scheduler = scheduler

    def set_stats(self, ModelStats stats):
        """Where the backend's per-response reports go
        (TRITONBACKEND_ModelInstanceReportResponseStatistics)."""
        self.instance.get().SetStats(stats.c)

    def execute(self, list pending, list all_outputs, on_response=None, on_late=None):
        """Runs the batch. Without on_response, returns per request the
        list of what the backend sent it: (outputs or None, (code, message)
        or None, final, parameters or None); a request the backend still
        holds when Execute returns is waited for (GIL released), unless
        ``on_late`` is given and the request has a future: then its result
        is None and on_late(pending request, that list) is called once the
        backend sent its final response (or let the request go), on the
        sending thread, while this instance runs its next batches (Triton
        frees an instance when Execute returns). With on_response
        (decoupled), each response goes to on_response(pending request,
        that tuple, or None when the request's last handle went without the
        final flag) as it is sent, on the sending thread, also while
        Execute runs; the results are None. Also returns the
        times the backend reported for the batch (start, compute start,
        compute end, end) or None, and, for a model with implicit state, per
        request the states its backend updated (TRITONBACKEND_StateUpdate:
        {output name: array}), else None: for a decoupled model, those
        updated by the time Execute returned (Triton applies an update as it
        is made; one made later, from another thread, is not seen). A
        request that names no outputs asks for all_outputs (the model's, as
        Triton fills them in)."""
        cdef vector[TRITONBACKEND_Request*] requests
        cdef TRITONBACKEND_Request* r
        cdef Status status
        cdef vector[SentResponse] sent
        cdef BatchTimes times
        cdef ResponseSink* sink
        cdef _Late late
        cdef cbool handed_off
        cdef vector[unique_ptr[OutputTensor]] updated
        cdef cbool detached
        cdef cbool went_late
        cdef list lates = []  # a decoupled batch's: per request, its delivery's owner
        cdef CScheduler* sched = NULL
        cdef vector[uint64_t] watched  # queue ids the scheduler flags while they run
        if self.scheduler is not None:
            sched = self.scheduler.c.get()
        keeps = []  # per request, its inputs' bytes
        results = []
        states = [] if self.state_names.size() else None
        try:
            for p in pending:
                r = new TRITONBACKEND_Request()
                requests.push_back(r)
                keep = []
                keeps.append(keep)
                _describe(r, p, all_outputs, keep, self.bf16_inputs)
                if p.trace is not None:  # its BLS calls may be traced under it
                    trace = p.trace
                    r.trace.id = trace["id"]
                    r.trace.parent_id = trace.get("parent_id", 0)
                    r.trace.model_name = self.model_name
                    r.trace.model_version = trace["model_version"]
                    r.trace.request_id = r.id
                    if self.tracer is not None:
                        r.trace.report = _report_activity
                        r.trace.reporter = <void*>self.tracer
                r.state_names = &self.state_names
                r.model_name = self.model_name
                if sched != NULL and p.id:  # watched before the check: no gap
                    sched.WatchRunning(p.id, r.sink.get().cancelled_flag())
                watched.push_back(p.id if sched != NULL else 0)
                if _cancelled(p):
                    r.sink.get().SetCancelled()
                if self.output_rules.get() != NULL:
                    r.sink.get().SetOutputRules(self.output_rules)
            if on_response is not None:
                # Decoupled: each response goes on as it is sent, also one
                # sent inside Execute (a backend that streams from there), as
                # Triton hands each on at TRITONBACKEND_ResponseSend.
                for i in range(requests.size()):
                    late = _hold_late(self, pending[i], keeps[i], on_response)
                    lates.append(late)
                    with nogil:
                        requests[i].sink.get().GoLate(_deliver_late, _release_late, <void*>late)
            # Safe without the GIL: the requests and the bytes they point at
            # are held by this frame (or, handed off, by their sinks).
            with nogil:
                status = self.instance.get().Execute(requests, &times)
            if not status.ok() and lates:
                # The backend did not take the requests (Triton's rule for a
                # failed Execute): their sinks call no hook again.
                for i in range(requests.size()):
                    with nogil:
                        detached = requests[i].sink.get().Detach()
                    if detached:
                        _drop_late(lates[i])
            check_status(status)
            for i in range(requests.size()):
                sink = requests[i].sink.get()
                if on_response is None:
                    if on_late is not None and states is None and pending[i].future is not None:
                        late = _hold_late(self, pending[i], keeps[i], on_late)
                        late.collected = []
                        if watched[i]:  # watched until released, if it goes late
                            late.scheduler, late.id = self.scheduler, watched[i]
                        with nogil:
                            went_late = sink.GoLateUnlessDone(_deliver_late, _release_late,
                                                              <void*>late)
                        if went_late:
                            watched[i] = 0  # _release_late unwatches it
                            with nogil:
                                handed_off = sink.HandOff()
                            if handed_off:  # freed by TRITONBACKEND_RequestRelease
                                requests[i] = NULL
                            results.append(None)
                            continue
                        late.scheduler = None
                        _drop_late(late)
                    with nogil:
                        sink.WaitDone()
                    sent = sink.Take()
                    results.append([_to_python(sent[j]) for j in range(sent.size())])
                    if states is not None:
                        updated = sink.TakeStates()
                        states.append({updated[j].get().name.decode(): _array(updated[j].get())
                                       for j in range(updated.size())})
                    continue
                if states is not None:  # before the hand-off: the sink may go with it
                    updated = sink.TakeStates()
                    states.append({updated[j].get().name.decode(): _array(updated[j].get())
                                   for j in range(updated.size())})
                with nogil:
                    handed_off = sink.HandOff()
                if handed_off:  # freed by TRITONBACKEND_RequestRelease
                    requests[i] = NULL
                results.append(None)
        finally:
            for i in range(requests.size()):
                del requests[i]
            # Answered (or, decoupled, handed to their sinks, which keep the
            # flag while a late response may still ask): a cancel from now
            # on reaches the frontend alone, or the next late response.
            if sched != NULL:
                for i in range(watched.size()):
                    if watched[i]:  # 0: not watched, or watched until its late release
                        sched.UnwatchRunning(watched[i])
        if times.compute_start_ns == 0:
            return results, None, states
        return results, (times.exec_start_ns, times.compute_start_ns, times.compute_end_ns,
                         times.exec_end_ns), states

    def close(self, bint wait=True):
        """Finalizes the instance (TRITONBACKEND_ModelInstanceFinalize) once
        its backend released every request it still held after their
        batch's Execute returned, as Triton finalizes a model's instances
        only after its requests are done; True when it did. With wait False
        (the server's exit timeout passed) an instance whose backend still
        holds requests is left unfinalized, those requests the backend's
        (False)."""
        if self.instance.get() == NULL:
            return True
        with self.held_changed:
            while wait and self.held:
                if not self.held_changed.wait(10):
                    log.warning("model '%s': closing an instance waits for %d request(s) its "
                                "backend has not released", self.model_name.decode(), self.held)
            if self.held:
                self.instance.release()  # left to the backend, which may still use it
                return False
        self.instance.reset()
        return True


_METRIC_KINDS = {0: "counter", 1: "gauge", 2: "histogram"}  # TRITONSERVER_MetricKind


def set_log_levels(bint info, bint warning, bint error, bint verbose):
    """Which levels backends log (TRITONSERVER_LogIsEnabled): the server's
    logging settings (--log-info, --log-warning, --log-error, --log-verbose
    and the logging extension)."""
    CBackendLog.Get().SetLevels(info, warning, error, verbose)


def set_log_output(str path, bint iso8601, bint escape):
    """Where backends' log lines go (``path``, appended; "" for stderr) and
    their layout: the server's --log-file and --log-format. Raises
    ServerError when the file cannot be opened (the output stays as it was)."""
    check_status(CBackendLog.Get().SetOutput(path.encode(), iso8601, escape))


def use_pinned_pool(PinnedMemoryPool pool):
    """The backend memory manager's CPU_PINNED memory comes from ``pool``
    (the server's; one over the process's CUDA runtime)."""
    if pool.own_runtime.get() != NULL:
        raise ValueError("the backend memory manager takes pools over the process's CUDA runtime")
    ServerMemoryManager().UsePinnedPool(<shared_ptr[CMemoryPool]>pool.c)


def use_device_pool(int device, CudaMemoryPool pool):
    """Its GPU memory on ``device`` comes from ``pool`` (the server's)."""
    if pool.own_runtime.get() != NULL:
        raise ValueError("the backend memory manager takes pools over the process's CUDA runtime")
    ServerMemoryManager().UseDevicePool(device, <shared_ptr[CMemoryPool]>pool.c)


def metrics_snapshot():
    """The custom metric families Triton C backends made, as
    runtime.custom_metrics.CustomMetrics.snapshot() gives them: (name,
    description, kind, [(labels, value, sum, buckets, counts)])."""
    cdef vector[MetricFamilySnapshot] families
    cdef MetricSample* sample
    with nogil:
        families = SnapshotMetrics()
    out = []
    for i in range(families.size()):
        kind = _METRIC_KINDS.get(families[i].kind, "gauge")
        values = []
        for j in range(families[i].samples.size()):
            sample = &families[i].samples[j]
            labels = {k.decode(): v.decode() for k, v in sample.labels}
            if kind == "histogram":
                values.append((labels, 0.0, sample.value, list(sample.buckets),
                               list(sample.bucket_counts)))
            else:
                values.append((labels, sample.value, 0.0, [], []))
        out.append((families[i].name.decode(), families[i].description.decode(), kind, values))
    return out


def _wire(dtype):
    from pyserver.kernel.dtypes import numpy_to_wire
    return numpy_to_wire(dtype)
