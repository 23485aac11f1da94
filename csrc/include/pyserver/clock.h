// The one clock every timestamp in the engine (and the Python side, through
// pyserver.engine.clock) is taken from.
#pragma once

#include <chrono>
#include <cstdint>

namespace pyserver {

inline uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace pyserver
