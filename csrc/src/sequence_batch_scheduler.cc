#include "pyserver/sequence_batch_scheduler.h"

#include <algorithm>
#include <chrono>

#include "pyserver/clock.h"

namespace pyserver {

namespace {

const char kStopping[] =
    "Server is stopping, scheduler for model has stopped accepting new inference requests";

std::chrono::steady_clock::time_point AtNs(uint64_t ns) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(ns)));
}

}  // namespace

Status SequenceBatchScheduler::Create(const SequenceBatcherConfig& config,
                                      std::shared_ptr<ModelStats> stats,
                                      std::shared_ptr<CompletionQueue> completions,
                                      std::unique_ptr<Scheduler>* scheduler) {
  if (config.instance_count == 0) {
    return Status(StatusCode::kInvalidArg, "a sequence batcher needs at least one instance");
  }
  for (uint32_t size : config.preferred_batch_sizes) {
    if (size == 0 || size > std::max<uint32_t>(1, config.max_batch_size)) {
      return Status(StatusCode::kInvalidArg,
                    "sequence batching preferred batch size " + std::to_string(size) +
                        " must be in [1, max_batch_size]");
    }
  }
  scheduler->reset(new SequenceBatchScheduler(config, std::move(stats), std::move(completions)));
  return Status::Ok();
}

SequenceBatchScheduler::SequenceBatchScheduler(const SequenceBatcherConfig& config,
                                               std::shared_ptr<ModelStats> stats,
                                               std::shared_ptr<CompletionQueue> completions)
    : Scheduler(std::move(stats), std::move(completions), config.preserve_ordering),
      config_(config),
      slots_per_instance_(config.oldest && config.max_candidate_sequences > 0
                              ? config.max_candidate_sequences
                              : std::max<uint32_t>(1, config.max_batch_size)),
      max_rows_(std::max<uint32_t>(1, config.max_batch_size)) {
  slots_.resize(static_cast<size_t>(slots_per_instance_) * config_.instance_count);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].instance = i / slots_per_instance_;
  // A stack popped from the back: hand out instance 0's first slot first,
  // then spread over instances so sequences share the load.
  for (uint32_t k = slots_per_instance_; k-- > 0;) {
    for (uint32_t inst = config_.instance_count; inst-- > 0;) {
      free_slots_.push_back(static_cast<size_t>(inst) * slots_per_instance_ + k);
    }
  }
}

SequenceBatchScheduler::~SequenceBatchScheduler() { Stop(); }

Status SequenceBatchScheduler::Enqueue(const RequestInfo& info, uint64_t* id) {
  if (info.correlation_id == 0) {
    return Status(StatusCode::kInvalidArg,
                  "inference request to model '" + config_.model_name +
                      "' must specify a non-zero or non-empty correlation ID");
  }
  if (info.batch_size > 1) {
    return Status(StatusCode::kInvalidArg,
                  "inference request to model '" + config_.model_name +
                      "' must specify batch-size 1 due to requirements of sequence batcher");
  }
  const bool start = (info.sequence_flags & kSequenceStart) != 0;
  const bool end = (info.sequence_flags & kSequenceEnd) != 0;
  const uint64_t corr = info.correlation_id;
  QueuedRequest r;
  r.token = info.token;
  r.id = NextRequestId();
  r.batch_size = info.batch_size;
  r.correlation_id = corr;
  r.sequence_flags = info.sequence_flags;
  r.enqueue_ns = NowNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(StatusCode::kUnavailable, kStopping);
    ReapIdle(NowNs());
    auto active = active_.find(corr);
    auto backlogged = backlog_index_.find(corr);
    if (!start && active == active_.end() && backlogged == backlog_index_.end()) {
      const std::string label =
          info.correlation_label.empty() ? std::to_string(corr) : info.correlation_label;
      return Status(StatusCode::kInvalidArg,
                    "inference request for sequence " + label + " to model '" +
                        config_.model_name +
                        "' must specify the START flag on the first request of the sequence");
    }
    // A START for a sequence still in progress continues in its place, as
    // in Triton: the earlier sequence ended without its END.
    if (active != active_.end()) {
      Slot& slot = slots_[active->second];
      slot.queue.push_back(r);
      slot.last_activity_ns = r.enqueue_ns;
      if (end) {
        slot.end_queued = true;
        active_.erase(active);
      }
    } else if (backlogged != backlog_index_.end()) {
      backlogged->second->queue.push_back(r);
      if (end) {
        backlogged->second->end_queued = true;
        backlog_index_.erase(backlogged);
      }
    } else if (!free_slots_.empty()) {
      const size_t index = free_slots_.back();
      free_slots_.pop_back();
      Slot& slot = slots_[index];
      slot.bound = true;
      slot.correlation_id = corr;
      slot.end_queued = end;
      slot.last_activity_ns = r.enqueue_ns;
      slot.queue.push_back(r);
      if (!end) active_[corr] = index;
    } else {
      auto sequence = std::make_shared<BacklogSequence>();
      sequence->correlation_id = corr;
      sequence->end_queued = end;
      sequence->queue.push_back(r);
      backlog_.push_back(sequence);
      if (!end) backlog_index_[corr] = std::move(sequence);
    }
    ++queued_;
    stats()->AddPending(1);
  }
  // One condition variable for every instance: sequence traffic is light
  // next to a batch's execution, and a precise wake-up would need one per
  // instance for little gain.
  cv_.notify_all();
  *id = r.id;
  return Status::Ok();
}

uint32_t SequenceBatchScheduler::InstanceOfCaller() {
  const std::thread::id me = std::this_thread::get_id();
  auto it = instance_of_thread_.find(me);
  if (it != instance_of_thread_.end()) return it->second;
  const uint32_t index =
      static_cast<uint32_t>(instance_of_thread_.size() % config_.instance_count);
  instance_of_thread_[me] = index;
  return index;
}

void SequenceBatchScheduler::Bind(size_t index, BacklogSequence* from) {
  Slot& slot = slots_[index];
  slot.bound = true;
  slot.correlation_id = from->correlation_id;
  slot.end_queued = from->end_queued;
  slot.last_activity_ns = NowNs();
  slot.queue = std::move(from->queue);
  if (!from->end_queued) {
    backlog_index_.erase(from->correlation_id);
    active_[from->correlation_id] = index;
  }
}

void SequenceBatchScheduler::ReleaseSlot(size_t index) {
  Slot& slot = slots_[index];
  auto active = active_.find(slot.correlation_id);
  if (active != active_.end() && active->second == index) active_.erase(active);
  slot.bound = false;
  slot.end_queued = false;
  slot.correlation_id = 0;
  while (!backlog_.empty()) {
    std::shared_ptr<BacklogSequence> next = backlog_.front();
    backlog_.pop_front();
    if (next->queue.empty()) continue;  // every request was cancelled
    Bind(index, next.get());
    return;
  }
  free_slots_.push_back(index);
}

void SequenceBatchScheduler::ReapIdle(uint64_t now_ns) {
  const uint64_t idle_ns = config_.max_sequence_idle_us * 1000;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    // last_activity_ns may be later than now_ns (taken by another thread
    // just before this one got the lock): not idle.
    if (slot.bound && slot.queue.empty() && now_ns > slot.last_activity_ns &&
        now_ns - slot.last_activity_ns >= idle_ns) {
      ReleaseSlot(i);
    }
  }
}

uint64_t SequenceBatchScheduler::NextIdleDeadline() const {
  uint64_t deadline = 0;
  for (const Slot& slot : slots_) {
    if (!slot.bound || !slot.queue.empty()) continue;
    const uint64_t at = slot.last_activity_ns + config_.max_sequence_idle_us * 1000;
    if (deadline == 0 || at < deadline) deadline = at;
  }
  return deadline;
}

std::vector<size_t> SequenceBatchScheduler::ReadySlots(uint32_t instance) const {
  std::vector<size_t> ready;
  const size_t first = static_cast<size_t>(instance) * slots_per_instance_;
  for (size_t i = first; i < first + slots_per_instance_; ++i) {
    if (!slots_[i].queue.empty()) ready.push_back(i);
  }
  std::sort(ready.begin(), ready.end(), [this](size_t a, size_t b) {
    return slots_[a].queue.front().enqueue_ns < slots_[b].queue.front().enqueue_ns;
  });
  return ready;
}

bool SequenceBatchScheduler::NextBatch(Batch* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint32_t instance = InstanceOfCaller();
  bool waited = false;
  for (;;) {
    if (stopped_) return false;
    const uint64_t now = NowNs();
    ReapIdle(now);
    std::vector<size_t> ready = ReadySlots(instance);
    uint64_t wake_ns = NextIdleDeadline();
    if (!ready.empty()) {
      bool go = true;
      if (config_.max_queue_delay_us > 0 && ready.size() < max_rows_) {
        // Wait for a fuller batch until the oldest request has waited
        // max_queue_delay: oldest, for a preferred (or full) batch; direct,
        // for minimum_slot_utilization of the slots.
        bool enough;
        if (config_.oldest) {
          const auto& preferred = config_.preferred_batch_sizes;
          enough = std::find(preferred.begin(), preferred.end(), ready.size()) != preferred.end();
        } else {
          enough = static_cast<double>(ready.size()) >=
                   static_cast<double>(config_.minimum_slot_utilization) * slots_per_instance_;
        }
        const uint64_t due =
            slots_[ready.front()].queue.front().enqueue_ns + config_.max_queue_delay_us * 1000;
        if (!enough && now < due) {
          go = false;
          if (wake_ns == 0 || due < wake_ns) wake_ns = due;
        }
      }
      if (go) {
        if (ready.size() > max_rows_) ready.resize(max_rows_);
        batch->requests.clear();
        batch->after_idle = waited;
        batch->saturated = true;  // one request per sequence: nothing to top up
        for (size_t index : ready) {
          Slot& slot = slots_[index];
          batch->requests.push_back(slot.queue.front());
          slot.queue.pop_front();
          slot.last_activity_ns = now;
          // Its END (or EndSequence) came and nothing of it is left.
          if (slot.end_queued && slot.queue.empty()) ReleaseSlot(index);
        }
        batch->batch_size = static_cast<uint32_t>(batch->requests.size());
        batch->dequeue_ns = now;
        batch->sequence = NextBatchSequence();
        queued_ -= batch->requests.size();
        lock.unlock();
        stats()->AddPending(-static_cast<int64_t>(batch->requests.size()));
        // A released slot may have bound a backlogged sequence to another
        // instance's slot.
        cv_.notify_all();
        return true;
      }
    }
    waited = true;
    if (wake_ns != 0) {
      cv_.wait_until(lock, AtNs(wake_ns));
    } else {
      cv_.wait(lock);
    }
  }
}

bool SequenceBatchScheduler::CancelQueued(uint64_t id) {
  std::vector<QueuedRequest> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto take = [&](std::deque<QueuedRequest>* queue) {
      auto it = std::find_if(queue->begin(), queue->end(),
                             [id](const QueuedRequest& r) { return r.id == id; });
      if (it == queue->end()) return false;
      cancelled.push_back(*it);
      queue->erase(it);
      return true;
    };
    bool found = false;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (take(&slot.queue)) {
        found = true;
        // An iterative sequence is its one request: cancelled, it is over.
        if (config_.iterative && slot.queue.empty()) {
          slot.end_queued = true;
          ReleaseSlot(i);
        }
        break;
      }
    }
    if (!found) {
      for (auto& sequence : backlog_) {
        if (take(&sequence->queue)) {
          found = true;
          break;
        }
      }
    }
    if (!found) return false;
    --queued_;
  }
  // A released slot may have bound a backlogged sequence.
  cv_.notify_all();
  FailRequests(&cancelled, Status(StatusCode::kCancelled, "Request was cancelled"),
               FailureReason::kCanceled);
  return true;
}

bool SequenceBatchScheduler::EndSequence(uint64_t correlation_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto active = active_.find(correlation_id);
    if (active != active_.end()) {
      const size_t index = active->second;
      Slot& slot = slots_[index];
      slot.end_queued = true;
      active_.erase(active);
      if (slot.queue.empty()) ReleaseSlot(index);
    } else {
      auto backlogged = backlog_index_.find(correlation_id);
      if (backlogged == backlog_index_.end()) return false;
      backlogged->second->end_queued = true;
      backlog_index_.erase(backlogged);
    }
  }
  cv_.notify_all();
  return true;
}

void SequenceBatchScheduler::Stop() {
  std::vector<QueuedRequest> remaining;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (Slot& slot : slots_) {
      remaining.insert(remaining.end(), slot.queue.begin(), slot.queue.end());
      slot.queue.clear();
    }
    for (auto& sequence : backlog_) {
      remaining.insert(remaining.end(), sequence->queue.begin(), sequence->queue.end());
      sequence->queue.clear();
    }
    backlog_.clear();
    backlog_index_.clear();
    active_.clear();
    queued_ = 0;
  }
  cv_.notify_all();
  FailRequests(&remaining, Status(StatusCode::kUnavailable, kStopping), FailureReason::kOther);
}

size_t SequenceBatchScheduler::QueuedCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

size_t SequenceBatchScheduler::ActiveSequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Slot& slot : slots_) n += slot.bound ? 1 : 0;
  return n;
}

size_t SequenceBatchScheduler::BackloggedSequences() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backlog_.size();
}

}  // namespace pyserver
