// InferLane: HTTP/1.1 infer requests read on the socket pump's threads.
//
// Each connection the HTTP frontend hands the pump gets a reader from the
// lane (NewReader). On the connection's pump thread the reader parses the
// requests with llhttp and takes the common one: a keep-alive HTTP/1.1 POST
// with a Content-Length body to a target the host has already routed to its
// infer route (AddRoute), with no Expect, Content-Encoding or
// Transfer-Encoding. It queues that request whole (Drain) and holds the
// connection's later bytes until the host has answered it and said so
// (SocketPump::Resume, answered). Anything else, from the first byte of the
// request on, goes to the host as if there were no reader, and the
// connection stays the host's until it has processed all it was given and
// says so (SocketPump::Resume, consumed): the host's own parser then decides
// every rule, limit and error, so the lane has no error text of its own.
// One request at a time per connection keeps pipelined answers in order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pyserver/socket_pump.h"
#include "pyserver/status.h"

namespace pyserver::http1 {

// An infer request a lane reader took, for the host to run and answer.
struct LaneRequest {
  uint64_t connection = 0;
  uint32_t route = 0;  // the host's id of its target (AddRoute)
  std::string target;  // as sent
  std::string body;
  bool has_header_length = false;  // Inference-Header-Content-Length, as sent
  std::string header_length;
  bool has_accept_encoding = false;
  std::string accept_encoding;
  uint64_t received_ns = 0;  // when its first byte was read (pyserver/clock.h)
};

// Shared: each reader holds it, so a connection may outlive the host's handle.
class InferLane : public std::enable_shared_from_this<InferLane> {
 public:
  // `max_header_size`, `max_body_size`: a request over either goes to the
  // host, whose parser refuses it. `notify`: with an eventfd (readers on
  // the pump's threads); without, for readers the host calls itself and
  // drains after each call (notify_fd() is then -1).
  static Status Create(size_t max_header_size, size_t max_body_size,
                       std::shared_ptr<InferLane>* lane, bool notify = true);
  ~InferLane();
  InferLane(const InferLane&) = delete;
  InferLane& operator=(const InferLane&) = delete;

  // Readable (an eventfd) while requests wait for Drain(); -1 without notify.
  int notify_fd() const { return notify_fd_; }

  // A request target (as sent, query included) that the host routes to its
  // infer route, under the host's id for it; ClearRoutes forgets them all.
  void AddRoute(const std::string& target, uint32_t route);
  void ClearRoutes();

  // A reader for one connection (SocketPump::Attach).
  std::unique_ptr<ConnectionReader> NewReader();

  // Moves the queued requests into *out (appending) and re-arms notify_fd().
  size_t Drain(std::vector<LaneRequest>* out);

  // Requests taken since the lane was made.
  uint64_t taken() const;

 private:
  friend class LaneReader;
  using Routes = std::unordered_map<std::string, uint32_t>;
  InferLane() = default;

  bool FindRoute(std::string_view target, uint32_t* route) const;
  void Push(LaneRequest&& request);

  size_t max_header_size_ = 0;
  size_t max_body_size_ = 0;
  int notify_fd_ = -1;

  mutable std::mutex routes_mu_;  // looked up once per request, by its reader
  Routes routes_;

  mutable std::mutex queue_mu_;
  std::vector<LaneRequest> queue_;
  uint64_t taken_ = 0;
};

}  // namespace pyserver::http1
