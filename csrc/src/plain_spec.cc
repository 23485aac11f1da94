#include "pyserver/plain_spec.h"

#include <utility>

namespace pyserver {

PlainSpec::PlainSpec(std::vector<Input> inputs, std::vector<std::string> outputs,
                     uint32_t max_batch_size)
    : inputs_(std::move(inputs)), outputs_(std::move(outputs)), max_batch_size_(max_batch_size) {}

int PlainSpec::MatchInput(std::string_view name, std::string_view datatype,
                          const int64_t* shape, size_t ndim, Match* match) const {
  if (inputs_.size() > kMaxNamed) return -1;
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const Input& spec = inputs_[k];
    if (spec.name != name) continue;
    const uint64_t bit = uint64_t{1} << k;
    if ((match->inputs_seen & bit) != 0 || spec.datatype != datatype ||
        !ShapeFits(spec, shape, ndim, match->inputs_seen == 0, &match->batch_size)) {
      return -1;
    }
    match->inputs_seen |= bit;
    return static_cast<int>(k);
  }
  return -1;
}

int PlainSpec::MatchOutput(std::string_view name, Match* match) const {
  if (outputs_.size() > kMaxNamed) return -1;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    if (outputs_[k] != name) continue;
    const uint64_t bit = uint64_t{1} << k;
    if ((match->outputs_seen & bit) != 0) return -1;
    match->outputs_seen |= bit;
    return static_cast<int>(k);
  }
  return -1;
}

// The model's dims after a batch dimension when it batches: that dimension
// in 1..max_batch_size, set by the request's first input (`first`) and the
// same for the others.
bool PlainSpec::ShapeFits(const Input& spec, const int64_t* shape, size_t ndim, bool first,
                          int64_t* batch_size) const {
  const size_t lead = batching() ? 1 : 0;
  if (ndim != spec.dims.size() + lead) return false;
  if (lead != 0) {
    if (first) {
      if (shape[0] <= 0 || shape[0] > static_cast<int64_t>(max_batch_size_)) return false;
      *batch_size = shape[0];
    } else if (shape[0] != *batch_size) {
      return false;
    }
  }
  for (size_t j = 0; j < spec.dims.size(); ++j) {
    if (spec.dims[j] <= 0 || shape[j + lead] != spec.dims[j]) return false;
  }
  return true;
}

}  // namespace pyserver
