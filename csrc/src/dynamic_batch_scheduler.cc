#include "pyserver/dynamic_batch_scheduler.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "pyserver/clock.h"
#include "pyserver/spin.h"
#include "pyserver/timer_slack.h"

namespace pyserver {

namespace {

const char kStoppingMessage[] =
    "Server is stopping, scheduler for model has stopped accepting new inference requests";

std::chrono::steady_clock::time_point ToTimePoint(uint64_t ns) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(ns)));
}

}  // namespace

Status DynamicBatchScheduler::Create(const DynamicBatcherConfig& config,
                                     std::shared_ptr<ModelStats> stats,
                                     std::shared_ptr<CompletionQueue> completions,
                                     std::unique_ptr<Scheduler>* scheduler) {
  if (config.max_batch_size < 1) {
    return Status(StatusCode::kInvalidArg,
                  "dynamic batching requires max_batch_size >= 1");
  }
  for (uint32_t size : config.preferred_batch_sizes) {
    if (size < 1 || size > config.max_batch_size) {
      return Status(StatusCode::kInvalidArg,
                    "dynamic batching preferred size must be positive and <= max batch size (" +
                        std::to_string(size) + " vs " + std::to_string(config.max_batch_size) + ")");
    }
  }
  if (config.priority_levels > 0 &&
      (config.default_priority_level < 1 ||
       config.default_priority_level > config.priority_levels)) {
    return Status(StatusCode::kInvalidArg,
                  "default priority level must be in range [1, " +
                      std::to_string(config.priority_levels) + "]");
  }
  for (const auto& p : config.priority_policies) {
    if (p.first < 1 || p.first > config.priority_levels) {
      return Status(StatusCode::kInvalidArg,
                    "priority queue policy must have priority level in range [1, " +
                        std::to_string(config.priority_levels) + "]");
    }
  }
  DynamicBatcherConfig normalized = config;
  if (normalized.preferred_batch_sizes.empty()) {
    normalized.preferred_batch_sizes.push_back(normalized.max_batch_size);
  }
  std::sort(normalized.preferred_batch_sizes.begin(), normalized.preferred_batch_sizes.end());
  std::shared_ptr<BatchStrategy> strategy = std::move(normalized.strategy);
  scheduler->reset(new DynamicBatchScheduler(normalized, std::move(strategy), std::move(stats),
                                             std::move(completions)));
  return Status::Ok();
}

DynamicBatchScheduler::DynamicBatchScheduler(const DynamicBatcherConfig& config,
                                             std::shared_ptr<BatchStrategy> strategy,
                                             std::shared_ptr<ModelStats> stats,
                                             std::shared_ptr<CompletionQueue> completions)
    : Scheduler(std::move(stats), std::move(completions), config.preserve_ordering),
      config_(config),
      has_strategy_(strategy != nullptr),
      max_preferred_(config.preferred_batch_sizes.back()),
      max_delay_ns_(config.max_queue_delay_us * 1000),
      queue_(config.priority_levels, config.default_priority_level, config.default_policy,
             config.priority_policies),
      strategy_(std::move(strategy)),
      delay_count_(config.delay_scheduler_count),
      idle_spin_(config.idle_spin_us * 1000) {}

DynamicBatchScheduler::~DynamicBatchScheduler() { Stop(); }

bool DynamicBatchScheduler::IsPreferred(uint32_t size) const {
  return std::binary_search(config_.preferred_batch_sizes.begin(),
                            config_.preferred_batch_sizes.end(), size);
}

Status DynamicBatchScheduler::Enqueue(const RequestInfo& info, uint64_t* id) {
  bool wait_holds;
  return EnqueueForTaker(info, id, &wait_holds);
}

Status DynamicBatchScheduler::EnqueueForTaker(const RequestInfo& info, uint64_t* id,
                                              bool* wait_holds) {
  *wait_holds = false;
  QueuedRequest r;
  r.token = info.token;
  r.id = NextRequestId();
  r.batch_size = info.batch_size;
  r.priority_level = queue_.LevelFor(info.priority);
  r.shape_key = info.shape_key;
  r.view = info.view;
  r.enqueue_ns = NowNs();
  r.deadline_ns = queue_.DeadlineFor(r.priority_level, r.enqueue_ns, info.timeout_us);
  const uint64_t deadline = r.deadline_ns;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(StatusCode::kUnavailable, kStoppingMessage);
    PYSERVER_RETURN_IF_ERROR(queue_.Enqueue(r));
    stats()->AddPending(1);
    arrivals_.fetch_add(1, std::memory_order_release);
    queued_batch_size_ += std::max<uint32_t>(1, r.batch_size);
    if (deadline != 0 && (next_deadline_ns_ == 0 || deadline < next_deadline_ns_)) {
      next_deadline_ns_ = deadline;
      if (!deadline_keeper_.joinable()) {
        deadline_keeper_ = std::thread(&DynamicBatchScheduler::KeepDeadlines, this);
      } else {
        deadline_cv_.notify_one();
      }
    }
    // Wake the waiting leader (or tell the waiting taker to ask) only when
    // this request can change its decision.
    const bool may_decide = queued_batch_size_ >= wake_threshold_ || deadline != 0 ||
                            config_.priority_levels > 0 || config_.enforce_equal_shapes ||
                            delay_count_ > 0;
    wake = leader_waiting_ && !parked_ && may_decide;
    // A custom strategy may end the batch at any request.
    *wait_holds = taker_waiting_ && !may_decide && !has_strategy_;
  }
  if (wake) leader_cv_.notify_one();
  *id = r.id;
  return Status::Ok();
}

DynamicBatchScheduler::Decision DynamicBatchScheduler::FormBatch(
    uint64_t now_ns, size_t* count, bool* saturated, uint64_t* wake_at_ns,
    std::vector<QueuedRequest>* rejected) {
  taker_waiting_ = false;
  ExpireDue(now_ns, rejected);
  if (queue_.empty()) return Decision::kEmpty;

  uint32_t pending_size = 0;
  size_t pending_count = 0;
  uint32_t best_size = 0;
  size_t best_count = 0;
  bool send_now = false;
  uint64_t oldest_ns = UINT64_MAX;
  uint64_t required_shape = 0;
  BatchStrategy* strategy = strategy_.get();
  if (strategy != nullptr) strategy->BeginBatch();
  queue_.ForEach([&](const QueuedRequest& r) {
    const uint32_t size = std::max<uint32_t>(1, r.batch_size);
    if (pending_count == 0) {
      required_shape = r.shape_key;
    } else if (config_.enforce_equal_shapes && r.shape_key != required_shape) {
      send_now = true;
      return false;
    }
    if (pending_size + size > max_preferred_ && best_size == 0 && pending_count > 0) {
      best_size = pending_size;
      best_count = pending_count;
    }
    if (pending_size + size > config_.max_batch_size && pending_count > 0) {
      send_now = true;
      return false;
    }
    if (strategy != nullptr && !strategy->Include(r) && pending_count > 0) {
      send_now = true;
      return false;
    }
    pending_size += size;
    ++pending_count;
    oldest_ns = std::min(oldest_ns, r.enqueue_ns);
    if (IsPreferred(pending_size)) {
      best_size = pending_size;
      best_count = pending_count;
    }
    // A lone request larger than max_batch_size (validation should have
    // refused it) still runs, alone.
    return pending_size < config_.max_batch_size;
  });
  if (strategy != nullptr) strategy->EndBatch();

  const bool delay_exceeded = max_delay_ns_ > 0 && now_ns - oldest_ns >= max_delay_ns_;
  const bool full = send_now || pending_size >= config_.max_batch_size;
  if (config_.eager) {
    *count = pending_count;
    *saturated = full;
    return Decision::kSend;
  }
  if (best_size != 0 && !delay_exceeded) {
    *count = best_count;
    *saturated = true;
    return Decision::kSend;
  }
  if (send_now || pending_size >= max_preferred_ || delay_exceeded || max_delay_ns_ == 0) {
    *count = pending_count;
    *saturated = full || pending_size >= max_preferred_;
    return Decision::kSend;
  }
  uint64_t wake_at = oldest_ns + max_delay_ns_;
  if (next_deadline_ns_ != 0) wake_at = std::min(wake_at, next_deadline_ns_);
  *wake_at_ns = wake_at;
  wake_threshold_ = config_.max_batch_size;
  for (uint32_t p : config_.preferred_batch_sizes) {
    if (p > pending_size) {
      wake_threshold_ = p;
      break;
    }
  }
  return Decision::kWait;
}

void DynamicBatchScheduler::ExpireDue(uint64_t now_ns, std::vector<QueuedRequest>* rejected) {
  if (next_deadline_ns_ == 0 || now_ns < next_deadline_ns_) return;
  const size_t before = rejected->size();
  next_deadline_ns_ = queue_.ApplyTimeouts(now_ns, rejected);
  for (size_t i = before; i < rejected->size(); ++i) {
    queued_batch_size_ -= std::max<uint32_t>(1, (*rejected)[i].batch_size);
  }
}

void DynamicBatchScheduler::KeepDeadlines() {
  std::vector<QueuedRequest> rejected;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    if (next_deadline_ns_ == 0) {
      deadline_cv_.wait(lock);
      continue;
    }
    const uint64_t now = NowNs();
    if (now < next_deadline_ns_) {
      deadline_cv_.wait_until(lock, ToTimePoint(next_deadline_ns_));
      continue;
    }
    ExpireDue(now, &rejected);
    if (rejected.empty()) continue;  // a DELAY policy moved them behind
    lock.unlock();
    FailRequests(&rejected, Status(StatusCode::kUnavailable, "Request timeout expired"),
                 FailureReason::kRejected);
    rejected.clear();
    lock.lock();
  }
}

bool DynamicBatchScheduler::NextBatch(Batch* batch) {
  UsePreciseTimers();  // the batching delay's sleeps end on time (timer_slack.h)
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_ && leader_present_) follower_cv_.wait(lock);
  if (stopped_) return false;
  leader_present_ = true;

  bool got = false;
  bool spun = false;
  std::vector<QueuedRequest> rejected;
  while (!stopped_) {
    if (parked_) {  // the event loop takes the batches (ParkInstances)
      leader_waiting_ = true;
      leader_cv_.wait(lock);
      leader_waiting_ = false;
      continue;
    }
    if (delay_count_ > 0) {
      if (queue_.size() < delay_count_) {
        leader_waiting_ = true;
        wake_threshold_ = 1;
        leader_cv_.wait_for(lock, std::chrono::milliseconds(10));
        leader_waiting_ = false;
        continue;
      }
      delay_count_ = 0;
    }
    const uint64_t now = NowNs();
    size_t count = 0;
    bool saturated = false;
    uint64_t wake_at = 0;
    Decision decision = FormBatch(now, &count, &saturated, &wake_at, &rejected);
    if (!rejected.empty()) {
      // Fail expired requests without holding the queue lock, then look again.
      lock.unlock();
      FailRequests(&rejected, Status(StatusCode::kUnavailable, "Request timeout expired"),
                   FailureReason::kRejected);
      lock.lock();
      continue;
    }
    if (decision == Decision::kSend) {
      TakeBatch(count, saturated, now, spun, batch);
      got = true;
      break;
    }
    if (decision == Decision::kEmpty) {
      const uint64_t spin_ns = spun ? 0 : idle_spin_.Budget();
      if (spin_ns > 0) {
        // Spin once per idle period, then look again under the lock (an
        // arrival after the spin's last check is seen there, never lost).
        spun = true;
        idle_spin_.Record(SpinForArrival(&lock, now + spin_ns));
        continue;
      }
    } else {
      // A batching wait: sleep through most of it and spin its end, so the
      // batch goes on time without a core burnt for the whole delay. The
      // end spun is what sleeping has overslept lately (wake_margin_ns_).
      const uint64_t spin_from = wake_at - WakeMargin(wake_at - now);
      if (now >= spin_from) {
        SpinForArrival(&lock, wake_at);
        continue;
      }
      leader_waiting_ = true;
      leader_cv_.wait_until(lock, ToTimePoint(spin_from));
      leader_waiting_ = false;
      LearnOversleep(spin_from);
      continue;
    }
    leader_waiting_ = true;
    wake_threshold_ = 1;
    leader_cv_.wait(lock);
    leader_waiting_ = false;
  }
  leader_present_ = false;
  lock.unlock();
  follower_cv_.notify_one();
  if (got) stats()->AddPending(-static_cast<int64_t>(batch->requests.size()));
  return got;
}

void DynamicBatchScheduler::TakeBatch(size_t count, bool saturated, uint64_t now_ns,
                                      bool after_idle, Batch* batch) {
  batch->requests.clear();
  queue_.PopFront(count, &batch->requests);
  uint32_t size = 0;
  for (const QueuedRequest& r : batch->requests) size += std::max<uint32_t>(1, r.batch_size);
  queued_batch_size_ -= size;
  batch->batch_size = size;
  batch->saturated = saturated;
  batch->after_idle = after_idle;
  batch->dequeue_ns = now_ns;
  batch->sequence = NextBatchSequence();
}

bool DynamicBatchScheduler::TryNextBatch(Batch* batch, uint64_t* due_ns) {
  std::vector<QueuedRequest> rejected;
  bool got = false;
  if (due_ns != nullptr) *due_ns = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return false;
    if (delay_count_ > 0) {  // the test hook holds batches until enough queue
      if (queue_.size() < delay_count_) return false;
      delay_count_ = 0;
    }
    const uint64_t now = NowNs();
    size_t count = 0;
    bool saturated = false;
    uint64_t wake_at = 0;
    Decision decision = FormBatch(now, &count, &saturated, &wake_at, &rejected);
    if (decision == Decision::kSend) {
      TakeBatch(count, saturated, now, false, batch);
      got = true;
    } else if (decision == Decision::kWait && due_ns != nullptr && rejected.empty()) {
      *due_ns = wake_at;
      taker_waiting_ = true;
    }
  }
  if (!rejected.empty()) {
    FailRequests(&rejected, Status(StatusCode::kUnavailable, "Request timeout expired"),
                 FailureReason::kRejected);
  }
  if (got) stats()->AddPending(-static_cast<int64_t>(batch->requests.size()));
  return got;
}

size_t DynamicBatchScheduler::TopUp(Batch* batch) {
  // Under preserve_ordering a later batch may already hold earlier requests.
  // A custom strategy's batch is what it chose.
  if (config_.preserve_ordering || has_strategy_ || batch->saturated ||
      batch->requests.empty()) {
    return 0;
  }
  size_t added = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_ || queue_.empty() || IsPreferred(batch->batch_size) ||
        batch->batch_size >= config_.max_batch_size) {
      return 0;
    }
    const uint64_t required_shape = batch->requests.front().shape_key;
    size_t count = 0;
    uint32_t size = batch->batch_size;
    queue_.ForEach([&](const QueuedRequest& r) {
      const uint32_t s = std::max<uint32_t>(1, r.batch_size);
      if (size + s > config_.max_batch_size) return false;
      if (config_.enforce_equal_shapes && r.shape_key != required_shape) return false;
      size += s;
      ++count;
      return !IsPreferred(size);
    });
    if (count == 0) return 0;
    const size_t before = batch->requests.size();
    queue_.PopFront(count, &batch->requests);
    added = batch->requests.size() - before;
    queued_batch_size_ -= size - batch->batch_size;
    batch->batch_size = size;
    batch->dequeue_ns = NowNs();
  }
  stats()->AddPending(-static_cast<int64_t>(added));
  return added;
}

bool DynamicBatchScheduler::TakeReadyBatch(Batch* batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (parked_) return false;
  }
  // Parking may begin in between: then one more batch runs on this
  // instance's thread, which is still correct.
  return TryNextBatch(batch, nullptr);
}

void DynamicBatchScheduler::ParkInstances(bool parked) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = parked;
  }
  if (!parked) leader_cv_.notify_all();
}

uint64_t DynamicBatchScheduler::WakeMargin(uint64_t remaining_ns) const {
  const uint64_t spin_max = config_.wait_spin_us * 1000;
  if (!AdaptiveSpin::Enabled()) {  // as before: spin through a short wait, sleep a long one
    return remaining_ns <= spin_max ? remaining_ns : 0;
  }
  return std::min(remaining_ns, std::min(spin_max, wake_margin_ns_));
}

void DynamicBatchScheduler::LearnOversleep(uint64_t target_ns) {
  const uint64_t now = NowNs();
  if (now < target_ns) return;  // woken by an arrival, not by the timer
  // The margin follows the timer's oversleep (an average over ~8 waits)
  // plus a few µs, within [kMinWakeMarginNs, wait_spin_us].
  const int64_t sample = static_cast<int64_t>(now - target_ns + kWakeMarginSlackNs);
  const int64_t margin = static_cast<int64_t>(wake_margin_ns_);
  wake_margin_ns_ = static_cast<uint64_t>(
      std::max<int64_t>(kMinWakeMarginNs, margin + (sample - margin) / 8));
}

bool DynamicBatchScheduler::SpinForArrival(std::unique_lock<std::mutex>* lock,
                                           uint64_t deadline_ns) {
  const uint64_t seen = arrivals_.load(std::memory_order_acquire);
  lock->unlock();
  bool arrived = SpinUntil(deadline_ns, [&] {
    return arrivals_.load(std::memory_order_acquire) != seen;
  });
  lock->lock();
  return arrived;
}

bool DynamicBatchScheduler::CancelQueued(uint64_t id) {
  std::vector<QueuedRequest> cancelled(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.Remove(id, &cancelled[0])) return false;
    queued_batch_size_ -= std::max<uint32_t>(1, cancelled[0].batch_size);
  }
  FailRequests(&cancelled, Status(StatusCode::kCancelled, "Request was cancelled"),
               FailureReason::kCanceled);
  return true;
}

void DynamicBatchScheduler::Stop() {
  std::vector<QueuedRequest> remaining;
  std::shared_ptr<BatchStrategy> strategy;  // let go below, outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    queue_.DrainAll(&remaining);
    queued_batch_size_ = 0;
    strategy.swap(strategy_);  // no batch forms once stopped
  }
  leader_cv_.notify_all();
  follower_cv_.notify_all();
  deadline_cv_.notify_all();
  // Enqueue starts the keeper only before stopped_ is set, so this is its
  // last change; Stop() never runs on the keeper itself.
  if (deadline_keeper_.joinable()) deadline_keeper_.join();
  FailRequests(&remaining, Status(StatusCode::kUnavailable, kStoppingMessage),
               FailureReason::kOther);
}

size_t DynamicBatchScheduler::QueuedCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace pyserver
