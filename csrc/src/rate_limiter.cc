#include "pyserver/rate_limiter.h"

#include <algorithm>

namespace pyserver {

RateLimiter::RateLimiter(ExplicitResources explicit_resources)
    : explicit_(std::move(explicit_resources)) {}

uint32_t RateLimiter::CapacityLocked(const Key& key) const {
  if (explicit_.empty()) {
    auto it = largest_need_.find(key);
    return it == largest_need_.end() ? 0 : it->second;
  }
  // As Triton: with explicit resources, one not given has no copies; a
  // global one takes the largest count given for its name on any device.
  uint32_t count = 0;
  for (const auto& [name, device, copies] : explicit_) {
    if (name != key.second) continue;
    if (key.first == kGlobal || device == kAnyDevice || device == key.first) {
      count = std::max(count, copies);
    }
  }
  return count;
}

Status RateLimiter::AddInstance(const std::vector<ResourceNeed>& needs, int device,
                                uint32_t priority, uint64_t* id) {
  std::lock_guard<std::mutex> lock(mu_);
  Instance instance;
  instance.priority = std::max<uint32_t>(priority, 1);  // 0 counts as 1, as in Triton
  for (const ResourceNeed& need : needs) {
    Key key{need.global ? kGlobal : device, need.name};
    // A name is either global or per-device across every loaded model.
    for (const auto& [known, copies] : largest_need_) {
      if (known.second == need.name && (known.first == kGlobal) != need.global) {
        return Status(StatusCode::kInvalidArg,
                      "Resource \"" + need.name +
                          "\" is present as both global and device-specific resource in the "
                          "model configuration.");
      }
    }
    if (!explicit_.empty() && CapacityLocked(key) < need.count) {
      return Status(StatusCode::kInvalidArg,
                    "Resource count for \"" + need.name + "\" is limited to " +
                        std::to_string(CapacityLocked(key)) +
                        " which will prevent scheduling of one or more model instances, the "
                        "minimum required count is " + std::to_string(need.count));
    }
    instance.needs.emplace_back(key, need.count);
  }
  for (const auto& [key, count] : instance.needs) {
    uint32_t& largest = largest_need_[key];
    largest = std::max(largest, count);
  }
  *id = next_id_++;
  instances_.emplace(*id, std::move(instance));
  return Status::Ok();
}

void RateLimiter::RemoveInstance(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = instances_.find(id);
  if (it == instances_.end()) return;
  if (it->second.granted) {
    for (const auto& [key, count] : it->second.needs) in_use_[key] -= count;
  }
  instances_.erase(it);
  // The default copies stay as they were: a resource never shrinks under
  // instances that are running.
  GrantLocked();
  granted_cv_.notify_all();
}

bool RateLimiter::FitsLocked(const Instance& instance) const {
  for (const auto& [key, count] : instance.needs) {
    auto used = in_use_.find(key);
    uint32_t held = used == in_use_.end() ? 0 : used->second;
    if (held + count > CapacityLocked(key)) return false;
  }
  return true;
}

void RateLimiter::GrantLocked() {
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, Instance*>> waiting;
  for (auto& [id, instance] : instances_) {
    if (instance.waiting) {
      waiting.push_back({{instance.executions * instance.priority, instance.wait_seq}, &instance});
    }
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [score, instance] : waiting) {
    // Strictly in turn, as Triton: the first that does not fit holds the
    // rest back, so a large need is never starved by smaller ones.
    if (!FitsLocked(*instance)) break;
    for (const auto& [key, count] : instance->needs) in_use_[key] += count;
    instance->waiting = false;
    instance->granted = true;
    ++instance->executions;
  }
}

bool RateLimiter::Acquire(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = instances_.find(id);
  if (it == instances_.end() || stopped_) return false;
  Instance& instance = it->second;
  if (instance.needs.empty()) return true;
  instance.waiting = true;
  instance.wait_seq = next_seq_++;
  GrantLocked();
  granted_cv_.wait(lock, [&] { return instance.granted || stopped_; });
  if (!instance.granted) {
    instance.waiting = false;
    return false;
  }
  return true;
}

void RateLimiter::Release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = instances_.find(id);
  if (it == instances_.end() || !it->second.granted) return;
  for (const auto& [key, count] : it->second.needs) in_use_[key] -= count;
  it->second.granted = false;
  GrantLocked();
  granted_cv_.notify_all();
}

void RateLimiter::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  granted_cv_.notify_all();
}

uint32_t RateLimiter::Capacity(const std::string& name, int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CapacityLocked({device, name});
}

uint32_t RateLimiter::InUse(const std::string& name, int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find({device, name});
  return it == in_use_.end() ? 0 : it->second;
}

size_t RateLimiter::WaitingCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& entry : instances_) n += entry.second.waiting ? 1 : 0;
  return n;
}

}  // namespace pyserver
