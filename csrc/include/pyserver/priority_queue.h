// PriorityQueue: the dynamic batcher's queue. One PolicyQueue per priority
// level (lower level = served first); each applies its level's queue policy
// (max size, default timeout, timeout override, REJECT or DELAY on expiry).
// Requests whose timeout expired under DELAY stay batchable but move behind
// the level's unexpired requests.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "pyserver/scheduler.h"
#include "pyserver/status.h"

namespace pyserver {

struct QueuePolicy {
  enum class TimeoutAction { kReject = 0, kDelay = 1 };
  TimeoutAction timeout_action = TimeoutAction::kReject;
  uint64_t default_timeout_us = 0;
  bool allow_timeout_override = false;
  uint32_t max_queue_size = 0;  // 0 = unbounded
};

class PolicyQueue {
 public:
  explicit PolicyQueue(const QueuePolicy& policy) : policy_(policy) {}

  // Absolute deadline for a request enqueued at enqueue_ns; 0 = none. A
  // client timeout can only shorten the policy's default (as in Triton).
  uint64_t DeadlineFor(uint64_t enqueue_ns, uint64_t client_timeout_us) const;
  Status Enqueue(QueuedRequest request);

  size_t size() const { return queue_.size() + delayed_.size(); }
  bool empty() const { return queue_.empty() && delayed_.empty(); }

  // Moves expired requests to the delayed part (DELAY) or into *rejected
  // (REJECT). Returns the earliest deadline still pending, 0 if none.
  uint64_t ApplyTimeouts(uint64_t now_ns, std::vector<QueuedRequest>* rejected);

  // Visits requests in batching order: unexpired first, then delayed.
  // `visit` returns false to stop; returns false if stopped early.
  template <typename Visit>
  bool ForEach(Visit&& visit) const {
    for (const QueuedRequest& r : queue_) if (!visit(r)) return false;
    for (const QueuedRequest& r : delayed_) if (!visit(r)) return false;
    return true;
  }

  // Removes up to n requests from the front (batching order) into *out.
  size_t PopFront(size_t n, std::vector<QueuedRequest>* out);
  bool Remove(uint64_t id, QueuedRequest* removed);
  void DrainAll(std::vector<QueuedRequest>* out);

 private:
  QueuePolicy policy_;
  std::deque<QueuedRequest> queue_;
  std::deque<QueuedRequest> delayed_;
};

class PriorityQueue {
 public:
  // priority_levels 0 means a single level. Levels are 1..priority_levels.
  PriorityQueue(uint32_t priority_levels, uint32_t default_level,
                const QueuePolicy& default_policy,
                const std::map<uint32_t, QueuePolicy>& level_policies);

  // Maps a client priority to a level: 0 or out of range -> default level.
  uint32_t LevelFor(uint32_t priority) const;
  uint64_t DeadlineFor(uint32_t level, uint64_t enqueue_ns, uint64_t client_timeout_us) const;

  Status Enqueue(QueuedRequest request);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  uint64_t ApplyTimeouts(uint64_t now_ns, std::vector<QueuedRequest>* rejected);

  template <typename Visit>
  void ForEach(Visit&& visit) const {
    for (const auto& level : levels_) {
      if (!level.second.ForEach(visit)) return;
    }
  }

  void PopFront(size_t n, std::vector<QueuedRequest>* out);
  bool Remove(uint64_t id, QueuedRequest* removed);
  void DrainAll(std::vector<QueuedRequest>* out);

 private:
  PolicyQueue& Level(uint32_t level);

  uint32_t priority_levels_;
  uint32_t default_level_;
  std::map<uint32_t, PolicyQueue> levels_;  // ordered: lowest level first
  size_t size_ = 0;
};

}  // namespace pyserver
