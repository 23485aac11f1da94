#include "pyserver/json_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace pyserver::json {
namespace {

// ryu's "pretty" layout, as orjson uses it. `max_point`: the largest
// decimal-point position written without an exponent (16 for a double,
// 13 for a float); `min_point`: positions above it and up to 0 are written
// as 0.000ddd (-5 for a double, -6 for a float).
template <typename F>
void AppendShortest(F value, int max_point, int min_point, std::string* out) {
  char buf[48];
  // The shortest digits that read back as `value`: [-]d[.ddd]e±XX.
  const char* end = std::to_chars(buf, buf + sizeof(buf), value,
                                  std::chars_format::scientific).ptr;
  char text[64];  // written here, then appended once
  char* w = text;
  const char* p = buf;
  if (*p == '-') *w++ = *p++;
  char digits[24];
  int n = 0;
  for (; *p != 'e'; ++p) {
    if (*p != '.') digits[n++] = *p;
  }
  ++p;  // past 'e'
  const bool negative_exp = *p++ == '-';
  int exp10 = 0;
  for (; p < end; ++p) exp10 = exp10 * 10 + (*p - '0');
  if (negative_exp) exp10 = -exp10;
  const int k = exp10 - (n - 1);  // value = digits * 10^k
  const int point = n + k;        // where the decimal point falls in the digits
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
    w = std::to_chars(w, text + sizeof(text), x < 0 ? -x : x).ptr;
  }
  out->append(text, w - text);
}

template <typename T>
void AppendIntegers(const void* data, size_t count, std::string* out) {
  char buf[24];
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    if (i) out->push_back(',');
    out->append(buf, r.ptr - buf);
  }
}

template <typename F>
bool AppendFloats(const void* data, size_t count, std::string* out) {
  for (size_t i = 0; i < count; ++i) {
    F v;
    std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(F), sizeof(F));
    if (!std::isfinite(v)) return false;
    if (i) out->push_back(',');
    if constexpr (sizeof(F) == 4) {
      AppendFloat(v, out);
    } else {
      AppendDouble(v, out);
    }
  }
  return true;
}

}  // namespace

void AppendDouble(double value, std::string* out) { AppendShortest(value, 16, -5, out); }

void AppendFloat(float value, std::string* out) { AppendShortest(value, 13, -6, out); }

bool AppendArray(ElementKind kind, const void* data, size_t count, std::string* out) {
  const size_t start = out->size();
  out->push_back('[');
  bool ok = true;
  switch (kind) {
    case ElementKind::kBool:
      for (size_t i = 0; i < count; ++i) {
        if (i) out->push_back(',');
        out->append(static_cast<const uint8_t*>(data)[i] ? "true" : "false");
      }
      break;
    case ElementKind::kInt8: AppendIntegers<int8_t>(data, count, out); break;
    case ElementKind::kInt16: AppendIntegers<int16_t>(data, count, out); break;
    case ElementKind::kInt32: AppendIntegers<int32_t>(data, count, out); break;
    case ElementKind::kInt64: AppendIntegers<int64_t>(data, count, out); break;
    case ElementKind::kUint8: AppendIntegers<uint8_t>(data, count, out); break;
    case ElementKind::kUint16: AppendIntegers<uint16_t>(data, count, out); break;
    case ElementKind::kUint32: AppendIntegers<uint32_t>(data, count, out); break;
    case ElementKind::kUint64: AppendIntegers<uint64_t>(data, count, out); break;
    case ElementKind::kFloat32: ok = AppendFloats<float>(data, count, out); break;
    case ElementKind::kFloat64: ok = AppendFloats<double>(data, count, out); break;
  }
  if (!ok) {
    out->resize(start);
    return false;
  }
  out->push_back(']');
  return true;
}

void AppendString(std::string_view text, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t plain = 0;  // start of the run not yet copied
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(text.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\t': out->append("\\t"); break;
      case '\n': out->append("\\n"); break;
      case '\f': out->append("\\f"); break;
      case '\r': out->append("\\r"); break;
      default: {
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        out->append(esc, sizeof(esc));
      }
    }
  }
  out->append(text.data() + plain, text.size() - plain);
  out->push_back('"');
}

}  // namespace pyserver::json
