// PassThroughScheduler: for models without dynamic batching. Each request is
// its own batch, handed to whichever instance is free, first come first served.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "pyserver/adaptive_spin.h"
#include "pyserver/scheduler.h"

namespace pyserver {

class PassThroughScheduler : public Scheduler {
 public:
  PassThroughScheduler(std::shared_ptr<ModelStats> stats,
                       std::shared_ptr<CompletionQueue> completions, bool preserve_ordering,
                       uint64_t idle_spin_us = 50);
  ~PassThroughScheduler() override;

  Status Enqueue(const RequestInfo& info, uint64_t* id) override;
  bool NextBatch(Batch* batch) override;
  bool TryNextBatch(Batch* batch, uint64_t* due_ns) override;
  bool TakeReadyBatch(Batch* batch) override;
  void ParkInstances(bool parked) override;
  void Stop() override;
  size_t QueuedCount() const override;

 protected:
  bool CancelQueued(uint64_t id) override;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<QueuedRequest> queue_;
  bool stopped_ = false;
  bool parked_ = false;  // see Scheduler::ParkInstances
  AdaptiveSpin idle_spin_;  // an idle instance's spin before it sleeps
  std::atomic<uint64_t> arrivals_{0};  // read while spinning, without mu_

  void PopFront(Batch* batch);  // under mu_, queue_ not empty
};

}  // namespace pyserver
