// Bounded spinning before blocking. Waking a sleeping thread costs ~40 µs on
// the machines we run on (futex or eventfd plus a context switch), which is
// most of a request's latency at low load; an idle waiter that spins a few
// tens of µs first sees new work within a microsecond. The spin is bounded
// by its deadline and by how busy the machine is, so an idle server still
// goes to sleep; whether to spin at all is learnt per waiter
// (adaptive_spin.h).
#pragma once

#include <cstdint>
#include <thread>

#include "pyserver/adaptive_spin.h"
#include "pyserver/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pyserver {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// A spinning thread that finds this much time passed between two looks at
// the clock (a few µs apart while it runs) was descheduled: another thread
// wanted its core, so spinning on only takes CPU from the busy machine.
constexpr uint64_t kSpinPreemptedNs = 50000;

// Spins until done(), NowNs() >= deadline_ns, or the spinning thread is
// found to have been descheduled (see kSpinPreemptedNs: a spin is bounded
// by how busy the machine is, not only by its deadline). Returns done()'s
// last value.
template <typename Done>
bool SpinUntil(uint64_t deadline_ns, Done&& done) {
  uint32_t n = 0;
  uint64_t last = NowNs();
  while (!done()) {
    if ((++n & 63) == 0) {
      const uint64_t now = NowNs();
      if (now >= deadline_ns) return done();
      if (now - last > kSpinPreemptedNs && AdaptiveSpin::Enabled()) return done();
      last = now;
      // Let a runnable thread on this core go first (2-core machines); if
      // one ran, the next look at the clock ends the spin.
      if ((n & 1023) == 0) std::this_thread::yield();
    }
    CpuRelax();
  }
  return true;
}

// Spins until NowNs() >= deadline_ns, bounded as SpinUntil is (it may end
// early on a busy machine). For callers without a template, e.g. Cython.
inline void SpinUntilTime(uint64_t deadline_ns) {
  SpinUntil(deadline_ns, [] { return false; });
}

}  // namespace pyserver
