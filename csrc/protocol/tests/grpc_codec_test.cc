// grpc_codec: ModelInferRequest parsing and ModelInferResponse writing,
// checked against bytes the protobuf library produced for the same messages.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "pyserver/protocol/grpc_codec.h"

namespace pyserver {
namespace grpc {
namespace {

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// protobuf (upb) serialization of a request with every parameter kind, raw
// and typed contents, a negative dim and a requested output's parameter.
const char* kRequestHex =
    "0a076164645f7375621201311a057265712d3722120a05726174696f120921000000000000e03f220e0a08"
    "7072696f726974791202100322140a0e73657175656e63655f737461727412020801220b0a046e616d6512"
    "031a017822120a03626967120b28858080808080808080012a120a06494e505554301204465033321a0201"
    "042a330a06494e505554311204494e54381a0bffffffffffffffffff010222070a0170120208002a0d120b"
    "01feffffffffffffffff01321f0a074f55545055543012140a0e636c617373696669636174696f6e120210"
    "023a10000000000000803f0000004000004040";

const Parameter* Find(const std::vector<Parameter>& params, const char* key) {
  for (const auto& p : params) {
    if (p.key == key) return &p;
  }
  return nullptr;
}

TEST(GrpcCodec, ParsesRequestFromProtobufBytes) {
  auto bytes = FromHex(kRequestHex);
  InferRequestView r;
  ASSERT_TRUE(ParseModelInferRequest(bytes.data(), bytes.size(), &r).ok());
  EXPECT_EQ(r.model_name, "add_sub");
  EXPECT_EQ(r.model_version, "1");
  EXPECT_EQ(r.id, "req-7");
  ASSERT_EQ(r.parameters.size(), 5u);
  EXPECT_EQ(Find(r.parameters, "priority")->kind, Parameter::Kind::kInt64);
  EXPECT_EQ(Find(r.parameters, "priority")->int64_value, 3);
  EXPECT_EQ(Find(r.parameters, "sequence_start")->kind, Parameter::Kind::kBool);
  EXPECT_TRUE(Find(r.parameters, "sequence_start")->bool_value);
  EXPECT_EQ(Find(r.parameters, "name")->string_value, "x");
  EXPECT_EQ(Find(r.parameters, "ratio")->kind, Parameter::Kind::kDouble);
  EXPECT_DOUBLE_EQ(Find(r.parameters, "ratio")->double_value, 0.5);
  EXPECT_EQ(Find(r.parameters, "big")->kind, Parameter::Kind::kUint64);
  EXPECT_EQ(Find(r.parameters, "big")->uint64_value, (uint64_t{1} << 63) + 5);

  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].name, "INPUT0");
  EXPECT_EQ(r.inputs[0].datatype, "FP32");
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(r.inputs[0].has_contents);
  EXPECT_EQ(r.inputs[1].shape, (std::vector<int64_t>{-1, 2}));
  EXPECT_TRUE(r.inputs[1].has_contents);
  EXPECT_FALSE(r.inputs[1].contents.empty());
  ASSERT_EQ(r.inputs[1].parameters.size(), 1u);
  EXPECT_EQ(r.inputs[1].parameters[0].kind, Parameter::Kind::kBool);
  EXPECT_FALSE(r.inputs[1].parameters[0].bool_value);

  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "OUTPUT0");
  EXPECT_EQ(Find(r.outputs[0].parameters, "classification")->int64_value, 2);

  ASSERT_EQ(r.raw_input_contents.size(), 1u);
  ASSERT_EQ(r.raw_input_contents[0].size(), 16u);
  float values[4];
  std::memcpy(values, r.raw_input_contents[0].data(), 16);
  EXPECT_EQ(values[3], 3.0f);
}

TEST(GrpcCodec, UnpackedShapeUnknownFieldsAndDuplicateKeys) {
  // inputs{name:"A" shape:2 shape:3 (unpacked) field 99 varint}, field 50
  // fixed32, parameters {k: int64 1}, {k: int64 2}.
  std::vector<uint8_t> in = {0x0a, 0x01, 'A', 0x18, 0x02, 0x18, 0x03, 0x98, 0x06, 0x07};
  std::vector<uint8_t> msg = {0x2a, static_cast<uint8_t>(in.size())};
  msg.insert(msg.end(), in.begin(), in.end());
  std::vector<uint8_t> tail = {0x95, 0x03, 1, 2, 3, 4,  // field 50, fixed32
                               0x22, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x10, 0x01,
                               0x22, 0x07, 0x0a, 0x01, 'k', 0x12, 0x02, 0x10, 0x02};
  msg.insert(msg.end(), tail.begin(), tail.end());
  InferRequestView r;
  ASSERT_TRUE(ParseModelInferRequest(msg.data(), msg.size(), &r).ok());
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].int64_value, 2);
}

TEST(GrpcCodec, RejectsMalformedBytes) {
  auto good = FromHex(kRequestHex);
  // Every truncation of a valid message either parses (cut at a field
  // boundary) or fails cleanly: never reads past the end.
  size_t failures = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    InferRequestView r;
    if (!ParseModelInferRequest(cut.data(), cut.size(), &r).ok()) ++failures;
  }
  EXPECT_GT(failures, good.size() / 2);

  const std::vector<std::vector<uint8_t>> bad = {
      {0x0a, 0x05, 'a'},                                      // length past the end
      {0x00},                                                 // field number 0
      {0x0b},                                                 // group start
      {0x0f},                                                 // wire type 7
      {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},  // 11-byte varint
      {0x2a, 0x02, 0x1a, 0x05},                               // packed shape past its field
  };
  for (const auto& b : bad) {
    InferRequestView r;
    Status s = ParseModelInferRequest(b.data(), b.size(), &r);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArg);
  }
  InferRequestView empty;
  EXPECT_TRUE(ParseModelInferRequest(nullptr, 0, &empty).ok());
}

TEST(GrpcCodec, WritesResponseAsProtobufDoes) {
  const float out0[2] = {1.5f, -2.0f};
  InferResponseView r;
  r.model_name = "add_sub";
  r.model_version = "1";
  r.id = "req-7";
  Parameter final_flag;
  final_flag.key = "triton_final_response";
  final_flag.kind = Parameter::Kind::kBool;
  final_flag.bool_value = true;
  r.parameters.push_back(final_flag);
  OutputTensorView a;
  a.name = "OUTPUT0";
  a.datatype = "FP32";
  a.shape = {1, 2};
  a.raw = reinterpret_cast<const uint8_t*>(out0);
  a.raw_size = sizeof(out0);
  OutputTensorView b;
  b.name = "OUTPUT1";
  b.datatype = "BYTES";
  b.shape = {1};
  r.outputs = {a, b};

  auto expected = FromHex(
      "0a076164645f7375621201311a057265712d37221b0a15747269746f6e5f66696e616c5f726573706f6e73"
      "65120208012a130a074f5554505554301204465033321a0201022a130a074f555450555431120542595445"
      "531a010132080000c03f000000c03200");
  size_t n = ModelInferResponseSize(r);
  ASSERT_EQ(n, expected.size());
  std::vector<uint8_t> out(n);
  ASSERT_EQ(WriteModelInferResponse(r, out.data()), n);
  EXPECT_EQ(out, expected);
}

TEST(GrpcCodec, ParameterKindsRoundTripThroughTheWriter) {
  InferResponseView r;
  const char* keys[] = {"b", "i", "s", "d", "u"};
  for (int k = 1; k <= 5; ++k) {
    Parameter p;
    p.key = keys[k - 1];
    p.kind = static_cast<Parameter::Kind>(k);
    p.bool_value = true;
    p.int64_value = -7;
    p.string_value = "text";
    p.double_value = 2.25;
    p.uint64_value = ~uint64_t{0};
    r.parameters.push_back(p);
  }
  std::vector<uint8_t> out(ModelInferResponseSize(r));
  ASSERT_EQ(WriteModelInferResponse(r, out.data()), out.size());
  // Response field 4 has the request's field number for parameters, so the
  // request parser reads them back.
  InferRequestView back;
  ASSERT_TRUE(ParseModelInferRequest(out.data(), out.size(), &back).ok());
  ASSERT_EQ(back.parameters.size(), 5u);
  EXPECT_TRUE(Find(back.parameters, "b")->bool_value);
  EXPECT_EQ(Find(back.parameters, "i")->int64_value, -7);
  EXPECT_EQ(Find(back.parameters, "s")->string_value, "text");
  EXPECT_DOUBLE_EQ(Find(back.parameters, "d")->double_value, 2.25);
  EXPECT_EQ(Find(back.parameters, "u")->uint64_value, ~uint64_t{0});
}

TEST(GrpcCodec, StreamResponsePrefix) {
  // ModelStreamInferResponse{error_message: "boom", infer_response{id: "7"}}
  auto expected = FromHex("0a04626f6f6d12031a0137");
  const uint8_t inner[] = {0x1a, 0x01, '7'};
  size_t n = StreamResponsePrefixSize("boom", sizeof(inner), true);
  std::vector<uint8_t> out(n + sizeof(inner));
  ASSERT_EQ(WriteStreamResponsePrefix("boom", sizeof(inner), true, out.data()), n);
  std::memcpy(out.data() + n, inner, sizeof(inner));
  EXPECT_EQ(out, expected);
  EXPECT_EQ(StreamResponsePrefixSize("", 0, false), 0u);
  EXPECT_EQ(VarintSize(127), 1u);
  EXPECT_EQ(VarintSize(128), 2u);
  EXPECT_EQ(VarintSize(~uint64_t{0}), 10u);
}

TEST(GrpcCodec, GrpcTimeout) {
  EXPECT_EQ(ParseGrpcTimeoutUs("1S"), 1000000);
  EXPECT_EQ(ParseGrpcTimeoutUs("250m"), 250000);
  EXPECT_EQ(ParseGrpcTimeoutUs("2M"), 120000000);
  EXPECT_EQ(ParseGrpcTimeoutUs("1H"), int64_t{3600} * 1000000);
  EXPECT_EQ(ParseGrpcTimeoutUs("7u"), 7);
  EXPECT_EQ(ParseGrpcTimeoutUs("1n"), 1);  // rounded up
  EXPECT_EQ(ParseGrpcTimeoutUs("99999999S"), int64_t{99999999} * 1000000);
  EXPECT_EQ(ParseGrpcTimeoutUs("123456789S"), -1);  // 9 digits
  EXPECT_EQ(ParseGrpcTimeoutUs("S"), -1);
  EXPECT_EQ(ParseGrpcTimeoutUs("10x"), -1);
  EXPECT_EQ(ParseGrpcTimeoutUs("1.5S"), -1);
  EXPECT_EQ(ParseGrpcTimeoutUs(""), -1);
}

TEST(GrpcCodec, PercentEncode) {
  EXPECT_EQ(PercentEncode("plain text: ok"), "plain text: ok");
  EXPECT_EQ(PercentEncode("100%"), "100%25");
  EXPECT_EQ(PercentEncode("a\nb"), "a%0Ab");
  EXPECT_EQ(PercentEncode("\xc3\xa9"), "%C3%A9");  // UTF-8 bytes of e-acute
}

}  // namespace
}  // namespace grpc
}  // namespace pyserver
