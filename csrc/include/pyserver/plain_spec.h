// PlainSpec: the plain case of a request against its model, the rules a
// request's inputs and requested outputs must meet to take the common path
// with no further check. It only says yes: a request it declines goes to
// the server's general walk (pyserver/model, engine/request_path.pyx), the
// one authority for every error and its text.
//
// A model has one when every input has fixed dims, no reshape and is
// required (the request path decides). The rules: each input named once and
// the model's, with its datatype and its dims, after a batch dimension in
// 1..max_batch_size, the same for every input, when the model batches; each
// requested output named once and the model's. Callers match what their
// readers parsed (views, no Python object), on any thread: the object is
// immutable once made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pyserver {

class PlainSpec {
 public:
  // Readers keep a bit per input and per output: a model with more of
  // either has no plain case (every match declines).
  static constexpr size_t kMaxNamed = 64;

  struct Input {
    std::string name;
    std::string datatype;      // Triton's wire name: "FP32", "INT64", ...
    std::vector<int64_t> dims;  // without the batch dimension
  };

  // What one request has matched so far; a fresh one per request.
  struct Match {
    int64_t batch_size = 0;  // set by its first input; 0 for a model that does not batch
    uint64_t inputs_seen = 0;  // a bit per input, by index
    uint64_t outputs_seen = 0;  // a bit per output, by index
  };

  // `outputs`: every output's name; both in the config's order.
  // `max_batch_size`: the model's (0: it does not batch).
  PlainSpec(std::vector<Input> inputs, std::vector<std::string> outputs, uint32_t max_batch_size);

  // One input as read (`shape` of `ndim` dims): its index among the model's
  // inputs, or -1 where it is not the model's, came before in this request,
  // or has another datatype or shape.
  int MatchInput(std::string_view name, std::string_view datatype, const int64_t* shape,
                 size_t ndim, Match* match) const;
  // One requested output: its index, or -1 where it is not the model's or
  // was asked for before in this request.
  int MatchOutput(std::string_view name, Match* match) const;

  const std::vector<Input>& inputs() const { return inputs_; }
  const std::vector<std::string>& outputs() const { return outputs_; }
  bool batching() const { return max_batch_size_ > 0; }
  uint32_t max_batch_size() const { return max_batch_size_; }

 private:
  bool ShapeFits(const Input& spec, const int64_t* shape, size_t ndim, bool first,
                 int64_t* batch_size) const;

  const std::vector<Input> inputs_;
  const std::vector<std::string> outputs_;
  const uint32_t max_batch_size_;
};

}  // namespace pyserver
