#include "pyserver/protocol/json_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

namespace pyserver::json {
namespace {

// The most a number takes: "-1.7976931348623157e+308" (24), a uint64's 20
// digits, "false"; a separator besides.
constexpr size_t kMaxNumber = 32;

// ryu's "pretty" layout, as orjson uses it, for `value` = `significand` *
// 10^`k` (the shortest digits that read back as the value), written at `w`;
// returns the end. `max_point`: the largest decimal-point position written
// without an exponent (16 for a double, 13 for a float); `min_point`:
// positions above it and up to 0 are written as 0.000ddd (-5 for a double,
// -6 for a float).
char* WriteLayout(char* w, bool negative, uint64_t significand, int k, int max_point,
                  int min_point) {
  char digits[24];
  const int n = static_cast<int>(std::to_chars(digits, digits + sizeof(digits), significand).ptr -
                                 digits);
  const int point = n + k;  // where the decimal point falls in the digits
  if (negative) *w++ = '-';
  if (k >= 0 && point <= max_point) {  // 1234e7 -> 12340000000.0
    std::memcpy(w, digits, n);
    w += n;
    std::memset(w, '0', k);
    w += k;
    *w++ = '.';
    *w++ = '0';
  } else if (point > 0 && point <= max_point) {  // 1234e-2 -> 12.34
    std::memcpy(w, digits, point);
    w += point;
    *w++ = '.';
    std::memcpy(w, digits + point, n - point);
    w += n - point;
  } else if (point > min_point && point <= 0) {  // 1234e-6 -> 0.001234
    *w++ = '0';
    *w++ = '.';
    std::memset(w, '0', -point);
    w += -point;
    std::memcpy(w, digits, n);
    w += n;
  } else {  // 1234e30 -> 1.234e+33
    *w++ = digits[0];
    if (n > 1) {
      *w++ = '.';
      std::memcpy(w, digits + 1, n - 1);
      w += n - 1;
    }
    const int x = point - 1;
    *w++ = 'e';
    *w++ = x < 0 ? '-' : '+';
    w = std::to_chars(w, w + 8, x < 0 ? -x : x).ptr;
  }
  return w;
}

// The shortest digits come from {fmt}'s Dragonbox (~7 ns a float, against
// ~35 for libstdc++'s std::to_chars, which this layout would otherwise
// parse back); fmt is used header-only, so nothing is linked at run time.
template <typename F>
char* WriteShortest(char* w, F value) {
  constexpr int kMaxPoint = sizeof(F) == 4 ? 13 : 16;
  constexpr int kMinPoint = sizeof(F) == 4 ? -6 : -5;
  const bool negative = std::signbit(value);
  if (value == 0) {
    if (negative) *w++ = '-';
    std::memcpy(w, "0.0", 3);
    return w + 3;
  }
  const auto dec = fmt::detail::dragonbox::to_decimal(std::fabs(value));
  return WriteLayout(w, negative, dec.significand, dec.exponent, kMaxPoint, kMinPoint);
}

template <typename T>
T Load(const void* data, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return v;
}

// The elements, comma-separated, from `w`; nullptr at a NaN or infinity.
template <typename T>
char* WriteElements(char* w, const void* data, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (i) *w++ = ',';
    const T v = Load<T>(data, i);
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) return nullptr;
      w = WriteShortest(w, v);
    } else {
      w = std::to_chars(w, w + kMaxNumber, v).ptr;
    }
  }
  return w;
}

char* WriteBools(char* w, const void* data, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (i) *w++ = ',';
    if (static_cast<const uint8_t*>(data)[i]) {
      std::memcpy(w, "true", 4);
      w += 4;
    } else {
      std::memcpy(w, "false", 5);
      w += 5;
    }
  }
  return w;
}

// Appends what `write(w)` writes in at most `bound` bytes; false (and `out`
// as it was) when it returns nullptr.
template <typename Write>
bool AppendWritten(size_t bound, std::string* out, Write&& write) {
  const size_t start = out->size();
  out->resize(start + bound);
  char* end = write(out->data() + start);
  out->resize(end == nullptr ? start : static_cast<size_t>(end - out->data()));
  return end != nullptr;
}

}  // namespace

void AppendInt(long long value, std::string* out) {
  AppendWritten(kMaxNumber, out, [&](char* w) { return std::to_chars(w, w + kMaxNumber, value).ptr; });
}

bool AppendArray(ElementKind kind, const void* data, size_t count, std::string* out) {
  return AppendWritten(2 + count * kMaxNumber, out, [&](char* w) -> char* {
    *w++ = '[';
    switch (kind) {
      case ElementKind::kBool: w = WriteBools(w, data, count); break;
      case ElementKind::kInt8: w = WriteElements<int8_t>(w, data, count); break;
      case ElementKind::kInt16: w = WriteElements<int16_t>(w, data, count); break;
      case ElementKind::kInt32: w = WriteElements<int32_t>(w, data, count); break;
      case ElementKind::kInt64: w = WriteElements<int64_t>(w, data, count); break;
      case ElementKind::kUint8: w = WriteElements<uint8_t>(w, data, count); break;
      case ElementKind::kUint16: w = WriteElements<uint16_t>(w, data, count); break;
      case ElementKind::kUint32: w = WriteElements<uint32_t>(w, data, count); break;
      case ElementKind::kUint64: w = WriteElements<uint64_t>(w, data, count); break;
      case ElementKind::kFloat32: w = WriteElements<float>(w, data, count); break;
      case ElementKind::kFloat64: w = WriteElements<double>(w, data, count); break;
    }
    if (w != nullptr) *w++ = ']';
    return w;
  });
}

}  // namespace pyserver::json
