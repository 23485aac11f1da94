#include "pyserver/protocol/plain_request.h"

namespace pyserver::json {

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

bool ReadPlainRequest(const InferRequestReader& reader, const PlainSpec& spec,
                      const std::vector<size_t>& itemsizes, size_t header_size,
                      size_t body_size, size_t max_input_size, PlainRequest* out) {
  const std::vector<RequestInput>& inputs = reader.inputs();
  if (inputs.empty() || inputs.size() != spec.inputs().size() ||
      itemsizes.size() != spec.inputs().size() || header_size > body_size) {
    return false;
  }
  out->match = PlainSpec::Match();
  out->inputs.clear();
  out->outputs.clear();
  size_t offset = header_size;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const RequestInput& in = inputs[i];
    const int k = spec.MatchInput(in.name, in.datatype, in.shape.data(), in.shape.size(),
                                  &out->match);
    if (k < 0) return false;
    PlainRequest::Input read;
    read.index = k;
    read.source = i;
    // the rules fixed every dim and bounded the batch: no overflow here
    read.count = 1;
    for (int64_t d : in.shape) read.count *= static_cast<size_t>(d);
    const size_t itemsize = itemsizes[static_cast<size_t>(k)];
    if (itemsize == 0) return false;
    if (in.parameters == ParamsState::kOne) {  // binary_data_size
      const size_t size = static_cast<size_t>(in.binary_data_size);
      if (in.binary_data_size < 0 || size != read.count * itemsize ||
          size > body_size - offset) {
        return false;
      }
      read.binary = true;
      read.offset = offset;
      offset += size;
    } else if (!FillKindOf(in.datatype, &read.kind) || read.count > max_input_size / itemsize) {
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
  if (!out->outputs_named) {
    for (size_t k = 0; k < spec.outputs().size(); ++k) {
      PlainRequest::Output all;
      all.index = static_cast<int>(k);
      all.binary = default_binary;
      out->outputs.push_back(all);
    }
  }
  return true;
}

}  // namespace pyserver::json
