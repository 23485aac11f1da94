// json::AppendArray: the text orjson gives for the same
// numpy arrays (the expected texts below are orjson 3's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "pyserver/protocol/json_writer.h"

namespace pyserver::json {
namespace {

template <typename T>
std::string Array(ElementKind kind, const std::vector<T>& values) {
  std::string out = "x";
  EXPECT_TRUE(AppendArray(kind, values.data(), values.size(), &out));
  return out.substr(1);
}

TEST(JsonWriter, DoublesInOrjsonsLayout) {
  EXPECT_EQ(Array<double>(ElementKind::kFloat64,
                          {0.1, 1e20, 1e16, 1e15, 2.0 / 3, 1e-7, 1e-5, 1e-6, 1.25e-5, 9.999e15}),
            "[0.1,1e+20,1e+16,1000000000000000.0,0.6666666666666666,1e-7,0.00001,1e-6,"
            "0.0000125,9999000000000000.0]");
  EXPECT_EQ(Array<double>(ElementKind::kFloat64, {0.0, -0.0, 1.0, -2.0, 5e-324,
                                                  1.7976931348623157e308, -12.5}),
            "[0.0,-0.0,1.0,-2.0,5e-324,1.7976931348623157e+308,-12.5]");
}

TEST(JsonWriter, FloatsInOrjsonsLayout) {
  EXPECT_EQ(Array<float>(ElementKind::kFloat32,
                         {0.0f, -0.0f, 1.5f, 0.1f, 1e20f, 1.5e-7f, 100000000.0f, 3.4028235e38f,
                          1e-45f, 123456.7f, 1e16f, 1e15f, 2.0f / 3}),
            "[0.0,-0.0,1.5,0.1,1e+20,1.5e-7,100000000.0,3.4028235e+38,1e-45,123456.7,1e+16,"
            "1e+15,0.6666667]");
  EXPECT_EQ(Array<float>(ElementKind::kFloat32,
                         {1e-5f, 1e-6f, 1.25e-5f, 9.999e15f, 1e7f, 16777216.0f}),
            "[0.00001,0.000001,0.0000125,9.999e+15,10000000.0,16777216.0]");
}

TEST(JsonWriter, IntegersAndBools) {
  EXPECT_EQ(Array<int64_t>(ElementKind::kInt64, {1, -2, std::numeric_limits<int64_t>::max(),
                                                 std::numeric_limits<int64_t>::min()}),
            "[1,-2,9223372036854775807,-9223372036854775808]");
  EXPECT_EQ(Array<uint64_t>(ElementKind::kUint64, {0, std::numeric_limits<uint64_t>::max()}),
            "[0,18446744073709551615]");
  EXPECT_EQ(Array<int8_t>(ElementKind::kInt8, {-128, 127}), "[-128,127]");
  EXPECT_EQ(Array<uint16_t>(ElementKind::kUint16, {65535}), "[65535]");
  EXPECT_EQ(Array<uint8_t>(ElementKind::kBool, {1, 0, 1}), "[true,false,true]");
  EXPECT_EQ(Array<int32_t>(ElementKind::kInt32, {}), "[]");
}

TEST(JsonWriter, NonFiniteLeavesOutputAlone) {
  std::string out = "{\"data\":";
  std::vector<float> values = {1.0f, std::nanf(""), 2.0f};
  EXPECT_FALSE(AppendArray(ElementKind::kFloat32, values.data(), values.size(), &out));
  EXPECT_EQ(out, "{\"data\":");
  std::vector<double> inf = {std::numeric_limits<double>::infinity()};
  EXPECT_FALSE(AppendArray(ElementKind::kFloat64, inf.data(), inf.size(), &out));
  EXPECT_EQ(out, "{\"data\":");
}

}  // namespace
}  // namespace pyserver::json
