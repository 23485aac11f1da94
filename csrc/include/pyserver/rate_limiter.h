// RateLimiter: Triton's execution_count rate limiter. Model instances that
// list rate_limiter resources must hold them to execute a batch; the
// resources are counted per device (or globally, for `global` ones), with as
// many copies as the largest need among the instances, or as
// --rate-limit-resource says. When instances contend, the one with the
// lowest executions x priority goes first, so priority 2 gets half the
// turns of priority 1; they are served strictly in that order (one whose
// resources are short holds back those after it, as in Triton).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pyserver/status.h"

namespace pyserver {

struct ResourceNeed {
  std::string name;
  bool global = false;
  uint32_t count = 0;
};

class RateLimiter {
 public:
  // --rate-limit-resource entries: (name, device or kAnyDevice, count).
  static constexpr int kAnyDevice = -1;
  using ExplicitResources = std::vector<std::tuple<std::string, int, uint32_t>>;

  explicit RateLimiter(ExplicitResources explicit_resources);

  // Registers an instance on `device`; INVALID_ARG (Triton's texts) when a
  // resource is both global and per-device, or the explicit copies of one
  // are fewer than the instance needs. An instance with no needs is never
  // held back.
  Status AddInstance(const std::vector<ResourceNeed>& needs, int device, uint32_t priority,
                     uint64_t* id);
  // No thread may be in Acquire for it (a model removes its instances once
  // their threads are joined).
  void RemoveInstance(uint64_t id);

  // Blocks until the instance's resources are its own; false once stopped.
  bool Acquire(uint64_t id);
  void Release(uint64_t id);
  // Wakes every waiter (shutdown); later Acquire calls return false.
  void Stop();

  // Copies of a resource (device: kGlobal for a global one), and how many
  // are held now.
  static constexpr int kGlobal = -2;
  uint32_t Capacity(const std::string& name, int device) const;
  uint32_t InUse(const std::string& name, int device) const;
  // Instances blocked in Acquire.
  size_t WaitingCount() const;

 private:
  using Key = std::pair<int, std::string>;  // (device or kGlobal, name)
  struct Instance {
    std::vector<std::pair<Key, uint32_t>> needs;
    uint32_t priority = 1;
    uint64_t executions = 0;
    bool waiting = false;
    bool granted = false;
    uint64_t wait_seq = 0;
  };

  uint32_t CapacityLocked(const Key& key) const;
  bool FitsLocked(const Instance& instance) const;
  // Grants waiting instances in score order while their resources are free.
  void GrantLocked();

  const ExplicitResources explicit_;
  mutable std::mutex mu_;
  std::condition_variable granted_cv_;
  std::map<uint64_t, Instance> instances_;
  std::map<Key, uint32_t> largest_need_;  // the default copies
  std::map<Key, uint32_t> in_use_;
  uint64_t next_id_ = 1;
  uint64_t next_seq_ = 0;
  bool stopped_ = false;
};

}  // namespace pyserver
