# csrc/include/pyserver/model_stats.h
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.map cimport map
from libcpp.memory cimport shared_ptr
from libcpp.vector cimport vector


cdef extern from "pyserver/model_stats.h" namespace "pyserver" nogil:
    cdef cppclass DurationStat:
        uint64_t count
        uint64_t ns

    cdef cppclass BatchSizeStat:
        DurationStat compute_input
        DurationStat compute_infer
        DurationStat compute_output

    cdef cppclass ResponseStat:
        DurationStat compute_infer
        DurationStat compute_output
        DurationStat success
        DurationStat fail
        DurationStat empty_response
        DurationStat cancel

    cdef enum class ResponseOutcome "pyserver::ResponseOutcome":
        pass

    cdef cppclass ModelStatsSnapshot:
        DurationStat success
        DurationStat fail
        DurationStat queue
        DurationStat compute_input
        DurationStat compute_infer
        DurationStat compute_output
        DurationStat cache_hit
        DurationStat cache_miss
        uint64_t fail_by_reason[4]
        uint64_t inference_count
        uint64_t execution_count
        int64_t pending_count
        uint64_t last_inference_ms
        map[uint32_t, BatchSizeStat] batch_stats
        map[uint32_t, ResponseStat] response_stats

    cdef enum class SummaryKind "pyserver::SummaryKind":
        pass

    cdef enum class FailureReason "pyserver::FailureReason":
        pass

    cdef cppclass LatencyHistogram "pyserver::LatencyHistogram":
        const vector[double]& bounds()
        vector[uint64_t] Counts(uint64_t* count, uint64_t* sum_ms)

    cdef cppclass CModelStats "pyserver::ModelStats":
        CModelStats()
        void EnableSummaries()
        bint summaries_enabled()
        vector[uint64_t] SummaryQuantiles(SummaryKind kind, const vector[double]& quantiles,
                                          uint64_t* count, uint64_t* sum_ns)
        void RecordSuccess(uint64_t total_ns, uint64_t queue_ns, uint64_t compute_input_ns,
                           uint64_t compute_infer_ns, uint64_t compute_output_ns)
        void RecordFailure(uint64_t total_ns, FailureReason reason)
        void RecordExecution(uint32_t batch_size, uint64_t compute_input_ns,
                             uint64_t compute_infer_ns, uint64_t compute_output_ns)
        void EnableFirstResponseHistogram(vector[double] bounds_ms, bint by_caller)
        const LatencyHistogram* first_response_histogram()
        void ObserveFirstResponse(uint64_t ns)
        void RecordCacheHit(uint64_t total_ns, uint64_t lookup_ns)
        void RecordCacheMiss(uint64_t ns)
        void RecordResponse(uint32_t index, ResponseOutcome outcome, uint64_t infer_ns,
                            uint64_t output_ns)
        ModelStatsSnapshot Snapshot()


cdef class ModelStats:
    cdef shared_ptr[CModelStats] c
