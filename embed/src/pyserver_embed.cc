// The C++ embedding API over pybind11's embedded interpreter: each call
// takes the GIL, converts, and calls pyserver.embedded.EmbeddedServer.
#include "pyserver_embed.h"

#include <pybind11/embed.h>
#include <pybind11/stl.h>

#include <mutex>

namespace py = pybind11;

namespace pyserver_embed {

namespace {

std::once_flag g_interpreter_once;

// The interpreter lives until the process exits: the server's event loop
// and instance threads are Python threads, and finalizing under them hangs.
void EnsureInterpreter() {
  std::call_once(g_interpreter_once, [] {
    if (!Py_IsInitialized()) {
      py::initialize_interpreter();
      // Hand the GIL back: every call below takes it when it needs it, and
      // the server's own threads need it in between.
      PyEval_SaveThread();
    }
  });
}

}  // namespace

struct Server::Impl {
  py::object server;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Server> Server::Start(const std::string& model_repository, std::string* error) {
  EnsureInterpreter();
  py::gil_scoped_acquire gil;
  try {
    py::object cls = py::module_::import("pyserver.embedded").attr("EmbeddedServer");
    auto impl = std::make_unique<Impl>();
    impl->server = cls(model_repository);
    return std::unique_ptr<Server>(new Server(std::move(impl)));
  } catch (const py::error_already_set& e) {
    if (error != nullptr) *error = e.what();
    return nullptr;
  }
}

Server::~Server() {
  py::gil_scoped_acquire gil;
  try {
    impl_->server.attr("close")();
  } catch (const py::error_already_set&) {
    // Stopping is best effort; nothing to report to a destructor's caller.
  }
  impl_->server = py::object();
}

bool Server::Infer(const std::string& model, const Tensors& inputs, Tensors* outputs,
                   std::string* error, const std::string& version) {
  py::gil_scoped_acquire gil;
  try {
    py::dict args;
    for (const auto& [name, t] : inputs) {
      args[py::str(name)] = py::make_tuple(t.datatype, py::cast(t.shape), py::bytes(t.data));
    }
    py::dict result = impl_->server.attr("infer_raw")(model, args, version);
    outputs->clear();
    for (auto item : result) {
      py::tuple value = item.second.cast<py::tuple>();
      Tensor t;
      t.datatype = value[0].cast<std::string>();
      t.shape = value[1].cast<std::vector<int64_t>>();
      t.data = value[2].cast<std::string>();
      (*outputs)[item.first.cast<std::string>()] = std::move(t);
    }
    return true;
  } catch (const py::error_already_set& e) {
    if (error != nullptr) {
      // ServerError's text is Triton's message; keep just that.
      *error = py::str(e.value()).cast<std::string>();
    }
    return false;
  }
}

bool Server::ModelReady(const std::string& model, const std::string& version) {
  py::gil_scoped_acquire gil;
  try {
    return impl_->server.attr("model_ready")(model, version).cast<bool>();
  } catch (const py::error_already_set&) {
    return false;
  }
}

}  // namespace pyserver_embed
