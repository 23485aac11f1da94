#include "pyserver/triton/library.h"

#include <dlfcn.h>

namespace pyserver::triton {

Status FromError(TRITONSERVER_Error* error) {
  if (error == nullptr) return Status::Ok();
  Status status(static_cast<StatusCode>(static_cast<int>(error->code) + 1), error->message);
  delete error;
  return status;
}

namespace {

template <typename Fn>
void Lookup(void* handle, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

}  // namespace

// Makes this library's symbols global, once: a backend links
// libtritonserver.so by soname and finds what it calls here.
Status ExportServerSymbols() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&FromError), &info) == 0 || info.dli_fname == nullptr) {
    return Status(StatusCode::kInternal, "cannot locate libtritonserver.so");
  }
  if (dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == nullptr &&
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    return Status(StatusCode::kInternal, std::string("cannot open ") + info.dli_fname);
  }
  return Status::Ok();
}

Status BackendLibrary::Create(const std::string& path, const std::string& name,
                              const std::string& config_json,
                              std::unique_ptr<BackendLibrary>* out) {
  PYSERVER_RETURN_IF_ERROR(ExportServerSymbols());
  std::unique_ptr<BackendLibrary> lib(new BackendLibrary());
  lib->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* why = dlerror();
    return Status(StatusCode::kNotFound, "unable to load backend library: " +
                                             std::string(why ? why : path));
  }
  size_t slash = path.find_last_of('/');
  lib->backend_.location = slash == std::string::npos ? "." : path.substr(0, slash);
  EntryPoints& e = lib->backend_.entry;
  Lookup(lib->handle_, "TRITONBACKEND_Initialize", &e.initialize);
  Lookup(lib->handle_, "TRITONBACKEND_Finalize", &e.finalize);
  Lookup(lib->handle_, "TRITONBACKEND_ModelInitialize", &e.model_initialize);
  Lookup(lib->handle_, "TRITONBACKEND_ModelFinalize", &e.model_finalize);
  Lookup(lib->handle_, "TRITONBACKEND_ModelInstanceInitialize", &e.instance_initialize);
  Lookup(lib->handle_, "TRITONBACKEND_ModelInstanceFinalize", &e.instance_finalize);
  Lookup(lib->handle_, "TRITONBACKEND_ModelInstanceExecute", &e.execute);
  Lookup(lib->handle_, "TRITONBACKEND_ModelInstanceReady", &e.instance_ready);
  if (e.execute == nullptr) {
    return Status(StatusCode::kNotFound,
                  "unable to find required entrypoint 'TRITONBACKEND_ModelInstanceExecute' "
                  "in backend library: " + path);
  }
  lib->backend_.name = name;
  lib->backend_.config.json = config_json;
  if (e.initialize != nullptr) {
    PYSERVER_RETURN_IF_ERROR(FromError(e.initialize(&lib->backend_)));
  }
  lib->initialized_ = true;
  *out = std::move(lib);
  return Status::Ok();
}

BackendLibrary::~BackendLibrary() {
  if (initialized_ && backend_.entry.finalize != nullptr) {
    FromError(backend_.entry.finalize(&backend_));
  }
  if (handle_ != nullptr) dlclose(handle_);
}

Status Model::Create(BackendLibrary* library, const std::string& name, uint64_t version,
                     const std::string& repository, const std::string& config_json,
                     bool auto_complete, std::unique_ptr<Model>* out) {
  std::unique_ptr<Model> model(new Model());
  TRITONBACKEND_Model& m = model->model_;
  m.backend = library->backend();
  m.name = name;
  m.version = version;
  m.repository = repository;
  m.config_json = config_json;
  m.auto_complete = auto_complete;
  if (m.backend->entry.model_initialize != nullptr) {
    PYSERVER_RETURN_IF_ERROR(FromError(m.backend->entry.model_initialize(&m)));
  }
  model->initialized_ = true;
  *out = std::move(model);
  return Status::Ok();
}

Model::~Model() {
  if (initialized_ && model_.backend->entry.model_finalize != nullptr) {
    FromError(model_.backend->entry.model_finalize(&model_));
  }
}

Status Instance::Create(Model* model, const std::string& name, int kind, int32_t device_id,
                        const std::string& host_policy_json, std::unique_ptr<Instance>* out) {
  std::unique_ptr<Instance> instance(new Instance());
  TRITONBACKEND_ModelInstance& i = instance->instance_;
  i.model = model->model();
  i.name = name;
  i.kind = static_cast<TRITONSERVER_InstanceGroupKind>(kind);
  i.device_id = device_id;
  i.host_policy.json = host_policy_json;
  const EntryPoints& e = i.model->backend->entry;
  if (e.instance_initialize != nullptr) {
    PYSERVER_RETURN_IF_ERROR(FromError(e.instance_initialize(&i)));
  }
  instance->initialized_ = true;
  *out = std::move(instance);
  return Status::Ok();
}

Instance::~Instance() {
  const EntryPoints& e = instance_.model->backend->entry;
  if (initialized_ && e.instance_finalize != nullptr) FromError(e.instance_finalize(&instance_));
}

bool Instance::has_ready_check() const {
  return instance_.model->backend->entry.instance_ready != nullptr;
}

Status Instance::Ready() {
  const EntryPoints& e = instance_.model->backend->entry;
  if (e.instance_ready == nullptr) return Status::Ok();
  return FromError(e.instance_ready(&instance_));
}

Status Instance::Execute(std::vector<TRITONBACKEND_Request*>& requests, BatchTimes* reported) {
  {
    std::lock_guard<std::mutex> lock(instance_.stats_mu);
    instance_.reported = BatchTimes();
  }
  Status status = FromError(instance_.model->backend->entry.execute(
      &instance_, requests.data(), static_cast<uint32_t>(requests.size())));
  std::lock_guard<std::mutex> lock(instance_.stats_mu);
  *reported = instance_.reported;
  return status;
}

}  // namespace pyserver::triton
