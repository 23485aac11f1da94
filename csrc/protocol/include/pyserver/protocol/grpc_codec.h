// gRPC inference codec: inference.ModelInferRequest from its protobuf wire
// bytes into views (no copies), and inference.ModelInferResponse /
// ModelStreamInferResponse written straight from views of the outputs.
//
// Only the messages on the per-request path are handled here; every other
// message of the service goes through the protobuf library in Python. The
// wire format is protobuf's (varints, length-delimited fields, packed or
// unpacked repeated scalars, unknown fields skipped), so any conforming
// client's bytes parse, whatever the field order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pyserver/status.h"

namespace pyserver {
namespace grpc {

// One map<string, InferParameter> entry. `kind` says which member is set
// (the oneof's field number; kNone when the value is empty).
struct Parameter {
  enum class Kind : uint8_t {
    kNone = 0,
    kBool = 1,
    kInt64 = 2,
    kString = 3,
    kDouble = 4,
    kUint64 = 5,
  };
  std::string_view key;
  Kind kind = Kind::kNone;
  bool bool_value = false;
  int64_t int64_value = 0;
  uint64_t uint64_value = 0;
  double double_value = 0;
  std::string_view string_value;
};

struct InputTensorView {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  std::vector<Parameter> parameters;
  // Serialized InferTensorContents (typed contents, rare: decoded by the
  // caller). A field that repeats is merged, as protobuf does, by
  // concatenating its occurrences, hence an owned string.
  bool has_contents = false;
  std::string contents;
};

struct RequestedOutputView {
  std::string_view name;
  std::vector<Parameter> parameters;
};

// A parsed ModelInferRequest; every view points into the parsed buffer,
// which must outlive it.
struct InferRequestView {
  std::string_view model_name;
  std::string_view model_version;
  std::string_view id;
  std::vector<Parameter> parameters;
  std::vector<InputTensorView> inputs;
  std::vector<RequestedOutputView> outputs;
  std::vector<std::string_view> raw_input_contents;

  void Clear();
};

// Parses a serialized inference.ModelInferRequest. On a malformed message
// returns INVALID_ARG and leaves `out` partly filled.
Status ParseModelInferRequest(const uint8_t* data, size_t size, InferRequestView* out);

struct OutputTensorView {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  std::vector<Parameter> parameters;
  const uint8_t* raw = nullptr;  // the tensor's bytes (raw_output_contents)
  size_t raw_size = 0;
};

struct InferResponseView {
  std::string_view model_name;
  std::string_view model_version;
  std::string_view id;
  std::vector<Parameter> parameters;
  std::vector<OutputTensorView> outputs;
};

// Serialized size of the ModelInferResponse `response` describes.
size_t ModelInferResponseSize(const InferResponseView& response);

// Writes it at `out` (ModelInferResponseSize bytes of room); returns the
// number of bytes written. Pure copying: safe without the GIL.
size_t WriteModelInferResponse(const InferResponseView& response, uint8_t* out);

// ModelStreamInferResponse{error_message = 1, infer_response = 2}: the size
// and the bytes that go before an embedded ModelInferResponse of
// `infer_size` bytes (has_infer: whether field 2 is present at all).
size_t StreamResponsePrefixSize(std::string_view error, size_t infer_size, bool has_infer);
size_t WriteStreamResponsePrefix(std::string_view error, size_t infer_size, bool has_infer,
                                 uint8_t* out);

// Length of `v` as a protobuf varint.
size_t VarintSize(uint64_t v);

// ---- gRPC over HTTP/2 header values ------------------------------------------

// A grpc-timeout value (1 to 8 digits and a unit: H M S m u n) in
// microseconds, rounded up; -1 when malformed.
int64_t ParseGrpcTimeoutUs(std::string_view value);

// grpc-message's percent-encoding: bytes outside printable ASCII (0x20 to
// 0x7E) and '%' itself become %XX.
std::string PercentEncode(std::string_view message);

}  // namespace grpc
}  // namespace pyserver
