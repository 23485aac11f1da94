// LatencyHistogram: a Prometheus histogram of integer milliseconds (Triton's
// nv_inference_first_response_histogram_ms): fixed upper bounds, one relaxed
// atomic per bucket, so observing costs no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace pyserver {

class LatencyHistogram {
 public:
  // bounds_ms: the buckets' upper bounds ("le"), ascending; +Inf is implied.
  explicit LatencyHistogram(std::vector<double> bounds_ms);

  void Observe(uint64_t ms);

  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (bounds().size() + 1, the last being +Inf), not cumulative.
  std::vector<uint64_t> Counts(uint64_t* count, uint64_t* sum_ms) const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ms_{0};
};

}  // namespace pyserver
