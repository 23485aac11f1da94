#include "pyserver/status.h"

namespace pyserver {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kInvalidArg: return "INVALID_ARG";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kUnsupported: return "UNSUPPORTED";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace pyserver
