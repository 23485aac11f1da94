// CompletionQueue: finished work handed from engine threads to the event loop.
//
// Producers (scheduler and instance threads) push completions; the event loop
// watches fd() and drains everything at once. The fd is signalled only when
// the queue goes from empty to non-empty, so a loop that is busy draining is
// not woken again per item: one wake-up per batch at most, fewer under load.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pyserver/adaptive_spin.h"
#include "pyserver/status.h"

namespace pyserver {

// An opaque handle owned by the binding layer (for Python: a PyObject* whose
// reference travels with the token). The engine never looks inside it.
using Token = uint64_t;

struct Completion {
  Token token = 0;
  StatusCode code = StatusCode::kOk;
  std::string message;
};

class CompletionQueue {
 public:
  static Status Create(std::unique_ptr<CompletionQueue>* queue);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Readable when completions are waiting (an eventfd).
  int fd() const { return fd_; }

  void Push(Completion completion);
  void PushMany(std::vector<Completion>* completions);

  // Push, except that a push onto an empty queue leaves the fd unsignalled
  // and marks the signal as held. An instance thread does this when it has
  // its next batch in hand and still needs the GIL to start it: woken now,
  // the event loop would take the GIL first and the instance would wait for
  // it. Other pushes meanwhile do not signal either (the queue is not empty),
  // so the holder must call ReleaseHeldSignal() soon, and on every path.
  void PushHoldingSignal(Completion completion);

  // Signals the fd if a held signal is still owed (Drain clears it: a loop
  // that drained on its own needs no wake-up). Cheap when none is held.
  void ReleaseHeldSignal();

  // Moves every waiting completion into *out (appending) and re-arms the fd.
  // Never blocks. Returns the number moved.
  size_t Drain(std::vector<Completion>* out);

  // Blocks up to timeout_ns for at least one completion (for tests and for
  // embedders without an event loop). Returns true if one is waiting.
  bool WaitReadable(uint64_t timeout_ns) const;

  // Spins (no syscalls, no sleeping) up to spin_ns for a completion; for a
  // caller that expects one within microseconds. Returns true if one waits.
  bool SpinWaitNonEmpty(uint64_t spin_ns) const;

  // Spins up to spin_ns until some thread is inside SpinWaitNonEmpty. An
  // instance that is about to take the GIL calls this at low load: the event
  // loop releases the GIL when it starts spinning, and taking a free GIL
  // costs nothing while waiting on a held one puts the thread to sleep
  // (a ~40 µs wake-up). Returns true if a waiter is spinning. It spins only
  // while such spins have met a waiter lately (adaptive_spin.h): where the
  // loop does not spin for this queue's completions (a model whose work is
  // in another process) it stops after a few misses.
  bool SpinUntilWaiter(uint64_t spin_ns) const;

  // Number of times the fd was signalled (lets tests check wake-up coalescing).
  uint64_t signal_count() const;

 private:
  explicit CompletionQueue(int fd) : fd_(fd) {}
  void Signal();

  const int fd_;
  mutable std::mutex mu_;
  std::vector<Completion> items_;
  std::atomic<size_t> size_{0};  // items_.size(), readable without mu_
  std::atomic<bool> signal_held_{false};  // see PushHoldingSignal
  mutable std::atomic<int> spinning_waiters_{0};
  mutable AdaptiveSpin waiter_spin_{0};  // SpinUntilWaiter's: on or off only
  uint64_t signals_ = 0;
};

}  // namespace pyserver
