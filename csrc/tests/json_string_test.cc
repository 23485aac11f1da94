// AppendJsonString: strings escaped as orjson escapes them (the HTTP
// answers' json_writer and the backend log both write them).
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "pyserver/json_string.h"

namespace pyserver {
namespace {

TEST(JsonString, EscapedAsOrjson) {
  std::string out;
  AppendJsonString(std::string_view("a\x01\x1f\"\\/\x7f\xc3\xa9\b\t\n\f\r", 14), &out);
  EXPECT_EQ(out, "\"a\\u0001\\u001f\\\"\\\\/\x7f\xc3\xa9\\b\\t\\n\\f\\r\"");
  out.clear();
  AppendJsonString("OUTPUT0", &out);
  EXPECT_EQ(out, "\"OUTPUT0\"");
  out.clear();
  AppendJsonString(std::string_view("\0x", 2), &out);
  EXPECT_EQ(out, "\"\\u0000x\"");
}

}  // namespace
}  // namespace pyserver
