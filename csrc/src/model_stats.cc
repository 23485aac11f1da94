#include "pyserver/model_stats.h"

#include <chrono>

#include "pyserver/clock.h"

namespace pyserver {

void ModelStats::TouchLastInference() {
  uint64_t ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  last_inference_ms_.store(ms, std::memory_order_relaxed);
}

void ModelStats::RecordSuccess(uint64_t total_ns, uint64_t queue_ns,
                               uint64_t compute_input_ns, uint64_t compute_infer_ns,
                               uint64_t compute_output_ns) {
  success_.Add(1, total_ns);
  queue_.Add(1, queue_ns);
  compute_input_.Add(1, compute_input_ns);
  compute_infer_.Add(1, compute_infer_ns);
  compute_output_.Add(1, compute_output_ns);
  TouchLastInference();
  ObserveCompletion(total_ns);
  if (summaries_enabled()) {
    const uint64_t now = NowNs();
    const uint64_t values[kSummaryKindCount] = {total_ns, queue_ns, compute_input_ns,
                                                compute_infer_ns, compute_output_ns};
    for (int i = 0; i < kSummaryKindCount; ++i) summaries_[i]->Record(now, values[i]);
  }
}

void ModelStats::EnableSummaries() {
  if (summaries_enabled()) return;
  for (auto& s : summaries_) s.reset(new LatencySummary());
  summaries_enabled_.store(true, std::memory_order_release);
}

std::vector<uint64_t> ModelStats::SummaryQuantiles(SummaryKind kind,
                                                   const std::vector<double>& quantiles,
                                                   uint64_t* count, uint64_t* sum_ns) const {
  if (!summaries_enabled()) {
    *count = 0;
    *sum_ns = 0;
    return std::vector<uint64_t>(quantiles.size(), 0);
  }
  return summaries_[static_cast<int>(kind)]->Quantiles(quantiles, NowNs(), count, sum_ns);
}

void ModelStats::EnableFirstResponseHistogram(std::vector<double> bounds_ms, bool by_caller) {
  if (first_response_enabled_.load(std::memory_order_acquire)) return;
  first_response_.reset(new LatencyHistogram(std::move(bounds_ms)));
  first_response_by_caller_ = by_caller;
  first_response_enabled_.store(true, std::memory_order_release);
}

void ModelStats::ObserveFirstResponse(uint64_t ns) {
  if (first_response_enabled_.load(std::memory_order_acquire)) {
    first_response_->Observe(ns / 1000000);
  }
}

void ModelStats::RecordFailure(uint64_t total_ns, FailureReason reason) {
  fail_.Add(1, total_ns);
  fail_by_reason_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  TouchLastInference();
  ObserveCompletion(total_ns);
}

void ModelStats::RecordExecution(uint32_t batch_size, uint64_t compute_input_ns,
                                 uint64_t compute_infer_ns, uint64_t compute_output_ns) {
  inference_count_.fetch_add(batch_size, std::memory_order_relaxed);
  execution_count_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(batch_mu_);
  BatchSizeStat& s = batch_stats_[batch_size];
  s.compute_input.count++;
  s.compute_input.ns += compute_input_ns;
  s.compute_infer.count++;
  s.compute_infer.ns += compute_infer_ns;
  s.compute_output.count++;
  s.compute_output.ns += compute_output_ns;
}

void ModelStats::RecordCacheHit(uint64_t total_ns, uint64_t lookup_ns) {
  success_.Add(1, total_ns);
  // Counted through the queue with no wait, as Triton does: perf_analyzer
  // finds a model's traffic by its queue count.
  queue_.Add(1, 0);
  cache_hit_.Add(1, lookup_ns);
  TouchLastInference();
  ObserveCompletion(total_ns);
}

void ModelStats::RecordCacheMiss(uint64_t ns) { cache_miss_.Add(1, ns); }

ModelStatsSnapshot ModelStats::Snapshot() const {
  ModelStatsSnapshot s;
  s.success = success_.Load();
  s.fail = fail_.Load();
  s.queue = queue_.Load();
  s.compute_input = compute_input_.Load();
  s.compute_infer = compute_infer_.Load();
  s.compute_output = compute_output_.Load();
  s.cache_hit = cache_hit_.Load();
  s.cache_miss = cache_miss_.Load();
  for (int i = 0; i < kFailureReasonCount; ++i) {
    s.fail_by_reason[i] = fail_by_reason_[i].load(std::memory_order_relaxed);
  }
  s.inference_count = inference_count_.load(std::memory_order_relaxed);
  s.execution_count = execution_count_.load(std::memory_order_relaxed);
  s.pending_count = pending_.load(std::memory_order_relaxed);
  s.last_inference_ms = last_inference_ms_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(batch_mu_);
  s.batch_stats = batch_stats_;
  s.response_stats = response_stats_;
  return s;
}

void ModelStats::RecordResponse(uint32_t index, ResponseOutcome outcome, uint64_t infer_ns,
                                uint64_t output_ns) {
  std::lock_guard<std::mutex> lock(batch_mu_);
  ResponseStat& s = response_stats_[index];
  if (outcome != ResponseOutcome::kCancel) {
    s.compute_infer.count++;
    s.compute_infer.ns += infer_ns;
  }
  if (outcome == ResponseOutcome::kSuccess || (outcome == ResponseOutcome::kFail && output_ns > 0)) {
    s.compute_output.count++;
    s.compute_output.ns += output_ns;
  }
  DurationStat* d = outcome == ResponseOutcome::kSuccess ? &s.success
                    : outcome == ResponseOutcome::kFail  ? &s.fail
                    : outcome == ResponseOutcome::kEmpty ? &s.empty_response
                                                         : &s.cancel;
  d->count++;
  d->ns += infer_ns + output_ns;
}

}  // namespace pyserver
