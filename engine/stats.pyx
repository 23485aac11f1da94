# cython: language_level=3
"""Per-model counters kept in C++ (pyserver::ModelStats)."""
from libcpp.memory cimport make_shared

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
_OUTCOMES = ("success", "fail", "empty", "cancel")
# Order of pyserver::SummaryKind.
SUMMARY_KINDS = ("request", "queue", "compute_input", "compute_infer", "compute_output")


cdef dict _duration(DurationStat d):
    return {"count": d.count, "ns": d.ns}


cdef class ModelStats:
    def __cinit__(self):
        self.c = make_shared[CModelStats]()

    def record_success(self, uint64_t total_ns):
        """A request answered without a batch of its own (an ensemble's):
        success count and duration, no queue or compute time."""
        self.c.get().RecordSuccess(total_ns, 0, 0, 0, 0)

    def record_failure(self, uint64_t total_ns, str reason="BACKEND"):
        """A failed request; reason is Triton's: REJECTED, CANCELED,
        BACKEND or OTHER."""
        self.c.get().RecordFailure(total_ns, <FailureReason><int>FAILURE_REASONS.index(reason))

    def record_response(self, uint32_t index, str outcome, uint64_t infer_ns,
                        uint64_t output_ns):
        """A decoupled model's index-th response to a request; outcome is
        success, fail, empty or cancel."""
        self.c.get().RecordResponse(index, <ResponseOutcome><int>_OUTCOMES.index(outcome),
                                    infer_ns, output_ns)

    def record_cache_hit(self, uint64_t total_ns, uint64_t lookup_ns):
        self.c.get().RecordCacheHit(total_ns, lookup_ns)

    def record_cache_miss(self, uint64_t ns):
        self.c.get().RecordCacheMiss(ns)

    def enable_summaries(self):
        """Keep per-request latency samples for Prometheus summaries (a lock
        per request from now on)."""
        self.c.get().EnableSummaries()

    @property
    def summaries_enabled(self):
        return self.c.get().summaries_enabled()

    def enable_first_response_histogram(self, bounds_ms, bint by_caller=False):
        """Triton's first-response histogram (histogram_latencies=true) with
        these bucket bounds in ms. ``by_caller``: the model answers through
        a response stream (decoupled) and its owner reports each request's
        first response with observe_first_response; otherwise a request's
        completion is its first response."""
        cdef vector[double] bounds = sorted(float(b) for b in bounds_ms)
        self.c.get().EnableFirstResponseHistogram(bounds, by_caller)

    def observe_first_response(self, uint64_t ns):
        self.c.get().ObserveFirstResponse(ns)

    def first_response_histogram(self):
        """None until enabled; else (bounds in ms, per-bucket counts, the
        last for +Inf, not cumulative, total count, sum in ms)."""
        cdef const LatencyHistogram* h = self.c.get().first_response_histogram()
        cdef uint64_t count = 0, total = 0
        if h == NULL:
            return None
        counts = h.Counts(&count, &total)
        return list(h.bounds()), list(counts), count, total

    def summary(self, str kind, quantiles):
        """(quantile values in ns, all-time count, all-time sum in ns) of one
        latency kind (see SUMMARY_KINDS) over the recent window."""
        cdef vector[double] qs = quantiles
        cdef uint64_t count = 0, total = 0
        cdef int index = SUMMARY_KINDS.index(kind)
        cdef vector[uint64_t] values = self.c.get().SummaryQuantiles(
            <SummaryKind>index, qs, &count, &total)
        return list(values), count, total

    def snapshot(self):
        """The counters as a dict shaped like Triton's statistics extension."""
        cdef ModelStatsSnapshot s = self.c.get().Snapshot()
        batch = []
        for item in s.batch_stats:
            batch.append({
                "batch_size": item.first,
                "compute_input": _duration(item.second.compute_input),
                "compute_infer": _duration(item.second.compute_infer),
                "compute_output": _duration(item.second.compute_output),
            })
        return {
            "last_inference": s.last_inference_ms,
            "inference_count": s.inference_count,
            "execution_count": s.execution_count,
            "pending_count": s.pending_count,
            "inference_stats": {
                "success": _duration(s.success),
                "fail": _duration(s.fail),
                "queue": _duration(s.queue),
                "compute_input": _duration(s.compute_input),
                "compute_infer": _duration(s.compute_infer),
                "compute_output": _duration(s.compute_output),
                "cache_hit": _duration(s.cache_hit),
                "cache_miss": _duration(s.cache_miss),
            },
            "failure_reasons": {FAILURE_REASONS[i]: s.fail_by_reason[i] for i in range(4)},
            "batch_stats": batch,
            "response_stats": {str(item.first): {
                "compute_infer": _duration(item.second.compute_infer),
                "compute_output": _duration(item.second.compute_output),
                "success": _duration(item.second.success),
                "fail": _duration(item.second.fail),
                "empty_response": _duration(item.second.empty_response),
                "cancel": _duration(item.second.cancel),
            } for item in s.response_stats},
        }
