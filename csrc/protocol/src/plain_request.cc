#include "pyserver/protocol/plain_request.h"

namespace pyserver::json {

namespace {

// A fresh read of a request of `n` inputs; false where their count is not the model's.
bool Start(const PlainSpec& spec, const std::vector<size_t>& itemsizes, size_t n,
           PlainRequest* out) {
  out->match = PlainSpec::Match();
  out->inputs.clear();
  out->outputs.clear();
  out->outputs_named = false;
  if (n == 0 || n != spec.inputs().size() || itemsizes.size() != n) return false;
  out->inputs.reserve(n);  // one allocation each (a record is made per request)
  out->outputs.reserve(spec.outputs().size());
  return true;
}

// The request's input `source` matched against the rules, its elements
// counted; false where the rules decline it or its elements have no size.
bool ReadInput(const PlainSpec& spec, const std::vector<size_t>& itemsizes, size_t source,
               std::string_view name, std::string_view datatype,
               const std::vector<int64_t>& shape, PlainRequest* out,
               PlainRequest::Input* read, size_t* itemsize) {
  const int k = spec.MatchInput(name, datatype, shape.data(), shape.size(), &out->match);
  if (k < 0) return false;
  read->index = k;
  read->source = source;
  // the rules fixed every dim and bounded the batch: no overflow here
  read->count = 1;
  for (int64_t d : shape) read->count *= static_cast<size_t>(d);
  *itemsize = itemsizes[static_cast<size_t>(k)];
  return *itemsize != 0;
}

// Every output of the model, for a request that named none.
void AllOutputs(const PlainSpec& spec, bool binary, PlainRequest* out) {
  for (size_t k = 0; k < spec.outputs().size(); ++k) {
    PlainRequest::Output all;
    all.index = static_cast<int>(k);
    all.binary = binary;
    out->outputs.push_back(all);
  }
}

}  // namespace

bool FillKindOf(std::string_view datatype, ElementKind* kind) {
  if (datatype == "FP32") {
    *kind = ElementKind::kFloat32;
  } else if (datatype == "FP64") {
    *kind = ElementKind::kFloat64;
  } else if (datatype == "INT32") {
    *kind = ElementKind::kInt32;
  } else if (datatype == "INT64") {
    *kind = ElementKind::kInt64;
  } else if (datatype == "UINT8") {
    *kind = ElementKind::kUint8;
  } else {
    return false;
  }
  return true;
}

bool PlaceInput(const RequestInput& in, size_t count, size_t itemsize, size_t body_size,
                size_t max_input_size, size_t* offset, PlainRequest::Input* read) {
  if (itemsize == 0 || *offset > body_size) return false;
  if (in.parameters == ParamsState::kOne) {  // binary_data_size
    const size_t size = static_cast<size_t>(in.binary_data_size);
    if (in.binary_data_size < 0 || count > SIZE_MAX / itemsize || size != count * itemsize ||
        size > body_size - *offset) {
      return false;
    }
    read->binary = true;
    read->offset = *offset;
    *offset += size;
    return true;
  }
  return FillKindOf(in.datatype, &read->kind) && count <= max_input_size / itemsize;
}

bool ReadPlainRequest(const InferRequestReader& reader, const PlainSpec& spec,
                      const std::vector<size_t>& itemsizes, size_t header_size,
                      size_t body_size, size_t max_input_size, PlainRequest* out) {
  const std::vector<RequestInput>& inputs = reader.inputs();
  if (!Start(spec, itemsizes, inputs.size(), out) || header_size > body_size) return false;
  size_t offset = header_size;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const RequestInput& in = inputs[i];
    PlainRequest::Input read;
    size_t itemsize = 0;
    if (!ReadInput(spec, itemsizes, i, in.name, in.datatype, in.shape, out, &read, &itemsize)) {
      return false;
    }
    if (!PlaceInput(in, read.count, itemsize, body_size, max_input_size, &offset, &read)) {
      return false;
    }
    out->inputs.push_back(read);
  }
  if (offset != body_size) return false;
  const bool default_binary =
      reader.parameters() == ParamsState::kOne && reader.binary_data_output();
  for (const RequestOutput& o : reader.outputs()) {
    PlainRequest::Output wanted;
    wanted.index = spec.MatchOutput(o.name, &out->match);
    if (wanted.index < 0) return false;
    if (o.parameters == ParamsState::kOne) {
      wanted.binary = o.binary_data;
      wanted.asked = PlainRequest::Asked::kFlag;
    } else if (o.parameters == ParamsState::kEmpty) {  // parameters {}: JSON data
      wanted.asked = PlainRequest::Asked::kEmpty;
    } else {
      wanted.binary = default_binary;
    }
    out->outputs.push_back(wanted);
  }
  out->outputs_named = !out->outputs.empty();
  if (!out->outputs_named) AllOutputs(spec, default_binary, out);
  return true;
}

bool ReadPlainRequest(const grpc::InferRequestView& view, const PlainSpec& spec,
                      const std::vector<size_t>& itemsizes, PlainRequest* out) {
  const size_t n = view.inputs.size();
  if (!Start(spec, itemsizes, n, out) || view.raw_input_contents.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    const grpc::InputTensorView& in = view.inputs[i];
    if (in.has_contents || !in.parameters.empty()) return false;
    PlainRequest::Input read;
    size_t itemsize = 0;
    if (!ReadInput(spec, itemsizes, i, in.name, in.datatype, in.shape, out, &read, &itemsize) ||
        view.raw_input_contents[i].size() != read.count * itemsize) {
      return false;
    }
    read.binary = true;
    out->inputs.push_back(read);
  }
  for (const grpc::RequestedOutputView& o : view.outputs) {
    if (!o.parameters.empty()) return false;
    PlainRequest::Output wanted;
    wanted.index = spec.MatchOutput(o.name, &out->match);
    if (wanted.index < 0) return false;
    wanted.binary = true;
    out->outputs.push_back(wanted);
  }
  out->outputs_named = !out->outputs.empty();
  if (!out->outputs_named) AllOutputs(spec, true, out);
  return true;
}

}  // namespace pyserver::json
