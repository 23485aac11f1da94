#include "pyserver/scheduler.h"

#include "pyserver/clock.h"

namespace pyserver {

Scheduler::Scheduler(std::shared_ptr<ModelStats> stats,
                     std::shared_ptr<CompletionQueue> completions, bool preserve_ordering)
    : stats_(std::move(stats)), completions_(std::move(completions)) {
  if (preserve_ordering) orderer_.reset(new ResponseOrderer(completions_.get()));
}

bool Scheduler::Cancel(uint64_t id) {
  if (CancelQueued(id)) return true;
  std::lock_guard<std::mutex> lock(running_mu_);
  auto it = running_.find(id);
  if (it != running_.end()) it->second->store(true, std::memory_order_relaxed);
  return false;
}

void Scheduler::WatchRunning(uint64_t id, std::shared_ptr<std::atomic<bool>> cancelled) {
  std::lock_guard<std::mutex> lock(running_mu_);
  running_[id] = std::move(cancelled);
}

void Scheduler::UnwatchRunning(uint64_t id) {
  std::lock_guard<std::mutex> lock(running_mu_);
  running_.erase(id);
}

void Scheduler::CompleteBatch(const Batch& batch, const BatchTimes& times, Token token,
                              const Status& status) {
  RecordBatch(batch, times, status);
  Completion c{token, status.code(), status.message()};
  if (orderer_) {
    orderer_->Complete(batch.sequence, std::move(c));
  } else {
    completions_->Push(std::move(c));
  }
}

bool Scheduler::CompleteAndNext(const Batch& done, const BatchTimes& times, Token token,
                                const Status& status, Batch* next, bool* signal_held) {
  *signal_held = false;
  if (orderer_) {  // the orderer pushes in dequeue order, signalling itself
    CompleteBatch(done, times, token, status);
    return NextBatch(next);
  }
  RecordBatch(done, times, status);
  completions_->PushHoldingSignal(Completion{token, status.code(), status.message()});
  if (TakeReadyBatch(next)) {
    *signal_held = true;
    return true;
  }
  completions_->ReleaseHeldSignal();
  return NextBatch(next);
}

void Scheduler::RecordBatch(const Batch& batch, const BatchTimes& times, const Status& status) {
  const uint64_t input_ns = times.compute_input_end_ns - times.compute_start_ns;
  const uint64_t infer_ns = times.compute_output_start_ns - times.compute_input_end_ns;
  const uint64_t output_ns = times.compute_end_ns - times.compute_output_start_ns;
  if (status.ok()) {
    stats_->RecordExecution(batch.batch_size, input_ns, infer_ns, output_ns);
    for (const QueuedRequest& r : batch.requests) {
      stats_->RecordSuccess(times.compute_end_ns - r.enqueue_ns,
                            batch.dequeue_ns - r.enqueue_ns, input_ns, infer_ns, output_ns);
    }
  } else {
    for (const QueuedRequest& r : batch.requests) {
      stats_->RecordFailure(times.compute_end_ns - r.enqueue_ns, FailureReason::kBackend);
    }
  }
}

void Scheduler::FailRequests(std::vector<QueuedRequest>* requests, const Status& status,
                             FailureReason reason) {
  if (requests->empty()) return;
  const uint64_t now = NowNs();
  std::vector<Completion> out;
  out.reserve(requests->size());
  for (const QueuedRequest& r : *requests) {
    stats_->RecordFailure(now - r.enqueue_ns, reason);
    out.push_back(Completion{r.token, status.code(), status.message()});
  }
  stats_->AddPending(-static_cast<int64_t>(requests->size()));
  requests->clear();
  completions_->PushMany(&out);
}

}  // namespace pyserver
