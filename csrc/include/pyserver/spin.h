// Bounded spinning before blocking. Waking a sleeping thread costs ~40 µs on
// the machines we run on (futex or eventfd plus a context switch), which is
// most of a request's latency at low load; an idle waiter that spins a few
// tens of µs first sees new work within a microsecond. The spin is bounded,
// so an idle server still goes to sleep.
#pragma once

#include <cstdint>
#include <thread>

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

// Spins until done() or NowNs() >= deadline_ns. Returns done()'s last value.
template <typename Done>
bool SpinUntil(uint64_t deadline_ns, Done&& done) {
  uint32_t n = 0;
  while (!done()) {
    if ((++n & 63) == 0) {
      if (NowNs() >= deadline_ns) return done();
      // Let a runnable thread on this core go first (2-core machines).
      if ((n & 1023) == 0) std::this_thread::yield();
    }
    CpuRelax();
  }
  return true;
}

}  // namespace pyserver
