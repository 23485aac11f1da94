#include "pyserver/pass_through_scheduler.h"

#include <algorithm>

#include "pyserver/clock.h"
#include "pyserver/spin.h"

namespace pyserver {

PassThroughScheduler::PassThroughScheduler(std::shared_ptr<ModelStats> stats,
                                           std::shared_ptr<CompletionQueue> completions,
                                           bool preserve_ordering, uint64_t idle_spin_us)
    : Scheduler(std::move(stats), std::move(completions), preserve_ordering),
      idle_spin_(idle_spin_us * 1000) {}

PassThroughScheduler::~PassThroughScheduler() { Stop(); }

Status PassThroughScheduler::Enqueue(const RequestInfo& info, uint64_t* id) {
  QueuedRequest r;
  r.token = info.token;
  r.id = NextRequestId();
  r.batch_size = info.batch_size;
  r.shape_key = info.shape_key;
  r.enqueue_ns = NowNs();
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) {
      return Status(StatusCode::kUnavailable,
                    "Server is stopping, scheduler for model has stopped accepting new "
                    "inference requests");
    }
    queue_.push_back(r);
    stats()->AddPending(1);
    arrivals_.fetch_add(1, std::memory_order_release);
    wake = !parked_;
  }
  if (wake) cv_.notify_one();
  *id = r.id;
  return Status::Ok();
}

bool PassThroughScheduler::NextBatch(Batch* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  batch->after_idle = queue_.empty();
  const uint64_t spin_ns =
      queue_.empty() && !stopped_ && !parked_ ? idle_spin_.Budget() : 0;
  if (spin_ns > 0) {
    // Spin briefly before sleeping, while such spins pay (adaptive_spin.h);
    // the predicate below is checked under the lock afterwards, so no
    // arrival is missed.
    const uint64_t seen = arrivals_.load(std::memory_order_acquire);
    lock.unlock();
    idle_spin_.Record(SpinUntil(NowNs() + spin_ns, [&] {
      return arrivals_.load(std::memory_order_acquire) != seen;
    }));
    lock.lock();
  }
  cv_.wait(lock, [this] { return stopped_ || (!parked_ && !queue_.empty()); });
  if (stopped_) return false;
  PopFront(batch);
  lock.unlock();
  stats()->AddPending(-1);
  return true;
}

bool PassThroughScheduler::TryNextBatch(Batch* batch, uint64_t* due_ns) {
  if (due_ns != nullptr) *due_ns = 0;  // only an arrival makes a batch
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_ || queue_.empty()) return false;
    batch->after_idle = false;
    PopFront(batch);
  }
  stats()->AddPending(-1);
  return true;
}

bool PassThroughScheduler::TakeReadyBatch(Batch* batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (parked_) return false;
  }
  // Parking may begin in between: then one more batch runs on this
  // instance's thread, which is still correct.
  return TryNextBatch(batch, nullptr);
}

void PassThroughScheduler::ParkInstances(bool parked) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = parked;
  }
  if (!parked) cv_.notify_all();
}

void PassThroughScheduler::PopFront(Batch* batch) {
  batch->requests.clear();
  batch->requests.push_back(queue_.front());
  queue_.pop_front();
  batch->batch_size = std::max<uint32_t>(1, batch->requests[0].batch_size);
  batch->dequeue_ns = NowNs();
  batch->sequence = NextBatchSequence();
}

bool PassThroughScheduler::CancelQueued(uint64_t id) {
  std::vector<QueuedRequest> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [id](const QueuedRequest& r) { return r.id == id; });
    if (it == queue_.end()) return false;
    cancelled.push_back(*it);
    queue_.erase(it);
  }
  FailRequests(&cancelled, Status(StatusCode::kCancelled, "Request was cancelled"),
               FailureReason::kCanceled);
  return true;
}

void PassThroughScheduler::Stop() {
  std::vector<QueuedRequest> remaining;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    remaining.assign(queue_.begin(), queue_.end());
    queue_.clear();
  }
  cv_.notify_all();
  FailRequests(&remaining,
               Status(StatusCode::kUnavailable,
                      "Server is stopping, scheduler for model has stopped accepting new "
                      "inference requests"),
               FailureReason::kOther);
}

size_t PassThroughScheduler::QueuedCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace pyserver
