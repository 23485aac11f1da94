#include "pyserver/triton/batch_strategy.h"

#include <dlfcn.h>

#include "pyserver/triton/library.h"

namespace pyserver::triton {

Status LibraryBatchStrategy::Create(const std::string& path, const std::string& model_name,
                                    uint64_t model_version, const std::string& repository,
                                    const std::string& config_json,
                                    std::shared_ptr<LibraryBatchStrategy>* out) {
  PYSERVER_RETURN_IF_ERROR(ExportServerSymbols());
  std::shared_ptr<LibraryBatchStrategy> s(new LibraryBatchStrategy());
  s->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (s->handle_ == nullptr) {
    const char* why = dlerror();
    return Status(StatusCode::kNotFound,
                  "unable to load shared library: " + std::string(why ? why : path));
  }
  s->batcher_init_ = reinterpret_cast<BatcherInitFn>(
      dlsym(s->handle_, "TRITONBACKEND_ModelBatcherInitialize"));
  s->batcher_fini_ = reinterpret_cast<BatcherFiniFn>(
      dlsym(s->handle_, "TRITONBACKEND_ModelBatcherFinalize"));
  s->batch_init_ = reinterpret_cast<BatchInitFn>(
      dlsym(s->handle_, "TRITONBACKEND_ModelBatchInitialize"));
  s->batch_include_ = reinterpret_cast<BatchIncludeFn>(
      dlsym(s->handle_, "TRITONBACKEND_ModelBatchIncludeRequest"));
  s->batch_fini_ = reinterpret_cast<BatchFiniFn>(
      dlsym(s->handle_, "TRITONBACKEND_ModelBatchFinalize"));
  if (!s->batcher_init_ || !s->batcher_fini_ || !s->batch_init_ || !s->batch_include_ ||
      !s->batch_fini_) {
    return Status(StatusCode::kInvalidArg,
                  path + " does not define all required custom batching functions for model " +
                      model_name);
  }
  s->model_.name = model_name;
  s->model_.version = model_version;
  s->model_.repository = repository;
  s->model_.config_json = config_json;
  PYSERVER_RETURN_IF_ERROR(FromError(s->batcher_init_(&s->batcher_, &s->model_)));
  s->initialized_ = true;
  *out = std::move(s);
  return Status::Ok();
}

LibraryBatchStrategy::~LibraryBatchStrategy() {
  if (initialized_) {
    if (batch_ != nullptr) LogFailure("finalization", batch_fini_(batch_));
    LogFailure("batcher finalization", batcher_fini_(batcher_));
  }
  if (handle_ != nullptr) dlclose(handle_);
}

void LibraryBatchStrategy::LogFailure(const char* what, TRITONSERVER_Error* error) const {
  if (error == nullptr) return;
  const std::string text = std::string("Custom batching ") + what +
                           " function failed for model " + model_.name + ": " + error->message;
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_ERROR, __FILE__, __LINE__, text.c_str());
  TRITONSERVER_ErrorDelete(error);
}

void LibraryBatchStrategy::BeginBatch() {
  if (batch_ != nullptr) EndBatch();
  LogFailure("initialization", batch_init_(batcher_, &batch_));
}

bool LibraryBatchStrategy::Include(const QueuedRequest& request) {
  // Triton's default when the function fails before it answers.
  bool include = false;
  auto* view = static_cast<TRITONBACKEND_Request*>(const_cast<void*>(request.view));
  if (view == nullptr) return true;  // queued without a view: nothing to judge it by
  LogFailure("include", batch_include_(view, batch_, &include));
  return include;
}

void LibraryBatchStrategy::EndBatch() {
  if (batch_ == nullptr) return;  // Triton finalizes only a record that was made
  LogFailure("finalization", batch_fini_(batch_));
  batch_ = nullptr;
}

}  // namespace pyserver::triton
