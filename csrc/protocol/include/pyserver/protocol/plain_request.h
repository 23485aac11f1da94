// A plain KServe v2 HTTP infer request, read against its model's PlainSpec
// with no Python object: which of the model's inputs each tensor is, where
// its bytes are (binary data in the body, or the JSON "data" the reader
// fills), and what the answer holds. The direct runs read their requests
// this way (engine/protocol/http_infer.pyx), and so will the native request
// path (docs/ARCHITECTURE.md, "What follows"). Like the reader and the
// rules, it only says yes: whatever it declines goes to the general decoder,
// the one authority for every rule and error text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pyserver/plain_spec.h"
#include "pyserver/protocol/infer_request_reader.h"
#include "pyserver/protocol/json_writer.h"

namespace pyserver::json {

struct PlainRequest {
  struct Input {
    int index = 0;      // the model's input (PlainSpec order)
    size_t source = 0;  // the reader's input it was read from (its shape, FillData)
    size_t count = 0;   // elements
    bool binary = false;
    size_t offset = 0;  // binary: where its bytes start in the body (count * itemsize of them)
    ElementKind kind = ElementKind::kFloat32;  // JSON: what FillData writes
  };
  // How a requested output asked for its data: not at all (the request's
  // default), "parameters": {} (JSON), or a binary_data flag.
  enum class Asked : uint8_t { kDefault, kEmpty, kFlag };
  struct Output {
    int index = 0;  // the model's output
    bool binary = false;
    Asked asked = Asked::kDefault;
  };

  PlainSpec::Match match;       // its batch size among the rest
  std::vector<Input> inputs;    // in the request's order
  std::vector<Output> outputs;  // the answer's, in order: those named, else all of the model's
  bool outputs_named = false;
};

// The element kind FillData writes a JSON "data" input of `datatype` as;
// false for the datatypes it does not fill.
bool FillKindOf(std::string_view datatype, ElementKind* kind);

// Reads what `reader` read of a request's JSON header (the body's first
// `header_size` of `body_size` bytes; binary data follows it) against
// `spec`. `itemsizes`: the byte size of an element of each of the model's
// inputs. False where the plain case ends: an input or output the rules
// decline, binary data of another size or past the body, bytes left over,
// JSON data of a type FillData does not take or over `max_input_size`.
bool ReadPlainRequest(const InferRequestReader& reader, const PlainSpec& spec,
                      const std::vector<size_t>& itemsizes, size_t header_size,
                      size_t body_size, size_t max_input_size, PlainRequest* out);

}  // namespace pyserver::json
