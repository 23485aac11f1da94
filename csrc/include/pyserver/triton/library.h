// A backend shared library built for Triton's C API (libtriton_NAME.so):
// opened once per path, its entry points looked up, TRITONBACKEND_Initialize
// called once; models and instances made over it. Called by
// engine/triton_c.pyx; Execute is called with the GIL released.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pyserver/status.h"
#include "pyserver/triton/objects.h"

namespace pyserver::triton {

// A status from a backend's error object (deleting it), Ok for nullptr.
Status FromError(TRITONSERVER_Error* error);

// Makes libtritonserver.so's symbols global, once: a library built for
// Triton links it by soname and finds what it calls here. Call before
// opening such a library.
Status ExportServerSymbols();

class BackendLibrary {
 public:
  // Opens libtritonserver.so (this library) RTLD_GLOBAL first, so the
  // backend's undefined TRITONBACKEND_*/TRITONSERVER_* resolve to ours.
  static Status Create(const std::string& path, const std::string& name,
                       const std::string& config_json, std::unique_ptr<BackendLibrary>* out);
  ~BackendLibrary();  // TRITONBACKEND_Finalize, dlclose
  TRITONBACKEND_Backend* backend() { return &backend_; }

 private:
  BackendLibrary() = default;
  void* handle_ = nullptr;
  bool initialized_ = false;
  TRITONBACKEND_Backend backend_;
};

class Model {
 public:
  // TRITONBACKEND_ModelInitialize; the config it may have set is config_json().
  static Status Create(BackendLibrary* library, const std::string& name, uint64_t version,
                       const std::string& repository, const std::string& config_json,
                       bool auto_complete, std::unique_ptr<Model>* out);
  ~Model();  // TRITONBACKEND_ModelFinalize
  TRITONBACKEND_Model* model() { return &model_; }
  const std::string& config_json() const { return model_.config_json; }
  std::vector<MemoryUsage::Entry> memory_usage() const { return model_.memory_usage.Snapshot(); }

 private:
  Model() = default;
  bool initialized_ = false;
  TRITONBACKEND_Model model_;
};

class Instance {
 public:
  // host_policy_json: TRITONBACKEND_ModelInstanceHostPolicy's message,
  // {"<policy name>": {"<setting>": "<value>", ...}}, as the server named
  // the instance's policy (runtime/host_policy.py).
  static Status Create(Model* model, const std::string& name, int kind, int32_t device_id,
                       const std::string& host_policy_json, std::unique_ptr<Instance>* out);
  ~Instance();  // TRITONBACKEND_ModelInstanceFinalize
  // TRITONBACKEND_ModelInstanceExecute over the batch. On an error the
  // backend returned, the requests are still ours (Triton's rule): the
  // caller fails them all. *reported: the times the backend reported for
  // the batch, zero where it reported none.
  Status Execute(std::vector<TRITONBACKEND_Request*>& requests, BatchTimes* reported);
  // TRITONBACKEND_ModelInstanceReady, which a backend may export: whether
  // the instance can serve now (OK when the backend has no such check).
  bool has_ready_check() const;
  Status Ready();
  // Where the backend's per-response reports go (its model's statistics).
  void SetStats(std::shared_ptr<ModelStats> stats) { instance_.stats = std::move(stats); }
  std::vector<MemoryUsage::Entry> memory_usage() const {
    return instance_.memory_usage.Snapshot();
  }

 private:
  Instance() = default;
  bool initialized_ = false;
  TRITONBACKEND_ModelInstance instance_;
};

}  // namespace pyserver::triton
