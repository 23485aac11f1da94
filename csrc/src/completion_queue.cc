#include "pyserver/completion_queue.h"

#include "pyserver/clock.h"
#include "pyserver/spin.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pyserver {

Status CompletionQueue::Create(std::unique_ptr<CompletionQueue>* queue) {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    return Status(StatusCode::kInternal,
                  std::string("eventfd failed: ") + std::strerror(errno));
  }
  queue->reset(new CompletionQueue(fd));
  return Status::Ok();
}

CompletionQueue::~CompletionQueue() { close(fd_); }

void CompletionQueue::Signal() {
  uint64_t one = 1;
  // A full eventfd counter (impossible in practice) or EINTR only delays the
  // wake-up; the next push signals again.
  ssize_t n = write(fd_, &one, sizeof(one));
  (void)n;
}

void CompletionQueue::Push(Completion completion) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_empty = items_.empty();
    items_.push_back(std::move(completion));
    size_.store(items_.size(), std::memory_order_release);
    if (was_empty) ++signals_;
  }
  if (was_empty) Signal();
}

void CompletionQueue::PushHoldingSignal(Completion completion) {
  std::lock_guard<std::mutex> lock(mu_);
  if (items_.empty()) signal_held_.store(true, std::memory_order_relaxed);
  items_.push_back(std::move(completion));
  size_.store(items_.size(), std::memory_order_release);
}

void CompletionQueue::ReleaseHeldSignal() {
  if (!signal_held_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Drain may have cleared it since: the loop took the items itself.
    if (!signal_held_.exchange(false, std::memory_order_relaxed)) return;
    ++signals_;
  }
  Signal();
}

void CompletionQueue::PushMany(std::vector<Completion>* completions) {
  if (completions->empty()) return;
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_empty = items_.empty();
    for (auto& c : *completions) items_.push_back(std::move(c));
    size_.store(items_.size(), std::memory_order_release);
    if (was_empty) ++signals_;
  }
  completions->clear();
  if (was_empty) Signal();
}

size_t CompletionQueue::Drain(std::vector<Completion>* out) {
  std::vector<Completion> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    taken.swap(items_);
    size_.store(0, std::memory_order_release);
    signal_held_.store(false, std::memory_order_relaxed);
    // Reset the counter under the lock: a producer that pushes after this
    // sees an empty queue and signals again, so no completion is stranded.
    uint64_t value;
    ssize_t n = read(fd_, &value, sizeof(value));
    (void)n;
  }
  size_t count = taken.size();
  if (out->empty()) {
    out->swap(taken);
  } else {
    for (auto& c : taken) out->push_back(std::move(c));
  }
  return count;
}

bool CompletionQueue::WaitReadable(uint64_t timeout_ns) const {
  struct pollfd pfd;
  pfd.fd = fd_;
  pfd.events = POLLIN;
  pfd.revents = 0;
  int timeout_ms = static_cast<int>((timeout_ns + 999999) / 1000000);
  int rc = poll(&pfd, 1, timeout_ms);
  return rc > 0 && (pfd.revents & POLLIN);
}

bool CompletionQueue::SpinWaitNonEmpty(uint64_t spin_ns) const {
  spinning_waiters_.fetch_add(1, std::memory_order_acq_rel);
  bool ready = SpinUntil(NowNs() + spin_ns,
                         [this] { return size_.load(std::memory_order_acquire) != 0; });
  spinning_waiters_.fetch_sub(1, std::memory_order_acq_rel);
  return ready;
}

bool CompletionQueue::SpinUntilWaiter(uint64_t spin_ns) const {
  auto waiting = [this] { return spinning_waiters_.load(std::memory_order_acquire) > 0; };
  if (!waiter_spin_.ShouldSpin()) return waiting();
  const bool met = SpinUntil(NowNs() + spin_ns, waiting);
  waiter_spin_.Record(met);
  return met;
}

uint64_t CompletionQueue::signal_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signals_;
}

}  // namespace pyserver
