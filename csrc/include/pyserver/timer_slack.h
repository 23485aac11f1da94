// Precise timed waits for the calling thread. Linux lets a sleeping thread's
// timer fire up to its "timer slack" late (50 µs by default, so that wake-ups
// coalesce); a batching delay of 100 µs would then routinely end 50 µs late.
// Threads that sleep through batching delays (the dynamic batcher's leader)
// lower their own slack to 1 µs once. Not under PYSERVER_ADAPTIVE_SPIN=0
// (the behaviour before, for A/B measurements).
#pragma once

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "pyserver/adaptive_spin.h"

namespace pyserver {

inline void UsePreciseTimers() {
#if defined(__linux__)
  thread_local bool done = false;
  if (done) return;
  done = true;
  if (AdaptiveSpin::Enabled()) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
}

}  // namespace pyserver
