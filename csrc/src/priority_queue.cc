#include "pyserver/priority_queue.h"

#include <algorithm>

namespace pyserver {

uint64_t PolicyQueue::DeadlineFor(uint64_t enqueue_ns, uint64_t client_timeout_us) const {
  uint64_t timeout_us = policy_.default_timeout_us;
  if (policy_.allow_timeout_override && client_timeout_us != 0 &&
      client_timeout_us < timeout_us) {
    timeout_us = client_timeout_us;
  }
  return timeout_us == 0 ? 0 : enqueue_ns + timeout_us * 1000;
}

Status PolicyQueue::Enqueue(QueuedRequest request) {
  if (policy_.max_queue_size != 0 && size() >= policy_.max_queue_size) {
    return Status(StatusCode::kUnavailable, "Exceeds maximum queue size");
  }
  queue_.push_back(std::move(request));
  return Status::Ok();
}

uint64_t PolicyQueue::ApplyTimeouts(uint64_t now_ns, std::vector<QueuedRequest>* rejected) {
  uint64_t earliest = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->deadline_ns != 0 && now_ns >= it->deadline_ns) {
      if (policy_.timeout_action == QueuePolicy::TimeoutAction::kDelay) {
        delayed_.push_back(*it);
      } else {
        rejected->push_back(*it);
      }
      it = queue_.erase(it);
      continue;
    }
    if (it->deadline_ns != 0 && (earliest == 0 || it->deadline_ns < earliest)) {
      earliest = it->deadline_ns;
    }
    ++it;
  }
  return earliest;
}

size_t PolicyQueue::PopFront(size_t n, std::vector<QueuedRequest>* out) {
  size_t taken = 0;
  while (taken < n && !queue_.empty()) {
    out->push_back(std::move(queue_.front()));
    queue_.pop_front();
    ++taken;
  }
  while (taken < n && !delayed_.empty()) {
    out->push_back(std::move(delayed_.front()));
    delayed_.pop_front();
    ++taken;
  }
  return taken;
}

bool PolicyQueue::Remove(uint64_t id, QueuedRequest* removed) {
  for (auto* q : {&queue_, &delayed_}) {
    auto it = std::find_if(q->begin(), q->end(),
                           [id](const QueuedRequest& r) { return r.id == id; });
    if (it != q->end()) {
      *removed = *it;
      q->erase(it);
      return true;
    }
  }
  return false;
}

void PolicyQueue::DrainAll(std::vector<QueuedRequest>* out) {
  for (auto& r : queue_) out->push_back(std::move(r));
  for (auto& r : delayed_) out->push_back(std::move(r));
  queue_.clear();
  delayed_.clear();
}

PriorityQueue::PriorityQueue(uint32_t priority_levels, uint32_t default_level,
                             const QueuePolicy& default_policy,
                             const std::map<uint32_t, QueuePolicy>& level_policies)
    : priority_levels_(priority_levels), default_level_(default_level) {
  if (priority_levels_ == 0) {
    default_level_ = 0;
    levels_.emplace(0u, PolicyQueue(default_policy));
    return;
  }
  for (uint32_t level = 1; level <= priority_levels_; ++level) {
    auto it = level_policies.find(level);
    levels_.emplace(level, PolicyQueue(it != level_policies.end() ? it->second : default_policy));
  }
  if (default_level_ == 0 || default_level_ > priority_levels_) default_level_ = priority_levels_;
}

uint32_t PriorityQueue::LevelFor(uint32_t priority) const {
  if (priority_levels_ == 0) return 0;
  if (priority == 0 || priority > priority_levels_) return default_level_;
  return priority;
}

PolicyQueue& PriorityQueue::Level(uint32_t level) { return levels_.at(level); }

uint64_t PriorityQueue::DeadlineFor(uint32_t level, uint64_t enqueue_ns,
                                    uint64_t client_timeout_us) const {
  return levels_.at(level).DeadlineFor(enqueue_ns, client_timeout_us);
}

Status PriorityQueue::Enqueue(QueuedRequest request) {
  PYSERVER_RETURN_IF_ERROR(Level(request.priority_level).Enqueue(std::move(request)));
  ++size_;
  return Status::Ok();
}

uint64_t PriorityQueue::ApplyTimeouts(uint64_t now_ns, std::vector<QueuedRequest>* rejected) {
  uint64_t earliest = 0;
  const size_t before = rejected->size();
  for (auto& level : levels_) {
    uint64_t e = level.second.ApplyTimeouts(now_ns, rejected);
    if (e != 0 && (earliest == 0 || e < earliest)) earliest = e;
  }
  size_ -= rejected->size() - before;
  return earliest;
}

void PriorityQueue::PopFront(size_t n, std::vector<QueuedRequest>* out) {
  for (auto& level : levels_) {
    if (n == 0) break;
    size_t taken = level.second.PopFront(n, out);
    n -= taken;
    size_ -= taken;
  }
}

bool PriorityQueue::Remove(uint64_t id, QueuedRequest* removed) {
  for (auto& level : levels_) {
    if (level.second.Remove(id, removed)) {
      --size_;
      return true;
    }
  }
  return false;
}

void PriorityQueue::DrainAll(std::vector<QueuedRequest>* out) {
  for (auto& level : levels_) level.second.DrainAll(out);
  size_ = 0;
}

}  // namespace pyserver
