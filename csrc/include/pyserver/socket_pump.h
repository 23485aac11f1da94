// SocketPump: the system calls of many TCP connections, on threads of its own.
//
// A host (the event loop) hands the pump connected sockets. Each goes to one
// of the pump's threads, which waits on it with epoll, reads what arrives,
// and writes what the host queued, so that the host's thread makes no read,
// write or poll call per request: it drains the pump's events (one eventfd
// wake-up for many connections) and queues answers (one wake-up of a pump
// thread that sleeps, none of one that is busy). Protocols stay the host's:
// the pump moves bytes and reports end of stream, errors, close and drained
// write buffers. Every host method is thread-safe and never blocks on I/O.
//
// A connection may be attached with a ConnectionReader: the pump thread then
// shows it each read first, and the host sees only what the reader passes on
// (a protocol handled on the pump's threads, with the host as its fallback).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pyserver/status.h"

namespace pyserver {

struct PumpEvent {
  enum class Kind : uint8_t {
    kData = 0,     // `data`: the bytes read since the last drain
    kEof = 1,      // the peer shut its side down (no more data comes)
    kDrained = 2,  // unsent bytes fell to the WatchDrain() mark
    kClosed = 3,   // the socket is closed; `error` is its errno, or 0
    // A pump thread failed and was restarted (connection 0): `data` says
    // what failed, `error` is its errno (0 for an exception). Its connections
    // were closed (one kClosed each, error ECONNABORTED), as the state of
    // their reads and writes went with the thread's epoll instance.
    kThreadRestarted = 4,
  };
  uint64_t connection = 0;
  Kind kind = Kind::kData;
  std::string data;
  int error = 0;
};

// What a connection's reader says of the bytes it holds, for the host's read
// timeouts (steady-clock ns, pyserver/clock.h).
struct ReaderProgress {
  enum State : int { kIdle = 0, kHead = 1, kBody = 2, kAnswering = 3 };
  int state = kIdle;     // kAnswering: a request it took is being answered
  uint64_t since_ns = 0;  // when the request now held began to arrive
  uint64_t last_read_ns = 0;
};

// A connection's first reader. Its pump thread alone calls Read, Resume and
// HoldEof, one at a time; Progress is called from the host's thread.
class ConnectionReader {
 public:
  virtual ~ConnectionReader() = default;
  // `data` was read from `connection`: appends to *host the bytes the host
  // is to get (a kData event). False: hold reading until the next Resume
  // (the reader's buffer is at its bound).
  virtual bool Read(uint64_t connection, const char* data, size_t size, std::string* host) = 0;
  // After SocketPump::Resume(connection, answered, consumed) (see there).
  virtual void Resume(uint64_t connection, bool answered, uint64_t consumed,
                      std::string* host) = 0;
  // The peer sent EOF. Appends to *host what the host must still get; true
  // holds the kEof event back until a Resume after which this says false.
  virtual bool HoldEof(std::string* host) = 0;
  virtual ReaderProgress Progress() const = 0;
};

class SocketPump {
 public:
  // A pump with `threads` (>= 1) I/O threads.
  static Status Create(int threads, std::unique_ptr<SocketPump>* pump);
  ~SocketPump();  // stops the threads and closes every socket still open
  SocketPump(const SocketPump&) = delete;
  SocketPump& operator=(const SocketPump&) = delete;

  // Readable (an eventfd) while events wait for Drain().
  int notify_fd() const { return notify_fd_; }
  int threads() const { return static_cast<int>(workers_.size()); }

  // Takes a connected socket (the pump makes it non-blocking and closes it
  // in the end); returns the connection's id (never 0). With `reader`, its
  // bytes go through it (ConnectionReader).
  uint64_t Attach(int fd, std::unique_ptr<ConnectionReader> reader = nullptr);

  // Hands a connection back to its reader, on the reader's pump thread:
  // `answered`, a request the reader took was answered; `consumed`, the
  // bytes the host has processed of all it was given (the reader resumes
  // only at the boundary it knows). No-op without a reader.
  void Resume(uint64_t connection, bool answered, uint64_t consumed);

  // The connection's reader's Progress(); false when it has none (or is gone).
  bool Progress(uint64_t connection, ReaderProgress* out) const;

  // Queues bytes to send, after those already queued. Returns the bytes not
  // yet sent, these included; 0 when the connection is closing or gone (the
  // bytes are dropped, as a closed transport drops them).
  size_t Write(uint64_t connection, const char* data, size_t size);
  size_t Unsent(uint64_t connection) const;

  // One kDrained event once at most `low_water` bytes are left unsent.
  void WatchDrain(uint64_t connection, size_t low_water);

  // Stops (false) or resumes reading from the connection.
  void SetReading(uint64_t connection, bool reading);

  // Closes once what is queued has been sent; Abort() closes at once. Both
  // end in one kClosed event.
  void Close(uint64_t connection);
  void Abort(uint64_t connection);

  // Makes thread `thread`'s epoll descriptor something that is not an epoll
  // instance, as a stray close() elsewhere in the process would, and wakes
  // the thread: its next wait fails. Tests call it to see a thread recover.
  void BreakThreadForTesting(int thread);

  // How often a connection's armed epoll events changed (an epoll_ctl
  // each), over all threads: a cost per answer the pump keeps at none for a
  // request answered at once. Tests and benchmarks read it.
  uint64_t interest_changes() const { return interest_changes_.load(std::memory_order_relaxed); }

  // Moves every waiting event into *out (appending), in the order each
  // connection's happened, and re-arms notify_fd(). Returns the number moved.
  size_t Drain(std::vector<PumpEvent>* out);

 private:
  struct Connection;
  struct Worker;
  SocketPump() = default;

  std::shared_ptr<Connection> Find(uint64_t connection) const;
  // Applies `change` to the connection under its lock, and schedules it on
  // its worker when `change` returns true.
  template <typename Change>
  void Update(uint64_t connection, Change change);
  void Schedule(const std::shared_ptr<Connection>& conn);
  void Post(const std::shared_ptr<Connection>& conn, PumpEvent::Kind kind, int error);
  void Run(Worker* worker);
  // Waits and serves until stopped (returns 0) or epoll_wait fails (returns
  // its errno); may throw (std::bad_alloc).
  int Serve(Worker* worker);
  // After Serve failed: closes the worker's connections, gives it a new
  // epoll instance and tells the host (kThreadRestarted).
  void Restart(Worker* worker, const std::string& what, int error);
  void Apply(Worker* worker, const std::shared_ptr<Connection>& conn);
  void ReadSome(Worker* worker, const std::shared_ptr<Connection>& conn);
  void ResumeReader(Worker* worker, const std::shared_ptr<Connection>& conn, bool answered,
                    uint64_t consumed);
  void PassOn(const std::shared_ptr<Connection>& conn, const std::string& bytes);
  void WriteSome(Worker* worker, const std::shared_ptr<Connection>& conn);
  void Arm(Worker* worker, Connection* conn);
  void CloseNow(Worker* worker, const std::shared_ptr<Connection>& conn, int error);

  int notify_fd_ = -1;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> interest_changes_{0};

  mutable std::mutex conns_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> conns_;

  // Events for the host: (connection, kind, error); kData's bytes are taken
  // from the connection at Drain() time, so a connection read many times
  // between two drains holds one kData event.
  struct Pending {
    std::shared_ptr<Connection> conn;
    PumpEvent::Kind kind;
    int error;
  };
  std::mutex events_mu_;
  std::vector<Pending> events_;
};

}  // namespace pyserver
