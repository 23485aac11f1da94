// pyserver inside a C++ program, with no network.
//
// Server::Start brings up a Python interpreter in this process (once; it is
// never finalized, since the server's threads live until exit) and starts
// pyserver on a model repository: models load as with `python -m pyserver`,
// and Infer runs requests through the same schedulers, batching and
// statistics as network requests. Python finds pyserver, numpy and the
// backends through PYTHONPATH (the project's .venv site-packages and the
// source folder: `make test-embed` shows how).
//
// Thread-safe: Infer may be called from many threads at once; concurrent
// requests are batched together like network ones.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

// The library hides everything (pybind11 builds with hidden visibility)
// but this API.
#define PYSERVER_EMBED_API __attribute__((visibility("default")))

namespace pyserver_embed {

// A tensor as Triton's wire protocol has it: datatype ("FP32", "INT64",
// "BYTES", ...), shape, and raw bytes (BYTES: 4-byte little-endian length
// before each element).
struct Tensor {
  std::string datatype;
  std::vector<int64_t> shape;
  std::string data;
};

using Tensors = std::map<std::string, Tensor>;

class PYSERVER_EMBED_API Server {
 public:
  // nullptr on failure, with the reason (e.g. a model that failed to load)
  // in *error.
  static std::unique_ptr<Server> Start(const std::string& model_repository, std::string* error);
  ~Server();  // stops the server
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // False with Triton's error text in *error (unknown model, bad input, a
  // model's own failure).
  bool Infer(const std::string& model, const Tensors& inputs, Tensors* outputs,
             std::string* error, const std::string& version = "");
  bool ModelReady(const std::string& model, const std::string& version = "");

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pyserver_embed
