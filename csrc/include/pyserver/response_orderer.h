// ResponseOrderer: releases batch completions in the order the batches were
// taken from the queue (preserve_ordering), holding back any that finish early.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "pyserver/completion_queue.h"

namespace pyserver {

class ResponseOrderer {
 public:
  explicit ResponseOrderer(CompletionQueue* sink) : sink_(sink) {}

  // Batch `sequence` (0, 1, 2, ... in dequeue order) finished.
  void Complete(uint64_t sequence, Completion completion);

  // Completions held back, waiting for an earlier batch.
  size_t HeldCount() const;

 private:
  CompletionQueue* const sink_;
  mutable std::mutex mu_;
  uint64_t next_sequence_ = 0;
  std::map<uint64_t, Completion> held_;
};

}  // namespace pyserver
