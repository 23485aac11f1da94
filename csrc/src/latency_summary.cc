#include "pyserver/latency_summary.h"

#include <algorithm>
#include <cmath>

namespace pyserver {

LatencySummary::LatencySummary(size_t capacity, uint64_t max_age_ns)
    : capacity_(capacity == 0 ? 1 : capacity), max_age_ns_(max_age_ns) {
  ring_.reserve(capacity_);
}

void LatencySummary::Record(uint64_t now_ns, uint64_t value_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.size() < capacity_) {
    ring_.push_back({now_ns, value_ns});
  } else {
    ring_[next_] = {now_ns, value_ns};
    next_ = (next_ + 1) % capacity_;
  }
  ++count_;
  sum_ns_ += value_ns;
}

std::vector<uint64_t> LatencySummary::Quantiles(const std::vector<double>& quantiles,
                                                uint64_t now_ns, uint64_t* count,
                                                uint64_t* sum_ns) const {
  std::vector<uint64_t> values;
  {
    std::lock_guard<std::mutex> lock(mu_);
    *count = count_;
    *sum_ns = sum_ns_;
    values.reserve(ring_.size());
    for (const Sample& s : ring_) {
      if (now_ns < s.at_ns || now_ns - s.at_ns <= max_age_ns_) values.push_back(s.value_ns);
    }
  }
  std::vector<uint64_t> out(quantiles.size(), 0);
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i < quantiles.size(); ++i) {
    double q = std::min(1.0, std::max(0.0, quantiles[i]));
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
    out[i] = values[rank == 0 ? 0 : rank - 1];
  }
  return out;
}

}  // namespace pyserver
