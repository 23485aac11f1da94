// A plain KServe v2 infer request, read against its model's PlainSpec with
// no Python object: which of the model's inputs each tensor is, where its
// bytes are, and what the answer holds. Over HTTP from what the JSON reader
// read (binary data in the body, or the JSON "data" it fills), over gRPC
// from a parsed ModelInferRequest (raw_input_contents). The direct runs read
// their requests this way (engine/protocol/http_infer.pyx, grpc_codec.pyx),
// and so will the native request path (docs/ARCHITECTURE.md, "What
// follows"). Like the readers and the rules, it only says yes: whatever it
// declines goes to the general decoder, the one authority for every rule and
// error text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pyserver/plain_spec.h"
#include "pyserver/protocol/grpc_codec.h"
#include "pyserver/protocol/infer_request_reader.h"
#include "pyserver/protocol/json_writer.h"

namespace pyserver::json {

struct PlainRequest {
  struct Input {
    int index = 0;      // the model's input (PlainSpec order)
    size_t source = 0;  // the request's input it was read from (its shape; FillData; gRPC's
                        // raw_input_contents)
    size_t count = 0;   // elements
    bool binary = false;  // always over gRPC
    size_t offset = 0;  // HTTP binary: where its bytes start in the body (count * itemsize)
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

// Where the plain case takes an HTTP input's `count` elements of `itemsize`
// bytes from: its binary data (its binary_data_size bytes, exactly that
// many, at `*offset` of a body of `body_size` bytes; `*offset` moves past
// them) or its JSON "data" (a datatype FillData fills, at most
// `max_input_size` bytes). Sets `read`'s binary, offset or kind; false where
// neither holds. ReadPlainRequest and the general path's reader of plain
// requests (engine/protocol/http_infer.pyx) place inputs by it alike.
bool PlaceInput(const RequestInput& in, size_t count, size_t itemsize, size_t body_size,
                size_t max_input_size, size_t* offset, PlainRequest::Input* read);

// Reads what `reader` read of a request's JSON header (the body's first
// `header_size` of `body_size` bytes; binary data follows it) against
// `spec`. `itemsizes`: the byte size of an element of each of the model's
// inputs. False where the plain case ends: an input or output the rules
// decline, binary data of another size or past the body, bytes left over,
// JSON data of a type FillData does not take or over `max_input_size`.
bool ReadPlainRequest(const InferRequestReader& reader, const PlainSpec& spec,
                      const std::vector<size_t>& itemsizes, size_t header_size,
                      size_t body_size, size_t max_input_size, PlainRequest* out);

// The same of a parsed ModelInferRequest: every input's bytes in
// raw_input_contents, count * itemsize of them, and neither its
// parameters nor an output's (the request's own are the caller's to judge).
bool ReadPlainRequest(const grpc::InferRequestView& view, const PlainSpec& spec,
                      const std::vector<size_t>& itemsizes, PlainRequest* out);

}  // namespace pyserver::json
