// What the csrc/src/triton_*.cc files that implement Triton's C API share:
// how an entry point is declared and how it fails.
#pragma once

#include <cstring>
#include <string>
#include <utility>

#include "pyserver/status.h"
#include "pyserver/triton/objects.h"

#define API extern "C" TRITONSERVER_Error*

namespace pyserver::triton {

inline TRITONSERVER_Error* Err(TRITONSERVER_Error_Code code, std::string message) {
  return new TRITONSERVER_Error{code, std::move(message)};
}

// A status as Triton's error object (the inverse of FromError), nullptr for Ok.
inline TRITONSERVER_Error* ToError(const Status& status) {
  if (status.ok()) return nullptr;
  return Err(static_cast<TRITONSERVER_Error_Code>(static_cast<int>(status.code()) - 1),
             status.message());
}

// Triton's prefix for a request's errors.
inline std::string RequestTag(const std::string& id) {
  return "[request id: " + (id.empty() ? std::string("<id_unknown>") : id) + "] ";
}

// An enum argument as the caller passed it: C lets a caller pass any int,
// and reading one outside the enum's values through the enum type is
// undefined, so its bytes are read as an int.
template <typename Enum>
int RawEnum(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "an int-sized enum");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

inline TRITONSERVER_Error* Null(const char* what) {
  return Err(TRITONSERVER_ERROR_INVALID_ARG, std::string(what) + " is null");
}

}  // namespace pyserver::triton

// An argument the caller must give: INVALID_ARG "<name> is null" without it.
#define CHECK_ARG(p) \
  if ((p) == nullptr) return ::pyserver::triton::Null(#p)
