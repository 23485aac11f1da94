// json::ReadPlainRequest: a plain infer request (HTTP, gRPC) read against
// its model's PlainSpec, and what it declines; json::PlaceInput, the
// placing of one HTTP input's data it shares with the general path's reader.
#include "pyserver/protocol/plain_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pyserver::json {
namespace {

// add_sub batched: two FP32 inputs of 4 after the batch dimension (max 8), two outputs.
const PlainSpec kSpec({{"INPUT0", "FP32", {4}}, {"INPUT1", "FP32", {4}}}, {"OUTPUT0", "OUTPUT1"},
                      8);
const std::vector<size_t> kItemsizes = {4, 4};

struct Read {
  InferRequestReader reader;
  PlainRequest request;
  bool ok = false;
  // `header` is the JSON, `binary` the bytes after it
  Read(const std::string& header, size_t binary = 0, size_t max_input_size = 1 << 20) {
    if (!reader.Read(header.data(), header.size())) return;
    ok = ReadPlainRequest(reader, kSpec, kItemsizes, header.size(), header.size() + binary,
                          max_input_size, &request);
  }
};

std::string Inputs(const std::string& a, const std::string& b) {
  return R"({"inputs":[)" + a + "," + b + "]";
}

const std::string kJsonA = R"({"name":"INPUT0","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]})";
const std::string kJsonB = R"({"name":"INPUT1","datatype":"FP32","shape":[2,4],"data":[1,2,3,4,5,6,7,8]})";
const std::string kBinA = R"({"name":"INPUT0","datatype":"FP32","shape":[2,4],"parameters":{"binary_data_size":32}})";
const std::string kBinB = R"({"name":"INPUT1","datatype":"FP32","shape":[2,4],"parameters":{"binary_data_size":32}})";

TEST(ReadPlainRequest, JsonDataAndEveryOutputByDefault) {
  Read r(Inputs(kJsonB, kJsonA) + "}");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.request.match.batch_size, 2);
  ASSERT_EQ(r.request.inputs.size(), 2u);
  EXPECT_EQ(r.request.inputs[0].index, 1);  // in the request's order
  EXPECT_EQ(r.request.inputs[0].source, 0u);
  EXPECT_EQ(r.request.inputs[1].index, 0);
  EXPECT_EQ(r.request.inputs[1].count, 8u);
  EXPECT_FALSE(r.request.inputs[1].binary);
  EXPECT_EQ(r.request.inputs[1].kind, ElementKind::kFloat32);
  EXPECT_FALSE(r.request.outputs_named);
  ASSERT_EQ(r.request.outputs.size(), 2u);
  EXPECT_EQ(r.request.outputs[1].index, 1);
  EXPECT_FALSE(r.request.outputs[0].binary);
  EXPECT_EQ(r.request.outputs[0].asked, PlainRequest::Asked::kDefault);
}

TEST(ReadPlainRequest, BinaryDataLiesBackToBackAfterTheHeader) {
  const std::string header = Inputs(kBinA, kBinB) + "}";
  Read r(header, 64);
  ASSERT_TRUE(r.ok);
  EXPECT_TRUE(r.request.inputs[0].binary);
  EXPECT_EQ(r.request.inputs[0].offset, header.size());
  EXPECT_EQ(r.request.inputs[1].offset, header.size() + 32);
  EXPECT_FALSE(Read(header, 63).ok);  // cut short
  EXPECT_FALSE(Read(header, 65).ok);  // bytes left over
  EXPECT_FALSE(Read(Inputs(kJsonA, kJsonB) + "}", 1).ok);
  const std::string wrong_size = Inputs(
      kBinA, R"({"name":"INPUT1","datatype":"FP32","shape":[2,4],"parameters":{"binary_data_size":31}})");
  EXPECT_FALSE(Read(wrong_size + "}", 63).ok);
}

TEST(ReadPlainRequest, HowEachOutputAskedForItsData) {
  Read r(Inputs(kJsonA, kJsonB) +
         R"(,"parameters":{"binary_data_output":true},"outputs":[{"name":"OUTPUT1"},)"
         R"({"name":"OUTPUT0","parameters":{"binary_data":false}}]})");
  ASSERT_TRUE(r.ok);
  EXPECT_TRUE(r.request.outputs_named);
  ASSERT_EQ(r.request.outputs.size(), 2u);
  EXPECT_EQ(r.request.outputs[0].index, 1);
  EXPECT_TRUE(r.request.outputs[0].binary);  // the request's default
  EXPECT_EQ(r.request.outputs[0].asked, PlainRequest::Asked::kDefault);
  EXPECT_FALSE(r.request.outputs[1].binary);
  EXPECT_EQ(r.request.outputs[1].asked, PlainRequest::Asked::kFlag);
  Read empty(Inputs(kJsonA, kJsonB) + R"(,"parameters":{"binary_data_output":true},)"
             R"("outputs":[{"name":"OUTPUT0","parameters":{}}]})");
  ASSERT_TRUE(empty.ok);
  EXPECT_FALSE(empty.request.outputs[0].binary);  // {}: JSON data
  EXPECT_EQ(empty.request.outputs[0].asked, PlainRequest::Asked::kEmpty);
  Read all(Inputs(kJsonA, kJsonB) + R"(,"parameters":{"binary_data_output":true}})");
  ASSERT_TRUE(all.ok);
  EXPECT_TRUE(all.request.outputs[0].binary && all.request.outputs[1].binary);
}

TEST(ReadPlainRequest, WhatTheRulesOrTheReaderDeclineGoesToTheDecoder) {
  EXPECT_FALSE(Read(R"({"inputs":[)" + kJsonA + "]}").ok);  // an input missing
  EXPECT_FALSE(Read(Inputs(kJsonA, kJsonA) + "}").ok);       // one twice
  EXPECT_FALSE(Read(Inputs(kJsonA, kJsonB) + R"(,"outputs":[{"name":"NOPE"}]})").ok);
  const std::string fp16 = R"({"name":"INPUT1","datatype":"FP16","shape":[2,4],"data":[1,2,3,4,5,6,7,8]})";
  EXPECT_FALSE(Read(Inputs(kJsonA, fp16) + "}").ok);
  const std::string nine = R"({"name":"INPUT1","datatype":"FP32","shape":[9,4],"data":[1]})";
  EXPECT_FALSE(Read(Inputs(kJsonA, nine) + "}").ok);  // past max_batch_size
  // JSON data over the server's input bound: 8 floats are 32 bytes
  EXPECT_FALSE(Read(Inputs(kJsonA, kJsonB) + "}", 0, 31).ok);
  EXPECT_TRUE(Read(Inputs(kJsonA, kJsonB) + "}", 0, 32).ok);
}

TEST(ReadPlainRequest, JsonDataOnlyOfTheTypesFillDataTakes) {
  ElementKind kind;
  EXPECT_TRUE(FillKindOf("INT64", &kind));
  EXPECT_EQ(kind, ElementKind::kInt64);
  EXPECT_TRUE(FillKindOf("UINT8", &kind));
  EXPECT_FALSE(FillKindOf("FP16", &kind));
  EXPECT_FALSE(FillKindOf("BOOL", &kind));
  const PlainSpec halves({{"H", "FP16", {2}}}, {"Y"}, 0);
  InferRequestReader reader;
  PlainRequest request;
  const std::string json = R"({"inputs":[{"name":"H","datatype":"FP16","shape":[2],"data":[1,2]}]})";
  ASSERT_TRUE(reader.Read(json.data(), json.size()));
  EXPECT_FALSE(ReadPlainRequest(reader, halves, {2}, json.size(), json.size(), 1 << 20, &request));
  const std::string binary = R"({"inputs":[{"name":"H","datatype":"FP16","shape":[2],)"
                             R"("parameters":{"binary_data_size":4}}]})";
  ASSERT_TRUE(reader.Read(binary.data(), binary.size()));
  EXPECT_TRUE(ReadPlainRequest(reader, halves, {2}, binary.size(), binary.size() + 4, 1 << 20,
                               &request));
  EXPECT_EQ(request.match.batch_size, 0);  // a model that does not batch
}

TEST(PlaceInput, BinaryDataOfExactlyItsSizeInsideTheBody) {
  RequestInput in;
  in.datatype = "FP32";
  in.parameters = ParamsState::kOne;
  in.binary_data_size = 16;
  PlainRequest::Input read;
  size_t offset = 100;
  ASSERT_TRUE(PlaceInput(in, 4, 4, 116, 1 << 20, &offset, &read));
  EXPECT_TRUE(read.binary);
  EXPECT_EQ(read.offset, 100u);
  EXPECT_EQ(offset, 116u);  // moved past it
  offset = 100;
  EXPECT_FALSE(PlaceInput(in, 4, 4, 115, 1 << 20, &offset, &read));  // past the body
  EXPECT_FALSE(PlaceInput(in, 3, 4, 200, 1 << 20, &offset, &read));  // another size
  EXPECT_FALSE(PlaceInput(in, SIZE_MAX / 2, 4, 200, 1 << 20, &offset, &read));  // overflows
  in.binary_data_size = -1;
  EXPECT_FALSE(PlaceInput(in, 0, 4, 200, 1 << 20, &offset, &read));
  offset = 201;
  in.binary_data_size = 0;
  EXPECT_FALSE(PlaceInput(in, 0, 4, 200, 1 << 20, &offset, &read));  // offset past the body
  EXPECT_EQ(offset, 201u);
}

TEST(PlaceInput, JsonDataOfAFilledTypeWithinTheLimit) {
  RequestInput in;
  in.datatype = "INT32";
  PlainRequest::Input read;
  size_t offset = 10;
  ASSERT_TRUE(PlaceInput(in, 8, 4, 10, 32, &offset, &read));
  EXPECT_FALSE(read.binary);
  EXPECT_EQ(read.kind, ElementKind::kInt32);
  EXPECT_EQ(offset, 10u);  // no binary data taken
  EXPECT_FALSE(PlaceInput(in, 9, 4, 10, 32, &offset, &read));  // over max_input_size
  in.datatype = "FP16";
  EXPECT_FALSE(PlaceInput(in, 1, 2, 10, 32, &offset, &read));  // FillData does not fill it
  EXPECT_FALSE(PlaceInput(in, 1, 0, 10, 32, &offset, &read));  // no element size
}

// A parsed ModelInferRequest of add_sub with `rows` rows, its raw contents of `bytes` each.
grpc::InferRequestView GrpcView(int64_t rows, size_t bytes, const std::string& raw) {
  grpc::InferRequestView view;
  for (const char* name : {"INPUT1", "INPUT0"}) {
    grpc::InputTensorView in;
    in.name = name;
    in.datatype = "FP32";
    in.shape = {rows, 4};
    view.inputs.push_back(in);
    view.raw_input_contents.push_back(std::string_view(raw.data(), bytes));
  }
  return view;
}

TEST(ReadPlainRequest, AGrpcRequestsRawContents) {
  const std::string raw(256, '\0');
  PlainRequest request;
  grpc::InferRequestView view = GrpcView(3, 48, raw);
  ASSERT_TRUE(ReadPlainRequest(view, kSpec, kItemsizes, &request));
  EXPECT_EQ(request.match.batch_size, 3);
  ASSERT_EQ(request.inputs.size(), 2u);
  EXPECT_EQ(request.inputs[0].index, 1);
  EXPECT_EQ(request.inputs[1].source, 1u);
  EXPECT_EQ(request.inputs[1].count, 12u);
  EXPECT_TRUE(request.inputs[1].binary);
  EXPECT_FALSE(request.outputs_named);
  ASSERT_EQ(request.outputs.size(), 2u);
  grpc::RequestedOutputView y;
  y.name = "OUTPUT1";
  view.outputs.push_back(y);
  ASSERT_TRUE(ReadPlainRequest(view, kSpec, kItemsizes, &request));
  EXPECT_TRUE(request.outputs_named);
  ASSERT_EQ(request.outputs.size(), 1u);
  EXPECT_EQ(request.outputs[0].index, 1);
}

TEST(ReadPlainRequest, WhatAGrpcReadDeclines) {
  const std::string raw(256, '\0');
  PlainRequest request;
  EXPECT_FALSE(ReadPlainRequest(GrpcView(3, 47, raw), kSpec, kItemsizes, &request));  // size
  grpc::InferRequestView view = GrpcView(3, 48, raw);
  view.raw_input_contents.pop_back();  // typed contents instead, say
  EXPECT_FALSE(ReadPlainRequest(view, kSpec, kItemsizes, &request));
  view = GrpcView(3, 48, raw);
  view.inputs[0].has_contents = true;
  EXPECT_FALSE(ReadPlainRequest(view, kSpec, kItemsizes, &request));
  view = GrpcView(3, 48, raw);
  view.inputs[1].parameters.emplace_back();
  EXPECT_FALSE(ReadPlainRequest(view, kSpec, kItemsizes, &request));
  view = GrpcView(3, 48, raw);
  grpc::RequestedOutputView y;
  y.name = "OUTPUT1";
  y.parameters.emplace_back();  // classification, say: the general path's
  view.outputs.push_back(y);
  EXPECT_FALSE(ReadPlainRequest(view, kSpec, kItemsizes, &request));
  EXPECT_FALSE(ReadPlainRequest(GrpcView(9, 144, raw), kSpec, kItemsizes, &request));  // rows
}

}  // namespace
}  // namespace pyserver::json
