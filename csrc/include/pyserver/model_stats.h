// ModelStats: the counters behind Triton's statistics extension and metrics,
// cheap enough to update for every request (relaxed atomics; one short lock
// per executed batch for the per-batch-size table).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "pyserver/latency_histogram.h"
#include "pyserver/latency_summary.h"

namespace pyserver {

// Why a request failed, as Triton's nv_inference_request_failure "reason" label.
enum class FailureReason : int {
  kRejected = 0,
  kCanceled = 1,
  kBackend = 2,
  kOther = 3,
};
constexpr int kFailureReasonCount = 4;

struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};

struct BatchSizeStat {
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
};

// What one response (by its index within its request) of a decoupled model
// cost, as Triton's statistics extension reports it.
struct ResponseStat {
  DurationStat compute_infer;
  DurationStat compute_output;
  DurationStat success;
  DurationStat fail;
  DurationStat empty_response;
  DurationStat cancel;
};

enum class ResponseOutcome : int { kSuccess = 0, kFail = 1, kEmpty = 2, kCancel = 3 };

// A consistent-enough copy of the counters for reporting.
struct ModelStatsSnapshot {
  DurationStat success;
  DurationStat fail;
  DurationStat queue;
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
  DurationStat cache_hit;
  DurationStat cache_miss;
  uint64_t fail_by_reason[kFailureReasonCount] = {0, 0, 0, 0};
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  int64_t pending_count = 0;
  uint64_t last_inference_ms = 0;  // wall clock, ms since the epoch
  std::map<uint32_t, BatchSizeStat> batch_stats;
  std::map<uint32_t, ResponseStat> response_stats;
};

// The per-request latencies kept for Prometheus summaries.
enum class SummaryKind : int {
  kRequest = 0,
  kQueue = 1,
  kComputeInput = 2,
  kComputeInfer = 3,
  kComputeOutput = 4,
};
constexpr int kSummaryKindCount = 5;

class ModelStats {
 public:
  ModelStats() = default;
  ModelStats(const ModelStats&) = delete;
  ModelStats& operator=(const ModelStats&) = delete;

  // One request finished successfully. Durations in ns.
  void RecordSuccess(uint64_t total_ns, uint64_t queue_ns, uint64_t compute_input_ns,
                     uint64_t compute_infer_ns, uint64_t compute_output_ns);
  // One request failed; queue_ns is counted only when the request reached an
  // instance (Triton counts queue time for executed requests only).
  void RecordFailure(uint64_t total_ns, FailureReason reason);
  // One batch ran on an instance: inference_count += batch_size.
  void RecordExecution(uint32_t batch_size, uint64_t compute_input_ns,
                       uint64_t compute_infer_ns, uint64_t compute_output_ns);
  // A request answered from the response cache: a success (of total_ns), a
  // queue pass with no wait and a cache hit (lookup_ns), but no inference or
  // execution, as Triton counts it.
  void RecordCacheHit(uint64_t total_ns, uint64_t lookup_ns);
  // A miss: lookup plus insertion time.
  void RecordCacheMiss(uint64_t ns);
  // The index-th response of a request was produced (infer_ns since the
  // previous one, or since execution started) and prepared (output_ns). As
  // Triton counts them: compute infer for every outcome but a cancel,
  // compute output for a success and for a failure that prepared outputs
  // (output_ns > 0), and the outcome's duration infer_ns + output_ns.
  void RecordResponse(uint32_t index, ResponseOutcome outcome, uint64_t infer_ns,
                      uint64_t output_ns);

  // Requests accepted but not yet handed to an instance.
  void AddPending(int64_t delta) { pending_.fetch_add(delta, std::memory_order_relaxed); }

  ModelStatsSnapshot Snapshot() const;

  // Starts keeping per-request samples for summaries (off by default: it
  // costs a lock per request). Call before traffic starts.
  void EnableSummaries();
  bool summaries_enabled() const { return summaries_enabled_.load(std::memory_order_acquire); }
  // Quantiles in ns of one kind (see LatencySummary::Quantiles).
  std::vector<uint64_t> SummaryQuantiles(SummaryKind kind, const std::vector<double>& quantiles,
                                         uint64_t* count, uint64_t* sum_ns) const;

  // Starts Triton's first-response histogram (histogram_latencies=true),
  // buckets in ms. A request's first response is its completion, unless
  // by_caller: a decoupled model answers through a response stream, whose
  // owner calls ObserveFirstResponse. Call before traffic starts.
  void EnableFirstResponseHistogram(std::vector<double> bounds_ms, bool by_caller);
  // Null until enabled.
  const LatencyHistogram* first_response_histogram() const {
    return first_response_enabled_.load(std::memory_order_acquire) ? first_response_.get()
                                                                   : nullptr;
  }
  // Time from the request's arrival to its first response (floored to ms,
  // as Triton reports it).
  void ObserveFirstResponse(uint64_t ns);

 private:
  struct AtomicDuration {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> ns{0};
    void Add(uint64_t n, uint64_t d) {
      count.fetch_add(n, std::memory_order_relaxed);
      ns.fetch_add(d, std::memory_order_relaxed);
    }
    DurationStat Load() const {
      return {count.load(std::memory_order_relaxed), ns.load(std::memory_order_relaxed)};
    }
  };
  void TouchLastInference();
  // A request completed: its first response, unless a caller reports those.
  void ObserveCompletion(uint64_t total_ns) {
    if (first_response_enabled_.load(std::memory_order_acquire) && !first_response_by_caller_) {
      first_response_->Observe(total_ns / 1000000);
    }
  }

  AtomicDuration success_, fail_, queue_, compute_input_, compute_infer_,
      compute_output_, cache_hit_, cache_miss_;
  std::atomic<uint64_t> fail_by_reason_[kFailureReasonCount] = {};
  std::atomic<uint64_t> inference_count_{0};
  std::atomic<uint64_t> execution_count_{0};
  std::atomic<int64_t> pending_{0};
  std::atomic<uint64_t> last_inference_ms_{0};

  std::atomic<bool> summaries_enabled_{false};
  std::unique_ptr<LatencySummary> summaries_[kSummaryKindCount];

  std::atomic<bool> first_response_enabled_{false};
  bool first_response_by_caller_ = false;
  std::unique_ptr<LatencyHistogram> first_response_;

  mutable std::mutex batch_mu_;
  std::map<uint32_t, BatchSizeStat> batch_stats_;
  std::map<uint32_t, ResponseStat> response_stats_;  // under batch_mu_
};

}  // namespace pyserver
