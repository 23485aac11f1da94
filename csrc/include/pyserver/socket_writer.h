// SocketWriter: sends responses to client sockets from its own thread.
//
// A send on a socket costs its caller more than the copy: on loopback the
// kernel runs the receiver's TCP input in the sender's context and wakes the
// receiving process (in a VM, ~20-30 µs per send). The event loop's thread is
// the server's bottleneck, so it queues what it answers in one loop iteration
// and wakes this thread once; this thread makes the sends. The first send of
// an iteration (Send) is made by the caller itself when nothing is queued for
// that socket, so that a lone response (low load) waits for no thread hop.
//
// Each socket is registered with Open(fd): the writer keeps a dup() of the
// descriptor (the event loop keeps its own and goes on reading), so it never
// writes to a descriptor number that was closed and reused. Bytes go out in
// the order they were queued. A socket the peer does not drain is watched with
// epoll until it takes more. Close(id) closes the dup once everything queued
// is out (then the peer sees the end of the stream, after its last byte);
// Abort(id) drops what is queued.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pyserver/completion_queue.h"  // Token
#include "pyserver/status.h"

namespace pyserver {

// Bytes to send: owned (a string the writer keeps) or borrowed (a buffer the
// caller keeps alive until its token comes back from TakeReleased).
struct OutChunk {
  std::string owned;
  const char* borrowed = nullptr;
  size_t size = 0;      // bytes in the chunk
  size_t sent = 0;      // bytes of it already sent
  Token release = 0;    // non-zero for a borrowed buffer

  static OutChunk Own(std::string bytes);
  static OutChunk Borrow(const char* data, size_t size, Token release);
  const char* data() const { return borrowed != nullptr ? borrowed : owned.data(); }
};

class SocketWriter {
 public:
  static Status Create(std::unique_ptr<SocketWriter>* writer);
  ~SocketWriter();
  SocketWriter(const SocketWriter&) = delete;
  SocketWriter& operator=(const SocketWriter&) = delete;

  // Registers a connected, non-blocking socket; *id names it from now on.
  Status Open(int fd, uint64_t* id);

  // Queues chunks for the socket, after what is queued already; the writer
  // thread sends them after the next Flush.
  void Queue(uint64_t id, std::vector<OutChunk>* chunks);

  // Sends the chunks now, on this thread, when nothing is queued or being
  // sent for the socket; what the socket does not take is queued (and the
  // writer woken for it). Otherwise the same as Queue. Returns true when
  // everything went out here.
  bool Send(uint64_t id, std::vector<OutChunk>* chunks);

  // Wakes the writer thread for what was queued since the last Flush.
  void Flush();

  // Closes the socket once everything queued for it is sent (or fails).
  void Close(uint64_t id);
  // Drops what is queued and closes the socket now.
  void Abort(uint64_t id);

  // Bytes queued and not yet sent (0 once closed or failed).
  size_t Queued(uint64_t id) const;
  // True once a send failed (the peer went away); later chunks are dropped.
  bool Failed(uint64_t id) const;
  // Sockets registered and not yet closed.
  size_t open_count() const;

  // Stops the thread and closes every socket still registered, dropping
  // their queues (their borrowed buffers' tokens wait in TakeReleased).
  // Idempotent; the destructor calls it.
  void Stop();

  // Moves the tokens of borrowed buffers the writer is done with into *out;
  // cheap to call when there are none.
  void TakeReleased(std::vector<Token>* out);
  bool HasReleased() const { return released_count_.load(std::memory_order_acquire) != 0; }

  // Sends made by the writer thread and by callers of Send (for tests).
  uint64_t thread_sends() const { return thread_sends_.load(); }
  uint64_t caller_sends() const { return caller_sends_.load(); }

 private:
  struct Output {
    int fd = -1;
    std::deque<OutChunk> queue;
    size_t queued = 0;          // unsent bytes in queue
    bool sending = false;       // a thread is in sendmsg with pointers into queue
    bool closing = false;       // close once queue is empty
    bool aborted = false;       // Abort came while a send was in progress
    bool failed = false;        // a send failed: fd closed, chunks dropped
    bool watched = false;       // registered with epoll
    bool armed = false;         // waiting in epoll for EPOLLOUT
    bool ready = false;         // on ready_ (the writer thread will drain it)
  };

  SocketWriter(int wake_fd, int epoll_fd);
  void Run();
  // Sends what is queued for id until it is empty or the socket is full.
  void Drain(uint64_t id);
  // Drops sent bytes from the queue's head (mu_ held).
  void Consume(Output* out, size_t n);
  // Closes and forgets the output (mu_ held, no one sending).
  void Finish(uint64_t id, Output* out);
  void Fail(Output* out);                    // mu_ held, no one sending
  void Watch(uint64_t id, Output* out);      // mu_ held
  void MarkReady(uint64_t id, Output* out);  // mu_ held
  void Release(const OutChunk& chunk);       // mu_ held
  void Wake();

  const int wake_fd_;
  const int epoll_fd_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Output> outputs_;
  std::vector<uint64_t> ready_;  // outputs with something for the writer
  bool wake_pending_ = false;    // ready_ gained entries since the last Flush
  std::vector<Token> released_;
  std::atomic<size_t> released_count_{0};
  uint64_t next_id_ = 1;
  std::atomic<bool> stop_{false};
  bool stopped_ = false;
  std::atomic<uint64_t> thread_sends_{0};
  std::atomic<uint64_t> caller_sends_{0};
  std::thread thread_;
};

}  // namespace pyserver
