# csrc/include/pyserver/{scheduler,dynamic_batch_scheduler,pass_through_scheduler}.h
from libc.stdint cimport uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.atomic cimport atomic
from libcpp.map cimport map
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.completion cimport CCompletionQueue, CompletionQueue, Token
from pyserver.engine.stats cimport CModelStats, ModelStats
from pyserver.engine.status cimport Status


cdef extern from "pyserver/scheduler.h" namespace "pyserver" nogil:
    cdef cppclass RequestInfo:
        Token token
        uint32_t batch_size
        uint32_t priority
        uint64_t timeout_us
        uint64_t shape_key
        uint64_t correlation_id
        uint32_t sequence_flags
        string correlation_label
        const void* view

    cdef cppclass QueuedRequest:
        Token token
        uint64_t id
        uint32_t batch_size
        uint32_t priority_level
        uint64_t shape_key
        uint64_t enqueue_ns
        uint64_t deadline_ns

    cdef cppclass CBatch "pyserver::Batch":
        uint64_t sequence
        uint64_t dequeue_ns
        uint32_t batch_size
        cbool saturated
        cbool after_idle
        vector[QueuedRequest] requests

    cdef cppclass BatchTimes:
        uint64_t compute_start_ns
        uint64_t compute_input_end_ns
        uint64_t compute_output_start_ns
        uint64_t compute_end_ns

    cdef cppclass CScheduler "pyserver::Scheduler":
        Status EnqueueForTaker(const RequestInfo& info, uint64_t* id, cbool* wait_holds)
        cbool NextBatch(CBatch* batch)
        cbool TryNextBatch(CBatch* batch, uint64_t* due_ns)
        void ParkInstances(cbool parked)
        CCompletionQueue* completions()
        size_t TopUp(CBatch* batch)
        cbool Cancel(uint64_t id)
        void WatchRunning(uint64_t id, shared_ptr[atomic[cbool]] cancelled)
        void UnwatchRunning(uint64_t id)
        cbool EndSequence(uint64_t correlation_id)
        void Stop()
        size_t QueuedCount()
        void CompleteBatch(const CBatch& batch, const BatchTimes& times, Token token,
                           const Status& status)
        void RecordBatch(const CBatch& batch, const BatchTimes& times, const Status& status)
        cbool CompleteAndNext(const CBatch& done, const BatchTimes& times, Token token,
                              const Status& status, CBatch* next, cbool* signal_held)


cdef extern from "pyserver/priority_queue.h" namespace "pyserver" nogil:
    cdef enum class TimeoutAction "pyserver::QueuePolicy::TimeoutAction":
        kReject "pyserver::QueuePolicy::TimeoutAction::kReject"
        kDelay "pyserver::QueuePolicy::TimeoutAction::kDelay"

    cdef cppclass QueuePolicy:
        TimeoutAction timeout_action
        uint64_t default_timeout_us
        cbool allow_timeout_override
        uint32_t max_queue_size


cdef extern from "pyserver/batch_strategy.h" namespace "pyserver" nogil:
    cdef cppclass CBatchStrategy "pyserver::BatchStrategy":
        pass


cdef extern from "pyserver/dynamic_batch_scheduler.h" namespace "pyserver" nogil:
    cdef cppclass DynamicBatcherConfig:
        uint32_t max_batch_size
        vector[uint32_t] preferred_batch_sizes
        uint64_t max_queue_delay_us
        uint32_t priority_levels
        uint32_t default_priority_level
        QueuePolicy default_policy
        map[uint32_t, QueuePolicy] priority_policies
        cbool preserve_ordering
        cbool enforce_equal_shapes
        cbool eager
        uint32_t delay_scheduler_count
        uint64_t idle_spin_us
        uint64_t wait_spin_us
        shared_ptr[CBatchStrategy] strategy

    cdef cppclass DynamicBatchScheduler:
        @staticmethod
        Status Create(const DynamicBatcherConfig& config, shared_ptr[CModelStats] stats,
                      shared_ptr[CCompletionQueue] completions,
                      unique_ptr[CScheduler]* scheduler)


cdef extern from "pyserver/pass_through_scheduler.h" namespace "pyserver" nogil:
    cdef cppclass PassThroughScheduler(CScheduler):
        PassThroughScheduler(shared_ptr[CModelStats] stats,
                             shared_ptr[CCompletionQueue] completions,
                             cbool preserve_ordering)


cdef extern from "pyserver/sequence_batch_scheduler.h" namespace "pyserver" nogil:
    cdef cppclass SequenceBatcherConfig:
        string model_name
        uint32_t max_batch_size
        uint32_t instance_count
        uint64_t max_sequence_idle_us
        cbool oldest
        uint32_t max_candidate_sequences
        vector[uint32_t] preferred_batch_sizes
        uint64_t max_queue_delay_us
        float minimum_slot_utilization
        cbool preserve_ordering
        cbool iterative

    cdef cppclass SequenceBatchScheduler:
        @staticmethod
        Status Create(const SequenceBatcherConfig& config, shared_ptr[CModelStats] stats,
                      shared_ptr[CCompletionQueue] completions,
                      unique_ptr[CScheduler]* scheduler)


cdef class Batch:
    cdef CBatch c
    cdef readonly list requests
    # The batch's outputs while the event loop has still to cut them per
    # request, and the ModelVersion that cuts them (its cut_outputs).
    cdef public object outputs
    cdef public object model


cdef class BatchStrategy:
    # custom batching, for Scheduler.dynamic (made by engine/triton_c.pyx)
    cdef shared_ptr[CBatchStrategy] c


cdef class Scheduler:
    cdef unique_ptr[CScheduler] c
    cdef readonly ModelStats stats
    cdef readonly CompletionQueue completions
    # what the last try_next_batch() said: when to ask again (the engine's
    # clock, ns) if nothing arrives before; 0: only an arrival makes a batch
    cdef readonly uint64_t next_due_ns
    # what the last enqueue() said: that wait still stands with its request
    # queued, so the loop need not ask before next_due_ns (its timer will)
    cdef readonly bint wait_holds

    cdef uint64_t enqueue_request(self, object request, uint32_t batch_size, uint64_t priority,
                                  uint64_t timeout_us, uint64_t shape_key) except? 0
    cdef uint64_t _enqueue(self, object request, RequestInfo& info) except? 0
    cpdef object try_next_batch(self)
    cpdef record(self, Batch batch, uint64_t compute_start_ns, uint64_t compute_input_end_ns,
                 uint64_t compute_output_start_ns, uint64_t compute_end_ns,
                 int code=*, str message=*)
    cpdef release_held_signal(self)
    cdef bint _wait_batch(self, Batch batch) noexcept nogil
    cdef void _meet_spinning_loop(self, Batch batch) noexcept nogil
    cdef object _hand_over(self, Batch batch, bint got)
