// JSON text of an infer response's tensors, for the HTTP frontend's common
// case (engine/protocol/http_infer.pyx). Numbers are written as orjson writes a numpy
// array's elements (OPT_SERIALIZE_NUMPY) and strings as orjson escapes them
// (pyserver/json_string.h, in the core: the backend log escapes alike),
// so that this path and the Python one (engine/protocol/http_codec.pyx)
// answer byte for byte alike; it exists because orjson's numpy path plus
// the dicts around it cost the event loop ~20-30k instructions per add_sub
// answer (this path ~18k, callgrind).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pyserver::json {

// A tensor element's type: what numpy's dtype.kind and itemsize name.
enum class ElementKind {
  kBool,
  kInt8, kInt16, kInt32, kInt64,
  kUint8, kUint16, kUint32, kUint64,
  kFloat32, kFloat64,
};

// Appends "[e0,e1,...]" for the `count` elements at `data` (native byte
// order). Floats are the shortest text that reads back as the value, in
// orjson's layout: plain digits with ".0" for whole numbers below 1e16
// (1e13 for a float), "0.00ddd" down to 1e-5 (1e-6), else "d.ddde+X".
// Returns false, leaving `out` as it was, when an element has no JSON
// number (NaN or an infinity, which orjson writes as null): the caller then
// takes its general path.
bool AppendArray(ElementKind kind, const void* data, size_t count, std::string* out);

// `value` in decimal.
void AppendInt(long long value, std::string* out);

}  // namespace pyserver::json
