// The common case of a KServe v2 HTTP infer request's JSON header, read
// with simdjson (engine/protocol/http_infer.pyx builds the request from it). It says
// yes only to what engine/protocol/http_codec.pyx's decoder would take to
// the same result with no error: inputs with flat numeric "data" or a
// binary_data_size, outputs asking at most for binary_data, request
// parameters at most binary_data_output. Anything else, duplicate keys
// included, is declined and the caller's general path (orjson) decides,
// with every rule and error text. It exists because that path builds a
// Python object for every number of the request (~25k instructions per
// add_sub request against ~5k here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "pyserver/protocol/json_writer.h"

namespace pyserver::json {

// A member's "parameters": absent (or null), {}, or the one key it may have.
enum class ParamsState { kAbsent, kEmpty, kOne };

struct RequestInput {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  ParamsState parameters = ParamsState::kAbsent;
  int64_t binary_data_size = -1;  // with kOne
  bool has_data = false;          // "data": a flat array of numbers
  size_t data_index = 0;          // which of the reader's arrays
};

struct RequestOutput {
  std::string_view name;
  ParamsState parameters = ParamsState::kAbsent;
  bool binary_data = false;  // with kOne
};

class InferRequestReader {
 public:
  InferRequestReader();
  ~InferRequestReader();

  // Reads `json`; false when it is not the common case (the views below
  // then mean nothing). What it gives stays valid until the next Read.
  bool Read(const char* json, size_t size);

  bool has_id() const { return has_id_; }
  std::string_view id() const { return id_; }
  ParamsState parameters() const { return parameters_; }
  bool binary_data_output() const { return binary_data_output_; }
  const std::vector<RequestInput>& inputs() const { return inputs_; }
  const std::vector<RequestOutput>& outputs() const { return outputs_; }

  // Writes input `i`'s "data" (`count` elements) at `dst` as `kind`
  // (kFloat32, kFloat64, kInt32, kInt64 or kUint8), converting as numpy
  // does an int64 or float64 array of the same JSON values (what the
  // general path, numpy over orjson's lists, gives). False when the values
  // are not exactly `count` plain numbers it can take that way
  // (bools, nesting, integers beyond int64, a float in an integer tensor, a
  // negative UINT8): the caller declines.
  bool FillData(size_t i, ElementKind kind, void* dst, size_t count) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool has_id_ = false;
  std::string_view id_;
  ParamsState parameters_ = ParamsState::kAbsent;
  bool binary_data_output_ = false;
  std::vector<RequestInput> inputs_;
  std::vector<RequestOutput> outputs_;
};

// This thread's reader (its parser's buffers are reused request to request).
InferRequestReader& ThreadInferRequestReader();

}  // namespace pyserver::json
