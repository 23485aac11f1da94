#include "pyserver/protocol/infer_request_reader.h"

#include <simdjson.h>

#include <cstring>

namespace pyserver::json {

using simdjson::dom::element;
using simdjson::dom::element_type;

struct InferRequestReader::Impl {
  simdjson::dom::parser parser;
  std::vector<simdjson::dom::array> data;  // each input's "data"
};

namespace {

// A "parameters" member that may be null, {} or exactly {`key`: value}
// with `value` of `type`; false for anything else.
bool ReadParams(element value, std::string_view key, element_type type, ParamsState* state,
                element* one) {
  if (value.type() == element_type::NULL_VALUE) {
    *state = ParamsState::kAbsent;
    return true;
  }
  simdjson::dom::object obj;
  if (value.get_object().get(obj)) return false;
  const size_t n = obj.size();
  if (n == 0) {
    *state = ParamsState::kEmpty;
    return true;
  }
  if (n != 1) return false;
  auto field = *obj.begin();
  if (field.key != key || field.value.type() != type) return false;
  *state = ParamsState::kOne;
  *one = field.value;
  return true;
}

bool ReadInput(element item, RequestInput* input, std::vector<simdjson::dom::array>* data) {
  simdjson::dom::object obj;
  if (item.get_object().get(obj)) return false;
  bool seen_name = false, seen_type = false, seen_shape = false, seen_params = false,
       seen_data = false;
  for (auto field : obj) {
    const std::string_view key = field.key;
    element value = field.value;
    if (key == "name") {
      if (seen_name || value.get_string().get(input->name)) return false;
      seen_name = true;
    } else if (key == "datatype") {
      if (seen_type || value.get_string().get(input->datatype)) return false;
      seen_type = true;
    } else if (key == "shape") {
      simdjson::dom::array dims;
      if (seen_shape || value.get_array().get(dims)) return false;
      seen_shape = true;
      for (element dim : dims) {
        if (dim.type() != element_type::INT64) return false;  // bools, floats, > int64
        const int64_t d = dim.get_int64().value_unsafe();
        if (d < 0) return false;
        input->shape.push_back(d);
      }
    } else if (key == "parameters") {
      element size;
      if (seen_params ||
          !ReadParams(value, "binary_data_size", element_type::INT64, &input->parameters, &size)) {
        return false;
      }
      seen_params = true;
      if (input->parameters == ParamsState::kOne) {
        input->binary_data_size = size.get_int64().value_unsafe();
        if (input->binary_data_size < 0) return false;
      }
    } else if (key == "data") {
      simdjson::dom::array values;
      if (seen_data || value.get_array().get(values)) return false;
      seen_data = true;
      input->has_data = true;
      input->data_index = data->size();
      data->push_back(values);
    }  // other members: the general path ignores them too
  }
  // name, datatype and shape given; exactly one of data and a binary size
  return seen_name && seen_type && seen_shape &&
         input->has_data != (input->parameters == ParamsState::kOne);
}

bool ReadOutput(element item, RequestOutput* output) {
  simdjson::dom::object obj;
  if (item.get_object().get(obj)) return false;
  bool seen_name = false, seen_params = false;
  for (auto field : obj) {
    const std::string_view key = field.key;
    if (key == "name") {
      if (seen_name || field.value.get_string().get(output->name)) return false;
      seen_name = true;
    } else if (key == "parameters") {
      element flag;
      if (seen_params ||
          !ReadParams(field.value, "binary_data", element_type::BOOL, &output->parameters, &flag)) {
        return false;
      }
      seen_params = true;
      if (output->parameters == ParamsState::kOne) output->binary_data = flag.get_bool().value_unsafe();
    }
  }
  return seen_name;
}

template <typename T>
void Store(void* dst, size_t i, T v) {
  std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

InferRequestReader::InferRequestReader() : impl_(new Impl) {}
InferRequestReader::~InferRequestReader() = default;

bool InferRequestReader::Read(const char* json, size_t size) {
  has_id_ = false;
  id_ = {};
  parameters_ = ParamsState::kAbsent;
  binary_data_output_ = false;
  inputs_.clear();
  outputs_.clear();
  impl_->data.clear();
  element doc;
  if (impl_->parser.parse(json, size).get(doc)) return false;  // not JSON: the general path says so
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) return false;
  bool seen_inputs = false, seen_outputs = false, seen_params = false;
  for (auto field : obj) {
    const std::string_view key = field.key;
    element value = field.value;
    if (key == "id") {
      if (has_id_ || value.get_string().get(id_)) return false;
      has_id_ = true;
    } else if (key == "parameters") {
      element flag;
      if (seen_params ||
          !ReadParams(value, "binary_data_output", element_type::BOOL, &parameters_, &flag)) {
        return false;
      }
      seen_params = true;
      if (parameters_ == ParamsState::kOne) binary_data_output_ = flag.get_bool().value_unsafe();
    } else if (key == "inputs") {
      simdjson::dom::array items;
      if (seen_inputs || value.get_array().get(items)) return false;
      seen_inputs = true;
      for (element item : items) {
        inputs_.emplace_back();
        if (!ReadInput(item, &inputs_.back(), &impl_->data)) return false;
      }
    } else if (key == "outputs") {
      if (seen_outputs) return false;
      seen_outputs = true;
      if (value.type() == element_type::NULL_VALUE) continue;
      simdjson::dom::array items;
      if (value.get_array().get(items)) return false;
      for (element item : items) {
        outputs_.emplace_back();
        if (!ReadOutput(item, &outputs_.back())) return false;
      }
    }
  }
  return seen_inputs;
}

bool InferRequestReader::FillData(size_t i, ElementKind kind, void* dst, size_t count) const {
  if (i >= inputs_.size() || !inputs_[i].has_data) return false;
  const simdjson::dom::array& values = impl_->data[inputs_[i].data_index];
  if (values.size() != count) return false;
  bool any_float = false;
  for (element v : values) {
    const element_type t = v.type();
    if (t == element_type::DOUBLE) {
      any_float = true;
    } else if (t != element_type::INT64) {
      return false;  // bools, strings, nesting, integers beyond int64
    }
  }
  const bool to_float = kind == ElementKind::kFloat32 || kind == ElementKind::kFloat64;
  if (any_float && !to_float) return false;  // a float in an integer tensor
  size_t j = 0;
  for (element v : values) {
    if (v.type() == element_type::DOUBLE) {
      const double d = v.get_double().value_unsafe();
      if (kind == ElementKind::kFloat32) {
        Store(dst, j, static_cast<float>(d));
      } else {
        Store(dst, j, d);
      }
      ++j;
      continue;
    }
    const int64_t n = v.get_int64().value_unsafe();
    switch (kind) {
      case ElementKind::kFloat32:
        // numpy: all ints make an int64 array cast to float32; with a float
        // among them, a float64 array first
        Store(dst, j, any_float ? static_cast<float>(static_cast<double>(n))
                                : static_cast<float>(n));
        break;
      case ElementKind::kFloat64: Store(dst, j, static_cast<double>(n)); break;
      case ElementKind::kInt32: Store(dst, j, static_cast<int32_t>(n)); break;
      case ElementKind::kInt64: Store(dst, j, n); break;
      case ElementKind::kUint8:
        if (n < 0) return false;  // negative for unsigned: the general path's error
        Store(dst, j, static_cast<uint8_t>(n));
        break;
      default: return false;
    }
    ++j;
  }
  return true;
}

InferRequestReader& ThreadInferRequestReader() {
  thread_local InferRequestReader reader;
  return reader;
}

}  // namespace pyserver::json
