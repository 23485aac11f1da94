// AdaptiveSpin: whether a waiter spins before it blocks, learnt from how its
// recent spins ended.
//
// A spin pays when what it waits for comes inside it: the waiter then skips
// a sleep and a wake-up (~40 µs on the machines we run on). A spin the wait
// outlasts is CPU burnt for nothing, and on a machine whose cores are all
// busy it also takes a core from the thread it waits for. So each waiter
// keeps a score of its recent spins (an exponential average of caught = 1,
// missed = 0) and spins only while at least half of them caught their event;
// while off, one wait in kProbeEvery still spins, so that a change of load
// is noticed. At c1 (the next request a client's round trip away) the
// spins stop after a handful of misses; under load they stay on.
//
// Thread-safe (relaxed atomics: a lost update only nudges the average).
// PYSERVER_ADAPTIVE_SPIN=0 in the environment turns the learning off
// (every wait spins its maximum, the behaviour before this class) for A/B
// measurements.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace pyserver {

class AdaptiveSpin {
 public:
  static constexpr uint32_t kOne = 1024;        // the score of a spin that always catches
  static constexpr uint32_t kThreshold = kOne / 2;
  static constexpr uint32_t kProbeEvery = 16;

  explicit AdaptiveSpin(uint64_t max_ns) : max_ns_(max_ns) {}

  // Whether the next wait spins: yes while recent spins mostly caught their
  // event; otherwise one wait in kProbeEvery (a probe).
  bool ShouldSpin() {
    if (!Enabled() || score_.load(std::memory_order_relaxed) >= kThreshold) return true;
    uint32_t n = probes_.fetch_add(1, std::memory_order_relaxed) + 1;
    return n % kProbeEvery == 0;
  }

  // How long the next wait may spin: max_ns() when ShouldSpin(), else 0.
  uint64_t Budget() { return max_ns_ > 0 && ShouldSpin() ? max_ns_ : 0; }

  // How a wait that spun (ShouldSpin(), Budget() > 0) ended: caught = the awaited event
  // came within the spin.
  void Record(bool caught) {
    uint32_t s = score_.load(std::memory_order_relaxed);
    // s += (target - s) / 8, in integers (kOne keeps it in range).
    s = caught ? s + (kOne - s + 7) / 8 : s - (s + 7) / 8;
    score_.store(s, std::memory_order_relaxed);
  }

  uint64_t max_ns() const { return max_ns_; }
  uint32_t score() const { return score_.load(std::memory_order_relaxed); }
  bool spinning() const { return score() >= kThreshold || !Enabled(); }

  // False when PYSERVER_ADAPTIVE_SPIN=0 (read once per process).
  static bool Enabled() {
    static const bool enabled = [] {
      const char* v = std::getenv("PYSERVER_ADAPTIVE_SPIN");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return enabled;
  }

 private:
  const uint64_t max_ns_;
  std::atomic<uint32_t> score_{kOne};  // start spinning, as before any evidence
  std::atomic<uint32_t> probes_{0};
};

}  // namespace pyserver
