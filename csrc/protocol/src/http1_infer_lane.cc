#include "pyserver/protocol/http1_infer_lane.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <strings.h>

#include "llhttp.h"
#include "pyserver/clock.h"

namespace pyserver::http1 {

namespace {

// Bytes a reader holds behind a request being answered (pipelined) before
// it stops the connection's reads until the answer is out.
constexpr size_t kHoldLimit = 4 << 20;
// The largest body the lane takes. A larger one is the host's, which reads
// it into one buffer of its size that goes back to the system when freed
// (engine/protocol/http1.pyx); the lane's copies would keep the memory.
constexpr uint64_t kMaxBody = 256 << 10;
// A buffer left over this capacity is given back once it is nearly empty.
constexpr size_t kKeepCapacity = 64 << 10;

// RFC 9110's token characters, the only ones a header name may hold. This
// llhttp lets a space inside a name through; the host's parser refuses it.
bool IsToken(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}

bool NameIs(const std::string& name, const char* lower) {
  return name.size() == std::strlen(lower) && ::strncasecmp(name.data(), lower, name.size()) == 0;
}

}  // namespace

// One connection's requests on its pump thread (see the header).
class LaneReader final : public ConnectionReader {
 public:
  explicit LaneReader(std::shared_ptr<InferLane> lane) : lane_(std::move(lane)) {
    llhttp_settings_init(&settings_);
    settings_.on_message_begin = &LaneReader::OnMessageBegin;
    settings_.on_url = &LaneReader::OnUrl;
    settings_.on_header_field = &LaneReader::OnHeaderField;
    settings_.on_header_value = &LaneReader::OnHeaderValue;
    settings_.on_header_value_complete = &LaneReader::OnHeaderValueComplete;
    settings_.on_headers_complete = &LaneReader::OnHeadersComplete;
    settings_.on_body = &LaneReader::OnBody;
    settings_.on_message_complete = &LaneReader::OnMessageComplete;
    ResetParser();
  }

  bool Read(uint64_t connection, const char* data, size_t size, std::string* host) override {
    last_read_ns_.store(NowNs(), std::memory_order_relaxed);
    if (mode_ == Mode::kHost) {
      host->append(data, size);
      given_ += size;
      return true;
    }
    buf_.append(data, size);
    if (mode_ == Mode::kLane) Parse(connection, host);
    return mode_ != Mode::kAnswering || buf_.size() < kHoldLimit;
  }

  void Resume(uint64_t connection, bool answered, uint64_t consumed,
              std::string* host) override {
    if (mode_ == Mode::kAnswering && answered) {
      mode_ = Mode::kLane;
      state_.store(ReaderProgress::kIdle, std::memory_order_relaxed);
      Parse(connection, host);
    } else if (mode_ == Mode::kHost && consumed == given_) {
      mode_ = Mode::kLane;  // at a request boundary: the host has all it was given
    }
  }

  bool HoldEof(std::string* host) override {
    if (mode_ == Mode::kAnswering) return true;  // its answer first
    if (mode_ == Mode::kLane && !buf_.empty()) ToHost(host);  // cut short: the host says so
    return false;
  }

  ReaderProgress Progress() const override {
    ReaderProgress p;
    p.state = state_.load(std::memory_order_relaxed);
    p.since_ns = since_ns_.load(std::memory_order_relaxed);
    p.last_read_ns = last_read_ns_.load(std::memory_order_relaxed);
    return p;
  }

 private:
  enum class Mode { kLane, kAnswering, kHost };

  static LaneReader* Of(llhttp_t* p) { return static_cast<LaneReader*>(p->data); }

  void Compact() {
    if (buf_.capacity() > kKeepCapacity && buf_.size() < kKeepCapacity / 4) {
      std::string(buf_).swap(buf_);
    }
  }

  void ResetParser() {
    llhttp_init(&parser_, HTTP_REQUEST, &settings_);
    parser_.data = this;
    fed_ = 0;
  }

  // Parses what buf_ holds past fed_, in lane mode.
  void Parse(uint64_t connection, std::string* host) {
    while (mode_ == Mode::kLane && fed_ < buf_.size()) {
      llhttp_errno_t err = llhttp_execute(&parser_, buf_.data() + fed_, buf_.size() - fed_);
      if (err == HPE_OK) {
        if (take_) {  // the request is the lane's: what was read is in body_ now
          buf_.clear();
          fed_ = 0;
          Compact();
          return;
        }
        fed_ = buf_.size();
        // a head that never ends, or ends past the bound: the host refuses it
        if (in_head_ && buf_.size() > lane_->max_header_size_) ToHost(host);
        return;
      }
      if (err != HPE_PAUSED || !take_) {  // declined, upgraded or malformed
        ToHost(host);
        return;
      }
      size_t end = static_cast<size_t>(llhttp_get_error_pos(&parser_) - buf_.data());
      Take(connection);
      buf_.erase(0, end);
      Compact();
      ResetParser();
      return;
    }
  }

  // Queues the request just completed; the connection waits for its answer.
  void Take(uint64_t connection) {
    LaneRequest r;
    r.connection = connection;
    r.route = route_;
    r.target.swap(url_);
    r.body.swap(body_);
    r.has_header_length = has_header_length_;
    r.header_length.swap(header_length_);
    r.has_accept_encoding = has_accept_encoding_;
    r.accept_encoding.swap(accept_encoding_);
    r.received_ns = since_ns_.load(std::memory_order_relaxed);
    mode_ = Mode::kAnswering;
    state_.store(ReaderProgress::kAnswering, std::memory_order_relaxed);
    lane_->Push(std::move(r));
  }

  // Everything held, from the current request's first byte, goes to the
  // host, and so does what follows until it hands the connection back.
  void ToHost(std::string* host) {
    host->append(buf_);
    given_ += buf_.size();
    buf_.clear();
    Compact();
    mode_ = Mode::kHost;
    in_head_ = false;
    state_.store(ReaderProgress::kIdle, std::memory_order_relaxed);  // the host's to time now
    ResetParser();
  }

  // ---- llhttp callbacks (inside llhttp_execute, on the pump thread) ----

  static int OnMessageBegin(llhttp_t* p) {
    LaneReader* r = Of(p);
    r->url_.clear();
    r->field_.clear();
    r->value_.clear();
    r->body_.clear();
    r->header_length_.clear();
    r->accept_encoding_.clear();
    r->has_header_length_ = r->has_accept_encoding_ = false;
    r->decline_ = r->take_ = false;
    r->in_head_ = true;
    r->head_size_ = 0;
    r->since_ns_.store(NowNs(), std::memory_order_relaxed);
    r->state_.store(ReaderProgress::kHead, std::memory_order_relaxed);
    return 0;
  }

  static int OnUrl(llhttp_t* p, const char* at, size_t n) {
    LaneReader* r = Of(p);
    r->url_.append(at, n);
    r->head_size_ += n;
    return 0;
  }

  static int OnHeaderField(llhttp_t* p, const char* at, size_t n) {
    LaneReader* r = Of(p);
    r->field_.append(at, n);
    r->head_size_ += n;
    for (size_t i = 0; i < n; ++i) r->decline_ |= !IsToken(static_cast<unsigned char>(at[i]));
    return 0;
  }

  static int OnHeaderValue(llhttp_t* p, const char* at, size_t n) {
    LaneReader* r = Of(p);
    r->value_.append(at, n);
    r->head_size_ += n;
    return 0;
  }

  static int OnHeaderValueComplete(llhttp_t* p) {
    LaneReader* r = Of(p);
    r->head_size_ += 4;  // ": " and CRLF, as the host's limit counts them
    const std::string& f = r->field_;
    if (NameIs(f, "inference-header-content-length")) {
      r->decline_ |= r->has_header_length_;  // twice: the host's rules
      r->has_header_length_ = true;
      r->header_length_ = r->value_;
    } else if (NameIs(f, "accept-encoding")) {
      r->decline_ |= r->has_accept_encoding_;
      r->has_accept_encoding_ = true;
      r->accept_encoding_ = r->value_;
    } else if (NameIs(f, "content-encoding") || NameIs(f, "expect") ||
               NameIs(f, "transfer-encoding")) {
      r->decline_ = true;
    }
    r->field_.clear();
    r->value_.clear();
    return 0;
  }

  static int OnHeadersComplete(llhttp_t* p) {
    LaneReader* r = Of(p);
    r->in_head_ = false;
    r->state_.store(ReaderProgress::kBody, std::memory_order_relaxed);
    bool take = !r->decline_ && llhttp_get_method(p) == HTTP_POST &&
                llhttp_get_http_major(p) == 1 && llhttp_get_http_minor(p) == 1 &&
                !llhttp_get_upgrade(p) && llhttp_should_keep_alive(p) &&
                (p->flags & F_CONTENT_LENGTH) != 0 &&
                p->content_length <= r->lane_->max_body_size_ && p->content_length <= kMaxBody &&
                r->head_size_ <= r->lane_->max_header_size_ &&
                r->lane_->FindRoute(r->url_, &r->route_);
    if (!take) return HPE_PAUSED;  // the host reads this request
    r->take_ = true;
    r->body_.reserve(static_cast<size_t>(p->content_length));
    return 0;
  }

  static int OnBody(llhttp_t* p, const char* at, size_t n) {
    Of(p)->body_.append(at, n);
    return 0;
  }

  static int OnMessageComplete(llhttp_t*) { return HPE_PAUSED; }

  std::shared_ptr<InferLane> lane_;
  llhttp_settings_t settings_;
  llhttp_t parser_;
  Mode mode_ = Mode::kLane;
  std::string buf_;   // lane mode: unparsed or partly parsed bytes from a request's start
  size_t fed_ = 0;    // of buf_, given to llhttp
  uint64_t given_ = 0;  // bytes passed to the host, in all

  // the request being read
  std::string url_, field_, value_, body_;
  std::string header_length_, accept_encoding_;
  bool has_header_length_ = false, has_accept_encoding_ = false;
  bool in_head_ = false, decline_ = false, take_ = false;
  size_t head_size_ = 0;
  uint32_t route_ = 0;

  std::atomic<int> state_{ReaderProgress::kIdle};
  std::atomic<uint64_t> since_ns_{0};
  std::atomic<uint64_t> last_read_ns_{0};
};

Status InferLane::Create(size_t max_header_size, size_t max_body_size,
                         std::shared_ptr<InferLane>* lane, bool notify) {
  std::shared_ptr<InferLane> l(new InferLane());
  l->max_header_size_ = max_header_size;
  l->max_body_size_ = max_body_size;
  if (notify) l->notify_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (notify && l->notify_fd_ < 0) {
    return Status(StatusCode::kInternal, std::string("eventfd: ") + std::strerror(errno));
  }
  *lane = std::move(l);
  return Status::Ok();
}

InferLane::~InferLane() {
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

void InferLane::AddRoute(const std::string& target, uint32_t route) {
  std::lock_guard<std::mutex> lock(routes_mu_);
  routes_[target] = route;
}

void InferLane::ClearRoutes() {
  std::lock_guard<std::mutex> lock(routes_mu_);
  routes_.clear();
}

bool InferLane::FindRoute(std::string_view target, uint32_t* route) const {
  std::lock_guard<std::mutex> lock(routes_mu_);
  auto it = routes_.find(std::string(target));
  if (it == routes_.end()) return false;
  *route = it->second;
  return true;
}

std::unique_ptr<ConnectionReader> InferLane::NewReader() {
  return std::make_unique<LaneReader>(shared_from_this());
}

void InferLane::Push(LaneRequest&& request) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    was_empty = queue_.empty();
    queue_.push_back(std::move(request));
    ++taken_;
  }
  if (was_empty && notify_fd_ >= 0) {
    uint64_t one = 1;
    ssize_t n = ::write(notify_fd_, &one, sizeof one);  // fails only when already signalled
    (void)n;
  }
}

size_t InferLane::Drain(std::vector<LaneRequest>* out) {
  std::vector<LaneRequest> taken;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (notify_fd_ >= 0) {
      uint64_t count;
      ssize_t n = ::read(notify_fd_, &count, sizeof count);
      (void)n;
    }
    taken.swap(queue_);
  }
  for (LaneRequest& r : taken) out->push_back(std::move(r));
  return taken.size();
}

uint64_t InferLane::taken() const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return taken_;
}

}  // namespace pyserver::http1
