// A JSON string literal, written as orjson escapes one: the one escaping
// rule for what the protocol's json_writer answers (so that its answers and
// the Python path's match byte for byte) and for the backend log lines
// (triton_log.cc), which Triton writes JSON-escaped.
#pragma once

#include <string>
#include <string_view>

namespace pyserver {

// `text` (UTF-8) as a quoted JSON string: '"', '\\' and control characters
// escaped (\b \t \n \f \r, else \u00xx), everything else as is.
void AppendJsonString(std::string_view text, std::string* out);

}  // namespace pyserver
