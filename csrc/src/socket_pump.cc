#include "pyserver/socket_pump.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

namespace pyserver {

namespace {

constexpr size_t kReadChunk = 64 << 10;
// Bytes read but not yet drained past which a connection stops being read
// until the host catches up (the kernel's buffers then push back on the peer).
constexpr size_t kMaxUndrained = 4 << 20;
// Bytes one wake-up reads from one connection before serving the others.
constexpr size_t kReadPerTurn = 256 << 10;
// The epoll tag of a worker's own wake-up eventfd (connection ids start at 1).
constexpr uint64_t kWakeTag = 0;

void Signal(int fd) {
  uint64_t one = 1;
  // An eventfd write fails only when the counter would overflow: it is
  // signalled already then.
  ssize_t n = ::write(fd, &one, sizeof one);
  (void)n;
}

void Clear(int fd) {
  uint64_t count;
  ssize_t n = ::read(fd, &count, sizeof count);
  (void)n;
}

// An epoll instance that watches `wake_fd`; -1 (errno set) when none.
int NewEpoll(int wake_fd) {
  int fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) return -1;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (::epoll_ctl(fd, EPOLL_CTL_ADD, wake_fd, &ev) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

struct SocketPump::Connection {
  uint64_t id = 0;
  int fd = -1;
  Worker* worker = nullptr;

  std::mutex mu;  // everything below
  std::string in;             // read, not yet drained
  bool data_posted = false;   // a kData event stands for `in`
  bool stalled = false;       // not read until `in` is drained
  std::string out;            // queued, not yet sent
  size_t out_pos = 0;
  bool out_blocked = false;   // a send found the socket full: wait for EPOLLOUT
  bool scheduled = false;     // in its worker's todo list
  bool reading = true;        // the host's wish
  bool closing = false;       // close once `out` is sent
  bool aborting = false;
  bool closed = false;
  bool eof = false;
  bool drain_watch = false;
  size_t drain_low = 0;
  bool reader_full = false;     // not read until the reader's next Resume
  bool resume_pending = false;  // Resume() called, not yet applied
  bool resume_answered = false;
  uint64_t resume_consumed = 0;
  bool eof_held = false;        // EOF seen, its kEof held back by the reader
  // Worker thread only: registered with epoll, and the events armed.
  bool registered = false;
  uint32_t armed = 0;
  // Set before the connection is shared; its calls are the worker's
  // (Progress excepted, which readers make thread-safe).
  std::unique_ptr<ConnectionReader> reader;
};

struct SocketPump::Worker {
  int index = 0;
  int epoll_fd = -1;  // replaced (under mu) only by the worker's own Restart
  int wake_fd = -1;
  std::thread thread;
  std::mutex mu;  // todo, wake_pending, and epoll_fd's replacement
  bool wake_pending = false;  // wake_fd signalled, todo not yet taken
  std::vector<std::shared_ptr<Connection>> todo;  // connections with host requests
  // The worker's own references: a connection lives while it is registered.
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> live;
  // Worker thread only: the todo list being applied (kept here so that a
  // restart in the middle of it reschedules what was not applied yet).
  std::vector<std::shared_ptr<Connection>> taken;
};

Status SocketPump::Create(int threads, std::unique_ptr<SocketPump>* pump) {
  if (threads < 1) {
    return Status(StatusCode::kInvalidArg, "a socket pump needs at least one thread");
  }
  std::unique_ptr<SocketPump> p(new SocketPump());
  p->notify_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->notify_fd_ < 0) {
    return Status(StatusCode::kInternal, std::string("eventfd: ") + std::strerror(errno));
  }
  for (int i = 0; i < threads; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    w->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    w->epoll_fd = w->wake_fd < 0 ? -1 : NewEpoll(w->wake_fd);
    if (w->epoll_fd < 0 || w->wake_fd < 0) {
      int err = errno;
      if (w->wake_fd >= 0) ::close(w->wake_fd);
      return Status(StatusCode::kInternal, std::string("epoll: ") + std::strerror(err));
    }
    p->workers_.push_back(std::move(w));
  }
  for (auto& w : p->workers_) {
    Worker* raw = w.get();
    SocketPump* self = p.get();
    w->thread = std::thread([self, raw] { self->Run(raw); });
  }
  *pump = std::move(p);
  return Status::Ok();
}

SocketPump::~SocketPump() {
  stopping_.store(true);
  for (auto& w : workers_) {
    Signal(w->wake_fd);
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  for (auto& w : workers_) {
    for (auto& [id, conn] : w->live) {
      if (conn->fd >= 0) ::close(conn->fd);
    }
    // Attached but never registered: still the pump's to close.
    for (auto* list : {&w->todo, &w->taken}) {
      for (auto& conn : *list) {
        if (!conn->registered && conn->fd >= 0) ::close(conn->fd);
      }
    }
    if (w->epoll_fd >= 0) ::close(w->epoll_fd);
    ::close(w->wake_fd);
  }
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

uint64_t SocketPump::Attach(int fd, std::unique_ptr<ConnectionReader> reader) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  auto conn = std::make_shared<Connection>();
  conn->id = next_id_.fetch_add(1);
  conn->fd = fd;
  conn->reader = std::move(reader);
  conn->worker = workers_[conn->id % workers_.size()].get();
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    conns_[conn->id] = conn;
  }
  std::lock_guard<std::mutex> lock(conn->mu);
  Schedule(conn);
  return conn->id;
}

std::shared_ptr<SocketPump::Connection> SocketPump::Find(uint64_t connection) const {
  std::lock_guard<std::mutex> lock(conns_mu_);
  auto it = conns_.find(connection);
  return it == conns_.end() ? nullptr : it->second;
}

// Called with conn->mu held.
void SocketPump::Schedule(const std::shared_ptr<Connection>& conn) {
  if (conn->scheduled) return;
  conn->scheduled = true;
  Worker* w = conn->worker;
  bool wake;
  {
    // wake_pending changes only under w->mu, where the worker also takes
    // the list: a push after its take always sees false and signals.
    std::lock_guard<std::mutex> lock(w->mu);
    w->todo.push_back(conn);
    wake = !w->wake_pending;
    w->wake_pending = true;
  }
  if (wake) Signal(w->wake_fd);
}

size_t SocketPump::Write(uint64_t connection, const char* data, size_t size) {
  auto conn = Find(connection);
  if (!conn) return 0;
  std::lock_guard<std::mutex> lock(conn->mu);
  if (conn->closed || conn->closing || conn->aborting) return 0;
  conn->out.append(data, size);
  Schedule(conn);
  return conn->out.size() - conn->out_pos;
}

size_t SocketPump::Unsent(uint64_t connection) const {
  auto conn = Find(connection);
  if (!conn) return 0;
  std::lock_guard<std::mutex> lock(conn->mu);
  return conn->out.size() - conn->out_pos;
}

template <typename Change>
void SocketPump::Update(uint64_t connection, Change change) {
  auto conn = Find(connection);
  if (!conn) return;
  std::lock_guard<std::mutex> lock(conn->mu);
  if (change(conn.get())) Schedule(conn);
}

void SocketPump::WatchDrain(uint64_t connection, size_t low_water) {
  Update(connection, [low_water](Connection* c) {
    c->drain_watch = true;
    c->drain_low = low_water;
    return true;
  });
}

void SocketPump::SetReading(uint64_t connection, bool reading) {
  Update(connection, [reading](Connection* c) {
    if (c->reading == reading) return false;
    c->reading = reading;
    return true;
  });
}

void SocketPump::Resume(uint64_t connection, bool answered, uint64_t consumed) {
  Update(connection, [answered, consumed](Connection* c) {
    if (!c->reader) return false;
    c->resume_pending = true;
    c->resume_answered = c->resume_answered || answered;
    if (consumed > c->resume_consumed) c->resume_consumed = consumed;
    return true;
  });
}

bool SocketPump::Progress(uint64_t connection, ReaderProgress* out) const {
  auto conn = Find(connection);
  if (!conn || !conn->reader) return false;
  *out = conn->reader->Progress();
  return true;
}

void SocketPump::Close(uint64_t connection) {
  Update(connection, [](Connection* c) { return c->closing = true; });
}

void SocketPump::Abort(uint64_t connection) {
  Update(connection, [](Connection* c) { return c->aborting = true; });
}

void SocketPump::Post(const std::shared_ptr<Connection>& conn, PumpEvent::Kind kind, int error) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    was_empty = events_.empty();
    events_.push_back(Pending{conn, kind, error});
  }
  if (was_empty) Signal(notify_fd_);
}

size_t SocketPump::Drain(std::vector<PumpEvent>* out) {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    Clear(notify_fd_);
    pending.swap(events_);
  }
  for (Pending& p : pending) {
    PumpEvent ev;
    ev.connection = p.conn->id;
    ev.kind = p.kind;
    ev.error = p.error;
    if (p.kind == PumpEvent::Kind::kThreadRestarted) {
      ev.data = p.conn->in;  // what failed (the pump's own note, immutable)
    } else if (p.kind == PumpEvent::Kind::kData) {
      std::lock_guard<std::mutex> lock(p.conn->mu);
      ev.data.swap(p.conn->in);
      p.conn->data_posted = false;
      if (p.conn->stalled && !p.conn->closed) {
        p.conn->stalled = false;
        Schedule(p.conn);  // its worker reads it again
      }
    }
    out->push_back(std::move(ev));
  }
  return pending.size();
}

// ---- worker threads ----------------------------------------------------------

void SocketPump::BreakThreadForTesting(int thread) {
  Worker* w = workers_.at(static_cast<size_t>(thread)).get();
  {
    std::lock_guard<std::mutex> lock(w->mu);
    int not_epoll = ::eventfd(0, EFD_CLOEXEC);
    if (not_epoll >= 0) {
      ::dup2(not_epoll, w->epoll_fd);
      ::close(not_epoll);
    }
  }
  Signal(w->wake_fd);
}

// A thread whose wait fails (a descriptor closed under it by a bug elsewhere
// in the process) or that runs out of memory must not take the server down
// or strand its connections: it closes them, starts over, and says so.
void SocketPump::Run(Worker* w) {
  while (!stopping_.load()) {
    std::string what;
    int error = 0;
    try {
      error = Serve(w);
      if (error == 0) return;  // stopping
      what = std::string("epoll_wait: ") + std::strerror(error);
    } catch (const std::exception& e) {
      what = e.what();
    }
    if (stopping_.load()) return;
    Restart(w, what, error);
  }
}

void SocketPump::Restart(Worker* w, const std::string& what, int error) {
  std::vector<std::shared_ptr<Connection>> conns;
  conns.reserve(w->live.size());
  for (auto& [id, conn] : w->live) conns.push_back(conn);
  for (auto& conn : conns) CloseNow(w, conn, ECONNABORTED);
  std::vector<std::shared_ptr<Connection>> taken;
  taken.swap(w->taken);
  for (auto& conn : taken) {  // attached, not applied yet: the new epoll takes them
    std::lock_guard<std::mutex> lock(conn->mu);
    conn->scheduled = false;
    if (!conn->closed) Schedule(conn);
  }
  int fd = NewEpoll(w->wake_fd);
  while (fd < 0 && !stopping_.load()) {  // out of descriptors: try again soon
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    fd = NewEpoll(w->wake_fd);
  }
  {
    std::lock_guard<std::mutex> lock(w->mu);
    ::close(w->epoll_fd);
    w->epoll_fd = fd;
  }
  auto note = std::make_shared<Connection>();  // id 0: the pump itself
  note->in = "socket pump thread " + std::to_string(w->index) + " failed (" + what +
             ") and was restarted; its " + std::to_string(conns.size()) +
             " connection(s) were closed";
  Post(note, PumpEvent::Kind::kThreadRestarted, error);
}

int SocketPump::Serve(Worker* w) {
  epoll_event events[128];
  std::vector<std::shared_ptr<Connection>>& todo = w->taken;
  while (!stopping_.load()) {
    int n = ::epoll_wait(w->epoll_fd, events, 128, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        Clear(w->wake_fd);
        {
          std::lock_guard<std::mutex> lock(w->mu);
          todo.swap(w->todo);
          w->wake_pending = false;
        }
        for (auto& conn : todo) Apply(w, conn);
        todo.clear();
        continue;
      }
      auto it = w->live.find(tag);
      if (it == w->live.end()) continue;  // closed earlier in this batch
      std::shared_ptr<Connection> conn = it->second;
      uint32_t got = events[i].events;
      if (got & EPOLLERR) {
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &error, &len);
        CloseNow(w, conn, error ? error : EIO);
        continue;
      }
      if (got & EPOLLOUT) WriteSome(w, conn);
      if (got & EPOLLIN) {
        ReadSome(w, conn);
      } else if (got & EPOLLHUP) {
        // Shut both ways (epoll reports it even when not asked): what is
        // still to be read comes first, then the connection is over.
        ReadSome(w, conn);
        CloseNow(w, conn, 0);
      }
    }
  }
  return 0;
}

// What the host asked of a connection since it was last scheduled.
void SocketPump::Apply(Worker* w, const std::shared_ptr<Connection>& conn) {
  bool abort, resume = false, answered = false;
  uint64_t consumed = 0;
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    conn->scheduled = false;
    if (conn->closed) return;
    abort = conn->aborting;
    if (conn->resume_pending) {
      resume = true;
      answered = conn->resume_answered;
      consumed = conn->resume_consumed;
      conn->resume_pending = false;
      conn->resume_answered = false;
    }
  }
  if (!conn->registered) {
    epoll_event ev{};
    ev.events = 0;
    ev.data.u64 = conn->id;
    if (::epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, conn->fd, &ev) != 0) {
      CloseNow(w, conn, errno);
      return;
    }
    conn->registered = true;
    w->live[conn->id] = conn;
  }
  if (abort) {
    CloseNow(w, conn, 0);
    return;
  }
  if (resume) ResumeReader(w, conn, answered, consumed);
  WriteSome(w, conn);
}

// Worker thread: the reader's Resume, then what it passes on, its held EOF
// and reading again.
void SocketPump::ResumeReader(Worker* w, const std::shared_ptr<Connection>& conn, bool answered,
                              uint64_t consumed) {
  std::string host;
  conn->reader->Resume(conn->id, answered, consumed, &host);
  bool post_eof = false;
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    if (conn->eof_held && !conn->reader->HoldEof(&host)) {
      conn->eof_held = false;
      post_eof = true;
    }
    conn->reader_full = false;
    if (conn->registered) Arm(w, conn.get());
  }
  PassOn(conn, host);
  if (post_eof) Post(conn, PumpEvent::Kind::kEof, 0);
}

// Worker thread: bytes for the host, as a kData event.
void SocketPump::PassOn(const std::shared_ptr<Connection>& conn, const std::string& bytes) {
  if (bytes.empty()) return;
  bool post;
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    if (conn->closed) return;
    conn->in.append(bytes);
    post = !conn->data_posted;
    conn->data_posted = true;
  }
  if (post) Post(conn, PumpEvent::Kind::kData, 0);
}

// Arms EPOLLIN while the connection is to be read and EPOLLOUT while bytes
// wait for room in the socket: only once a send found it full, since every
// queued write is first tried at once (Apply), and arming EPOLLOUT around a
// send that then succeeds would cost two epoll_ctl calls per answer.
// Called with conn->mu held.
void SocketPump::Arm(Worker* w, Connection* conn) {
  uint32_t want = 0;
  if (conn->reading && !conn->stalled && !conn->eof && !conn->reader_full) want |= EPOLLIN;
  if (conn->out_blocked && conn->out_pos < conn->out.size()) want |= EPOLLOUT;
  if (want == conn->armed) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = conn->id;
  ::epoll_ctl(w->epoll_fd, EPOLL_CTL_MOD, conn->fd, &ev);
  conn->armed = want;
  interest_changes_.fetch_add(1, std::memory_order_relaxed);
}

void SocketPump::WriteSome(Worker* w, const std::shared_ptr<Connection>& conn) {
  int error = 0;
  bool close_now = false, drained = false;
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    if (conn->closed) return;
    while (conn->out_pos < conn->out.size()) {
      ssize_t n = ::send(conn->fd, conn->out.data() + conn->out_pos,
                         conn->out.size() - conn->out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        conn->out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        conn->out_blocked = true;
        break;
      }
      error = n < 0 ? errno : EPIPE;
      break;
    }
    if (conn->out_pos == conn->out.size()) {
      conn->out.clear();
      conn->out_pos = 0;
      conn->out_blocked = false;
    } else if (conn->out_pos > (1 << 20) && conn->out_pos * 2 > conn->out.size()) {
      conn->out.erase(0, conn->out_pos);  // keep the buffer from growing without end
      conn->out_pos = 0;
    }
    if (conn->drain_watch && conn->out.size() - conn->out_pos <= conn->drain_low) {
      conn->drain_watch = false;
      drained = true;
    }
    if (error == 0) {
      close_now = conn->closing && conn->out.empty();
      if (!close_now) Arm(w, conn.get());
    }
  }
  if (drained) Post(conn, PumpEvent::Kind::kDrained, 0);
  if (error != 0) {
    CloseNow(w, conn, error);
  } else if (close_now) {
    CloseNow(w, conn, 0);
  }
}

void SocketPump::ReadSome(Worker* w, const std::shared_ptr<Connection>& conn) {
  char buf[kReadChunk];
  size_t total = 0;
  while (total < kReadPerTurn) {
    ssize_t n = ::read(conn->fd, buf, sizeof buf);
    if (n > 0) {
      total += static_cast<size_t>(n);
      const char* pass = buf;
      size_t pass_size = static_cast<size_t>(n);
      bool more = true;
      std::string host;
      if (conn->reader) {
        more = conn->reader->Read(conn->id, buf, pass_size, &host);
        pass = host.data();
        pass_size = host.size();
      }
      bool post = false;
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        if (conn->closed) return;
        if (pass_size > 0) {
          conn->in.append(pass, pass_size);
          post = !conn->data_posted;
          conn->data_posted = true;
        }
        if (conn->in.size() > kMaxUndrained) conn->stalled = true;
        if (!more) conn->reader_full = true;
        if (conn->stalled || !more) Arm(w, conn.get());
      }
      if (post) Post(conn, PumpEvent::Kind::kData, 0);
      if (!more) break;
      if (static_cast<size_t>(n) < sizeof buf) break;  // the socket is empty now
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        if (conn->stalled || !conn->reading) break;
      }
      continue;
    }
    if (n == 0) {
      bool hold = false;
      if (conn->reader) {
        std::string host;
        hold = conn->reader->HoldEof(&host);
        PassOn(conn, host);
      }
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        conn->eof = true;
        conn->eof_held = hold;
        Arm(w, conn.get());
      }
      if (!hold) Post(conn, PumpEvent::Kind::kEof, 0);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    CloseNow(w, conn, errno);
    return;
  }
}

void SocketPump::CloseNow(Worker* w, const std::shared_ptr<Connection>& conn, int error) {
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    if (conn->closed) return;
    conn->closed = true;
    conn->out.clear();
    conn->out_pos = 0;
  }
  if (conn->registered) {
    ::epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, conn->fd, nullptr);
    conn->registered = false;
  }
  ::close(conn->fd);
  conn->fd = -1;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    conns_.erase(conn->id);
  }
  Post(conn, PumpEvent::Kind::kClosed, error);
  w->live.erase(conn->id);  // last: `conn` may be this map's reference
}

}  // namespace pyserver
