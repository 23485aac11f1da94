#include "pyserver/latency_histogram.h"

#include <algorithm>

namespace pyserver {

LatencyHistogram::LatencyHistogram(std::vector<double> bounds_ms)
    : bounds_(std::move(bounds_ms)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void LatencyHistogram::Observe(uint64_t ms) {
  // The first bound >= ms is its bucket ("le"); past the last one, +Inf.
  const double value = static_cast<double>(ms);
  const size_t index = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  buckets_[index].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ms_.fetch_add(ms, std::memory_order_relaxed);
}

std::vector<uint64_t> LatencyHistogram::Counts(uint64_t* count, uint64_t* sum_ms) const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  *count = count_.load(std::memory_order_relaxed);
  *sum_ms = sum_ms_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace pyserver
