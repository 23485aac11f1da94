// LatencySummary: recent latency samples of one kind (request, queue, ...)
// for Prometheus summaries: quantiles over a sliding window (the last
// max_age, at most `capacity` samples), plus all-time count and sum.
// Costs one short lock per sample; models without summaries never call it.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace pyserver {

class LatencySummary {
 public:
  explicit LatencySummary(size_t capacity = 8192, uint64_t max_age_ns = 60ull * 1000000000ull);

  void Record(uint64_t now_ns, uint64_t value_ns);

  // Quantiles (each in [0, 1]) of the samples younger than max_age, in ns;
  // 0 when there are none. *count and *sum are all-time totals.
  std::vector<uint64_t> Quantiles(const std::vector<double>& quantiles, uint64_t now_ns,
                                  uint64_t* count, uint64_t* sum_ns) const;

 private:
  struct Sample {
    uint64_t at_ns;
    uint64_t value_ns;
  };
  const size_t capacity_;
  const uint64_t max_age_ns_;
  mutable std::mutex mu_;
  std::vector<Sample> ring_;
  size_t next_ = 0;
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
};

}  // namespace pyserver
