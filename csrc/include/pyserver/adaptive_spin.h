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
// A waiter may also say how long a spin may last and still pay (pay_ns):
// a spin that catches its event only after that long burnt more CPU than
// the sleep and wake-up it saved, so it scores as a miss, and a probe spins
// no longer than that. kSpinPaysNs is such a bound for a waiter with a core
// to itself: about twice what a wake-up adds inside the server here (48 µs
// p50; bench/README.md, "What a wake-up costs on this machine"). A Python
// worker alone in the server caught its next batch after 130-176 µs (p10-
// p90) under perf_analyzer at c1, and stops spinning; after 74-88 µs under
// wrk at c1, where the spin keeps p50 at 0.12 ms against 0.16 without it.
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

  // See above.
  static constexpr uint64_t kSpinPaysNs = 100 * 1000;

  // pay_ns: see above; by default any catch within max_ns pays.
  explicit AdaptiveSpin(uint64_t max_ns) : max_ns_(max_ns), pay_ns_(max_ns) {}
  AdaptiveSpin(uint64_t max_ns, uint64_t pay_ns)
      : max_ns_(max_ns), pay_ns_(pay_ns < max_ns ? pay_ns : max_ns) {}

  // Whether the next wait spins: yes while recent spins mostly caught their
  // event; otherwise one wait in kProbeEvery (a probe).
  bool ShouldSpin() { return NextTurn() != Turn::kRest; }

  // How long the next wait may spin: max_ns() while spinning, pay_ns() for
  // a probe (a later catch would score as a miss anyway), else 0.
  uint64_t Budget() {
    if (max_ns_ == 0) return 0;
    switch (NextTurn()) {
      case Turn::kSpin: return max_ns_;
      case Turn::kProbe: return pay_ns_;
      default: return 0;
    }
  }

  // How a wait that spun (Budget() > 0) ended: caught = the awaited event
  // came within the spin, spun_ns = how long it spun (a catch after more
  // than pay_ns() scores as a miss).
  void Record(bool caught, uint64_t spun_ns = 0) {
    if (spun_ns > pay_ns_) caught = false;
    uint32_t s = score_.load(std::memory_order_relaxed);
    // s += (target - s) / 8, in integers (kOne keeps it in range).
    s = caught ? s + (kOne - s + 7) / 8 : s - (s + 7) / 8;
    score_.store(s, std::memory_order_relaxed);
  }

  uint64_t max_ns() const { return max_ns_; }
  uint64_t pay_ns() const { return pay_ns_; }
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
  enum class Turn { kSpin, kProbe, kRest };
  Turn NextTurn() {
    if (!Enabled() || score_.load(std::memory_order_relaxed) >= kThreshold) return Turn::kSpin;
    uint32_t n = probes_.fetch_add(1, std::memory_order_relaxed) + 1;
    return n % kProbeEvery == 0 ? Turn::kProbe : Turn::kRest;
  }

  const uint64_t max_ns_;
  const uint64_t pay_ns_;
  std::atomic<uint32_t> score_{kOne};  // start spinning, as before any evidence
  std::atomic<uint32_t> probes_{0};
};

}  // namespace pyserver
