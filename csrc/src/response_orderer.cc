#include "pyserver/response_orderer.h"

#include <vector>

namespace pyserver {

void ResponseOrderer::Complete(uint64_t sequence, Completion completion) {
  std::vector<Completion> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sequence != next_sequence_) {
      held_.emplace(sequence, std::move(completion));
      return;
    }
    ready.push_back(std::move(completion));
    ++next_sequence_;
    for (auto it = held_.begin(); it != held_.end() && it->first == next_sequence_;
         it = held_.erase(it)) {
      ready.push_back(std::move(it->second));
      ++next_sequence_;
    }
    // Push while still holding mu_ so two threads cannot interleave their
    // ready runs out of order.
    sink_->PushMany(&ready);
  }
}

size_t ResponseOrderer::HeldCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

}  // namespace pyserver
