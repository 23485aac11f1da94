// Status: an error code and message, returned instead of thrown.
#pragma once

#include <string>
#include <utility>

namespace pyserver {

// Values match TRITONSERVER_Error_Code order and pyserver.kernel.errors.Code.
enum class StatusCode : int {
  kOk = 0,
  kUnknown = 1,
  kInternal = 2,
  kNotFound = 3,
  kInvalidArg = 4,
  kUnavailable = 5,
  kUnsupported = 6,
  kAlreadyExists = 7,
  kCancelled = 8,
};

const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE_NAME: message", for logs and test failures.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

#define PYSERVER_RETURN_IF_ERROR(expr)        \
  do {                                        \
    ::pyserver::Status _st = (expr);          \
    if (!_st.ok()) return _st;                \
  } while (false)

}  // namespace pyserver
