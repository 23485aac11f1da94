// json::InferRequestReader: the common KServe v2 infer request read with
// simdjson; everything else declined.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pyserver/protocol/infer_request_reader.h"

namespace pyserver::json {
namespace {

bool Read(InferRequestReader* reader, const std::string& json) {
  return reader->Read(json.data(), json.size());
}

TEST(InferRequestReader, ReadsTheCommonRequest) {
  InferRequestReader reader;
  ASSERT_TRUE(Read(&reader,
                   R"({"id":"r\"1","inputs":[{"name":"A","datatype":"FP32","shape":[2,2],)"
                   R"("data":[1,2.5,-3,4]},{"name":"B","shape":[3],"datatype":"INT32",)"
                   R"("parameters":{"binary_data_size":12}}],"parameters":)"
                   R"({"binary_data_output":true},"outputs":[{"name":"Y"},)"
                   R"({"name":"Z","parameters":{"binary_data":false}}],"other":[1,{}]})"));
  EXPECT_TRUE(reader.has_id());
  EXPECT_EQ(reader.id(), "r\"1");
  EXPECT_EQ(reader.parameters(), ParamsState::kOne);
  EXPECT_TRUE(reader.binary_data_output());
  ASSERT_EQ(reader.inputs().size(), 2u);
  const RequestInput& a = reader.inputs()[0];
  EXPECT_EQ(a.name, "A");
  EXPECT_EQ(a.datatype, "FP32");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(a.has_data);
  EXPECT_EQ(a.parameters, ParamsState::kAbsent);
  const RequestInput& b = reader.inputs()[1];
  EXPECT_FALSE(b.has_data);
  EXPECT_EQ(b.parameters, ParamsState::kOne);
  EXPECT_EQ(b.binary_data_size, 12);
  ASSERT_EQ(reader.outputs().size(), 2u);
  EXPECT_EQ(reader.outputs()[0].parameters, ParamsState::kAbsent);
  EXPECT_EQ(reader.outputs()[1].name, "Z");
  EXPECT_EQ(reader.outputs()[1].parameters, ParamsState::kOne);
  EXPECT_FALSE(reader.outputs()[1].binary_data);
  float values[4];
  ASSERT_TRUE(reader.FillData(0, ElementKind::kFloat32, values, 4));
  EXPECT_EQ(values[1], 2.5f);
  EXPECT_EQ(values[2], -3.0f);
  EXPECT_FALSE(reader.FillData(0, ElementKind::kFloat32, values, 3));  // count differs
  EXPECT_FALSE(reader.FillData(1, ElementKind::kInt32, values, 3));    // binary: no data
}

TEST(InferRequestReader, DeclinesWhatTheGeneralPathDecides) {
  InferRequestReader reader;
  const char* declined[] = {
      "not json",
      "[1,2]",
      R"({"outputs":[]})",                                               // no inputs
      R"({"inputs":[],"inputs":[]})",                                    // duplicate key
      R"({"inputs":[{"name":"A","name":"B","datatype":"FP32","shape":[1],"data":[1]}]})",
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[1]}]})",      // no data
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[1],)"
      R"("parameters":{"binary_data_size":4}}]})",                       // both
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[-1],"data":[1]}]})",
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[1.0],"data":[1]}]})",
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":null}]})",
      R"({"inputs":[{"name":7,"datatype":"FP32","shape":[1],"data":[1]}]})",
      R"({"inputs":[],"id":null})",
      R"({"inputs":[],"parameters":{"priority":1}})",
      R"({"inputs":[],"parameters":{"binary_data_output":1}})",
      R"({"inputs":[],"outputs":[{"name":"Y","parameters":{"classification":2}}]})",
      R"({"inputs":[],"outputs":[{"parameters":{}}]})",
      R"({"inputs":[{"name":"A","datatype":"FP32","shape":[1],)"
      R"("parameters":{"shared_memory_region":"r"}}]})",
      R"({"inputs":[]} x)",
  };
  for (const char* json : declined) EXPECT_FALSE(Read(&reader, json)) << json;
  EXPECT_TRUE(Read(&reader, R"({"inputs":[],"parameters":null,"outputs":null})"));
  EXPECT_EQ(reader.parameters(), ParamsState::kAbsent);
  EXPECT_TRUE(reader.outputs().empty());
}

TEST(InferRequestReader, FillsAsNumpyCasts) {
  InferRequestReader reader;
  // ints alone: int64 then the cast; with a float among them, float64 first
  const int64_t big = (int64_t{1} << 54) + (int64_t{1} << 30) + 1;
  const std::string ints = std::to_string(big);
  ASSERT_TRUE(Read(&reader, R"({"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[)" +
                                ints + R"(,3]},{"name":"B","datatype":"FP32","shape":[2],"data":[)" +
                                ints + R"(,0.5]}]})"));
  float a[2], b[2];
  ASSERT_TRUE(reader.FillData(0, ElementKind::kFloat32, a, 2));
  ASSERT_TRUE(reader.FillData(1, ElementKind::kFloat32, b, 2));
  EXPECT_EQ(a[0], static_cast<float>(big));
  EXPECT_EQ(b[0], static_cast<float>(static_cast<double>(big)));
  ASSERT_TRUE(Read(&reader, R"({"inputs":[{"name":"A","datatype":"INT32","shape":[3],)"
                            R"("data":[-0,2147483648,-7]}]})"));
  int32_t c[3];
  ASSERT_TRUE(reader.FillData(0, ElementKind::kInt32, c, 3));
  EXPECT_EQ(c[0], 0);
  EXPECT_EQ(c[1], INT32_MIN);  // the C cast wraps, as the general path's fill
  EXPECT_EQ(c[2], -7);
  uint8_t u[3];
  EXPECT_FALSE(reader.FillData(0, ElementKind::kUint8, u, 3));  // negative for unsigned
  ASSERT_TRUE(Read(&reader, R"({"inputs":[{"name":"A","datatype":"INT64","shape":[2],)"
                            R"("data":[1.5,2]},{"name":"B","datatype":"INT64","shape":[2],)"
                            R"("data":[true,1]},{"name":"C","datatype":"INT64","shape":[1],)"
                            R"("data":[[1]]}]})"));
  int64_t d[2];
  EXPECT_FALSE(reader.FillData(0, ElementKind::kInt64, d, 2));  // a float in an integer tensor
  EXPECT_FALSE(reader.FillData(1, ElementKind::kInt64, d, 2));  // bools
  EXPECT_FALSE(reader.FillData(2, ElementKind::kInt64, d, 1));  // nesting
  EXPECT_FALSE(reader.FillData(0, ElementKind::kUint16, d, 2));  // a kind it does not fill
}

TEST(InferRequestReader, ThreadReaderIsReused) {
  EXPECT_EQ(&ThreadInferRequestReader(), &ThreadInferRequestReader());
}

}  // namespace
}  // namespace pyserver::json
