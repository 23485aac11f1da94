#include "pyserver/socket_writer.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace pyserver {

namespace {

constexpr int kMaxIov = 64;
constexpr uint64_t kWakeId = 0;  // the eventfd's epoll tag; socket ids start at 1

// Builds the iovec for up to kMaxIov chunks starting at `first`.
template <typename It>
int FillIov(It first, It last, iovec* iov, size_t* total) {
  int n = 0;
  *total = 0;
  for (It c = first; c != last && n < kMaxIov; ++c, ++n) {
    iov[n].iov_base = const_cast<char*>(c->data() + c->sent);
    iov[n].iov_len = c->size - c->sent;
    *total += iov[n].iov_len;
  }
  return n;
}

// One non-blocking send; MSG_NOSIGNAL so that a peer that went away gives
// EPIPE rather than a SIGPIPE to a process that may not ignore it.
ssize_t SendIov(int fd, iovec* iov, int n) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n);
  for (;;) {
    ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) return r;
    if (errno != EINTR) return -errno;
  }
}

bool WouldBlock(ssize_t r) { return r == -EAGAIN || r == -EWOULDBLOCK; }

}  // namespace

OutChunk OutChunk::Own(std::string bytes) {
  OutChunk c;
  c.size = bytes.size();
  c.owned = std::move(bytes);
  return c;
}

OutChunk OutChunk::Borrow(const char* data, size_t size, Token release) {
  OutChunk c;
  c.borrowed = data;
  c.size = size;
  c.release = release;
  return c;
}

Status SocketWriter::Create(std::unique_ptr<SocketWriter>* writer) {
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    return Status(StatusCode::kInternal, std::string("eventfd failed: ") + std::strerror(errno));
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    int err = errno;
    close(wake);
    return Status(StatusCode::kInternal, std::string("epoll_create1 failed: ") + std::strerror(err));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeId;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev) != 0) {
    int err = errno;
    close(wake);
    close(ep);
    return Status(StatusCode::kInternal, std::string("epoll_ctl failed: ") + std::strerror(err));
  }
  writer->reset(new SocketWriter(wake, ep));
  return Status::Ok();
}

SocketWriter::SocketWriter(int wake_fd, int epoll_fd)
    : wake_fd_(wake_fd), epoll_fd_(epoll_fd), thread_([this] { Run(); }) {}

SocketWriter::~SocketWriter() {
  Stop();
  close(epoll_fd_);
  close(wake_fd_);
}

void SocketWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  // The thread is gone, so nothing is sending: close what is left.
  while (!outputs_.empty()) {
    auto it = outputs_.begin();
    Finish(it->first, &it->second);
  }
  ready_.clear();
}

void SocketWriter::Wake() {
  uint64_t one = 1;
  // A full counter (impossible in practice) only means a wake-up is pending.
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

Status SocketWriter::Open(int fd, uint64_t* id) {
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    return Status(StatusCode::kInternal, std::string("dup failed: ") + std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) {
    close(own);
    return Status(StatusCode::kUnavailable, "the socket writer is stopped");
  }
  *id = next_id_++;
  outputs_[*id].fd = own;
  return Status::Ok();
}

void SocketWriter::Release(const OutChunk& chunk) {
  if (chunk.release != 0) {
    released_.push_back(chunk.release);
    released_count_.store(released_.size(), std::memory_order_release);
  }
}

void SocketWriter::TakeReleased(std::vector<Token>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  out->insert(out->end(), released_.begin(), released_.end());
  released_.clear();
  released_count_.store(0, std::memory_order_release);
}

void SocketWriter::MarkReady(uint64_t id, Output* out) {
  if (out->ready) return;
  out->ready = true;
  ready_.push_back(id);
  wake_pending_ = true;
}

void SocketWriter::Watch(uint64_t id, Output* out) {
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLONESHOT;
  ev.data.u64 = id;
  int rc = epoll_ctl(epoll_fd_, out->watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, out->fd, &ev);
  if (rc != 0) {  // cannot wait for room: treat it as a failed socket
    Fail(out);
    return;
  }
  out->watched = true;
  out->armed = true;
}

void SocketWriter::Fail(Output* out) {
  out->failed = true;
  for (const OutChunk& c : out->queue) Release(c);
  out->queue.clear();
  out->queued = 0;
  if (out->fd >= 0) {
    if (out->watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, out->fd, nullptr);
    close(out->fd);
    out->fd = -1;
  }
  out->watched = out->armed = false;
}

void SocketWriter::Finish(uint64_t id, Output* out) {
  Fail(out);
  outputs_.erase(id);  // ready_ may still name it: lookups skip missing ids
}

void SocketWriter::Consume(Output* out, size_t n) {
  out->queued -= n;
  while (n > 0) {
    OutChunk& head = out->queue.front();
    size_t left = head.size - head.sent;
    if (n < left) {
      head.sent += n;
      return;
    }
    n -= left;
    Release(head);
    out->queue.pop_front();
  }
  // drop empty chunks left at the head
  while (!out->queue.empty() && out->queue.front().sent == out->queue.front().size) {
    Release(out->queue.front());
    out->queue.pop_front();
  }
}

void SocketWriter::Queue(uint64_t id, std::vector<OutChunk>* chunks) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outputs_.find(id);
  if (it == outputs_.end() || it->second.failed || it->second.closing) {
    for (const OutChunk& c : *chunks) Release(c);
    chunks->clear();
    return;
  }
  Output* out = &it->second;
  for (OutChunk& c : *chunks) {
    out->queued += c.size;
    out->queue.push_back(std::move(c));
  }
  chunks->clear();
  if (!out->sending && !out->armed) MarkReady(id, out);
}

bool SocketWriter::Send(uint64_t id, std::vector<OutChunk>* chunks) {
  iovec iov[kMaxIov];
  size_t want = 0;
  int fd;
  int n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outputs_.find(id);
    if (it == outputs_.end()) {
      for (const OutChunk& c : *chunks) Release(c);
      chunks->clear();
      return false;
    }
    Output* out = &it->second;
    if (out->failed || out->closing) {
      for (const OutChunk& c : *chunks) Release(c);
      chunks->clear();
      return false;
    }
    if (out->sending || !out->queue.empty() || chunks->size() > static_cast<size_t>(kMaxIov)) {
      for (OutChunk& c : *chunks) {
        out->queued += c.size;
        out->queue.push_back(std::move(c));
      }
      chunks->clear();
      if (!out->sending && !out->armed) MarkReady(id, out);
      return false;
    }
    out->sending = true;
    fd = out->fd;
    n = FillIov(chunks->begin(), chunks->end(), iov, &want);
  }
  ssize_t r = want > 0 ? SendIov(fd, iov, n) : 0;
  caller_sends_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  Output* out = &outputs_.at(id);  // only this thread erases ids
  out->sending = false;
  if (r < 0 && !WouldBlock(r)) {
    for (const OutChunk& c : *chunks) Release(c);
    chunks->clear();
    Fail(out);
    return false;
  }
  size_t sent = r > 0 ? static_cast<size_t>(r) : 0;
  bool all = sent == want;
  for (OutChunk& c : *chunks) {
    size_t left = c.size - c.sent;
    if (sent >= left) {
      sent -= left;
      Release(c);
      continue;
    }
    c.sent += sent;
    sent = 0;
    out->queued += c.size - c.sent;
    out->queue.push_back(std::move(c));
  }
  chunks->clear();
  if (!all) {
    Watch(id, out);  // the socket is full: send the rest when it has room
  } else if (!out->queue.empty() && !out->armed) {
    MarkReady(id, out);  // queued by another thread meanwhile
  }
  return all;
}

void SocketWriter::Flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!wake_pending_) return;
    wake_pending_ = false;
  }
  Wake();
}

void SocketWriter::Close(uint64_t id) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outputs_.find(id);
    if (it == outputs_.end()) return;
    Output* out = &it->second;
    if (out->failed || (!out->sending && out->queue.empty())) {
      Finish(id, out);
      return;
    }
    out->closing = true;
    if (!out->sending && !out->armed && !out->ready) {
      MarkReady(id, out);
      wake_pending_ = false;
      wake = true;
    }
  }
  if (wake) Wake();
}

void SocketWriter::Abort(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outputs_.find(id);
  if (it == outputs_.end()) return;
  if (it->second.sending) {
    it->second.aborted = true;  // the sender finishes it
    return;
  }
  Finish(id, &it->second);
}

size_t SocketWriter::Queued(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outputs_.find(id);
  return it == outputs_.end() ? 0 : it->second.queued;
}

bool SocketWriter::Failed(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outputs_.find(id);
  return it != outputs_.end() && it->second.failed;
}

size_t SocketWriter::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outputs_.size();
}

void SocketWriter::Drain(uint64_t id) {
  iovec iov[kMaxIov];
  for (;;) {
    size_t want = 0;
    int n;
    int fd;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = outputs_.find(id);
      if (it == outputs_.end()) return;
      Output* out = &it->second;
      if (out->sending || out->armed || out->failed) return;
      if (out->queue.empty()) {
        if (out->closing) Finish(id, out);
        return;
      }
      // Chunks stay where they are in the deque while this thread sends
      // from them: push_back by other threads does not move elements, and
      // nothing else pops while `sending` is set.
      n = FillIov(out->queue.begin(), out->queue.end(), iov, &want);
      out->sending = true;
      fd = out->fd;
    }
    ssize_t r = SendIov(fd, iov, n);
    thread_sends_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    Output* out = &outputs_.at(id);
    out->sending = false;
    if (out->aborted) {
      Finish(id, out);
      return;
    }
    if (r < 0) {
      if (WouldBlock(r)) {
        Watch(id, out);
      } else {
        Fail(out);
        if (out->closing) outputs_.erase(id);
      }
      return;
    }
    Consume(out, static_cast<size_t>(r));
    if (static_cast<size_t>(r) < want) {
      Watch(id, out);  // the socket is full
      return;
    }
  }
}

void SocketWriter::Run() {
  epoll_event events[64];
  std::vector<uint64_t> ready;
  while (!stop_.load()) {
    int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < n; ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kWakeId) {
          uint64_t count;
          ssize_t got = read(wake_fd_, &count, sizeof(count));
          (void)got;
          continue;
        }
        auto it = outputs_.find(id);
        if (it == outputs_.end()) continue;
        it->second.armed = false;
        MarkReady(id, &it->second);
      }
      ready.swap(ready_);
      wake_pending_ = false;
      for (uint64_t id : ready) {
        auto it = outputs_.find(id);
        if (it != outputs_.end()) it->second.ready = false;
      }
    }
    for (uint64_t id : ready) Drain(id);
    ready.clear();
  }
}

}  // namespace pyserver
