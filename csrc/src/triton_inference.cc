// TRITONSERVER_InferenceRequest, _InferenceResponse, _ResponseAllocator and
// TRITONSERVER_ServerInferAsync: a backend running inference on other models
// of its server (BLS). See pyserver/triton/inference.h for the threads.
#include "pyserver/triton/inference.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "pyserver/cuda_runtime.h"
#include "triton_api_internal.h"

using pyserver::triton::Completion;
using pyserver::triton::InputSpan;
using pyserver::triton::Parameter;
using pyserver::triton::ProgramTrace;
using pyserver::triton::RequestInput;
using pyserver::triton::Submission;
using pyserver::triton::TraceActivity;
using pyserver::triton::TraceReport;

using pyserver::triton::Err;
using pyserver::triton::ToError;

namespace {

std::string Tag(const TRITONSERVER_InferenceRequest* request) {
  return pyserver::triton::RequestTag(request->id);
}

RequestInput* FindInput(TRITONSERVER_InferenceRequest* request, const char* name) {
  for (auto& input : request->inputs) {
    if (input.name == name) return &input;
  }
  return nullptr;
}

TRITONSERVER_Error* NoSuchInput(TRITONSERVER_InferenceRequest* request, const char* name) {
  return Err(TRITONSERVER_ERROR_INVALID_ARG,
              Tag(request) + "input '" + name + "' does not exist in request");
}

pyserver::triton::ServerHooks g_hooks;
std::mutex g_hooks_mu;

pyserver::triton::ServerHooks Hooks() {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  return g_hooks;
}

// The server of the model whose ModelInitialize runs on this thread.
thread_local TRITONSERVER_Server* t_initializing_server = nullptr;
TRITONSERVER_Server g_no_server;  // a model served by no server

TRITONSERVER_Error* NotServed() {
  return Err(TRITONSERVER_ERROR_UNAVAILABLE, "the model is not served by a running server");
}

// Sets the request's parameter `key` (replacing one of that name) to what
// fill writes into it.
template <typename Fill>
TRITONSERVER_Error* PutParameter(TRITONSERVER_InferenceRequest* request, const char* key,
                                 TRITONSERVER_ParameterType type, Fill fill) {
  CHECK_ARG(request);
  CHECK_ARG(key);
  Parameter parameter;
  parameter.name = key;
  parameter.type = type;
  fill(&parameter);
  for (auto& p : request->parameters) {
    if (p.name == parameter.name) {
      p = std::move(parameter);
      return nullptr;
    }
  }
  request->parameters.push_back(std::move(parameter));
  return nullptr;
}

// ---- the callback thread -------------------------------------------------

// Copies a tensor's host bytes into a buffer of the allocator's memory type.
TRITONSERVER_Error* CopyOut(void* dst, const pyserver::triton::ResponseTensor& src,
                            TRITONSERVER_MemoryType type, int64_t type_id) {
  if (src.byte_size == 0) return nullptr;
  if (type != TRITONSERVER_MEMORY_GPU) {
    std::memcpy(dst, src.data, src.byte_size);
    return nullptr;
  }
  const pyserver::CudaRuntime& cuda = pyserver::CudaRuntime::Get();
  if (!cuda.available()) {
    return Err(TRITONSERVER_ERROR_UNSUPPORTED,
                "the response allocator gave GPU memory, and CUDA is not available: " +
                    cuda.reason());
  }
  pyserver::Status status = cuda.SetDevice(static_cast<int>(type_id));
  if (status.ok()) {
    status = cuda.MemcpyAsync(dst, src.data, src.byte_size, pyserver::CudaRuntime::kHostToDevice,
                              nullptr);
  }
  if (status.ok()) status = cuda.StreamSynchronize(nullptr);
  return ToError(status);
}

// The response object for one completion: its outputs in buffers the
// backend's allocator gave (an allocation error becomes the response's).
TRITONSERVER_InferenceResponse* BuildResponse(const Submission& s, Completion& c) {
  auto* response = new TRITONSERVER_InferenceResponse();
  response->model_name = s.model_name;
  response->model_version = c.model_version;
  response->id = s.id;
  response->allocator = s.callbacks.allocator;
  response->parameters = std::move(c.parameters);
  if (c.has_error) {
    response->error = Err(c.error_code, c.error_message);
    return response;
  }
  TRITONSERVER_ResponseAllocator* allocator = s.callbacks.allocator;
  TRITONSERVER_Error* err = nullptr;
  if (allocator == nullptr) {
    err = Err(TRITONSERVER_ERROR_INVALID_ARG, "the request has no response allocator");
  } else if (allocator->start_fn != nullptr) {
    err = allocator->start_fn(allocator, s.callbacks.allocator_userp);
  }
  for (size_t i = 0; err == nullptr && i < c.outputs.size(); ++i) {
    pyserver::triton::ResponseTensor& tensor = c.outputs[i];
    TRITONSERVER_InferenceResponse::Output out;
    out.name = tensor.name;
    out.datatype = tensor.datatype;
    out.shape = std::move(tensor.shape);
    out.byte_size = tensor.byte_size;
    err = allocator->alloc_fn(allocator, out.name.c_str(), out.byte_size, TRITONSERVER_MEMORY_CPU,
                              0, s.callbacks.allocator_userp, &out.base, &out.userp,
                              &out.memory_type, &out.memory_type_id);
    if (err != nullptr) break;
    out.allocated = true;
    if (out.base == nullptr && out.byte_size > 0) {
      err = Err(TRITONSERVER_ERROR_INTERNAL,
                 "the response allocator gave no buffer for output '" + out.name + "'");
    } else {
      err = CopyOut(out.base, tensor, out.memory_type, out.memory_type_id);
    }
    tensor.keep.reset();  // the server's bytes are no longer needed
    response->outputs.push_back(std::move(out));
  }
  if (err != nullptr) response->error = err;
  return response;
}

class CallbackThread {
 public:
  static CallbackThread& Get() {
    static CallbackThread* instance = new CallbackThread();  // lives to the process's end
    return *instance;
  }

  void Push(std::shared_ptr<Submission> submission, Completion completion) {
    Item item;
    item.submission = std::move(submission);
    item.completion = std::move(completion);
    Enqueue(std::move(item));
  }

  void Push(TraceReport report) {
    Item item;
    item.trace = std::make_unique<TraceReport>(std::move(report));
    Enqueue(std::move(item));
  }

  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  CallbackThread() : thread_([this] { Run(); }) { thread_.detach(); }

  // A response for a submission, or a trace's report.
  struct Item {
    std::shared_ptr<Submission> submission;
    Completion completion;
    std::unique_ptr<TraceReport> trace;
  };

  void Enqueue(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
      ++pending_;
    }
    cv_.notify_all();
  }

  void Run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      if (item.trace != nullptr) {
        Report(*item.trace);
      } else {
        Call(*item.submission, item.completion);
      }
      item.submission.reset();
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      idle_.notify_all();
    }
  }

  static void Call(const Submission& s, Completion& c) {
    const uint32_t flags = c.final ? TRITONSERVER_RESPONSE_COMPLETE_FINAL : 0;
    TRITONSERVER_InferenceResponse* response = nullptr;
    if (c.has_response || c.has_error) response = BuildResponse(s, c);
    if (s.callbacks.response_fn != nullptr) {
      s.callbacks.response_fn(response, flags, s.callbacks.response_userp);
    } else if (response != nullptr) {
      TRITONSERVER_InferenceResponseDelete(response);
    }
    if (c.final && s.callbacks.release_fn != nullptr) {
      s.callbacks.release_fn(s.request, TRITONSERVER_REQUEST_RELEASE_ALL,
                             s.callbacks.release_userp);
    }
  }

  static void Report(TraceReport& r) {
    TRITONSERVER_InferenceTrace* trace = r.trace;
    if (trace == nullptr) {  // a spawned request's: made now, the program's once released
      trace = new TRITONSERVER_InferenceTrace();
      trace->program_owned = true;
      trace->program = r.program;
    }
    trace->id = r.id;
    trace->parent_id = r.parent_id;
    trace->model_name = std::move(r.model_name);
    trace->model_version = r.model_version;
    trace->request_id = std::move(r.request_id);
    const ProgramTrace& p = r.program;
    for (const TraceActivity& a : r.activities) {
      if (!a.tensor) {
        if (p.activity_fn != nullptr && (p.level & TRITONSERVER_TRACE_LEVEL_TIMESTAMPS)) {
          p.activity_fn(trace, a.activity, a.timestamp_ns, p.userp);
        }
      } else if (p.tensor_activity_fn != nullptr && (p.level & TRITONSERVER_TRACE_LEVEL_TENSORS)) {
        p.tensor_activity_fn(trace, a.activity, a.name.c_str(), a.datatype, a.bytes.data(),
                             a.bytes.size(), a.shape.data(), a.shape.size(),
                             TRITONSERVER_MEMORY_CPU, 0, p.userp);
      }
    }
    if (p.release_fn != nullptr) {
      p.release_fn(trace, p.userp);
    } else if (r.trace == nullptr) {
      delete trace;  // no one to hand it to
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_;
  std::deque<Item> queue_;
  size_t pending_ = 0;
  std::thread thread_;
};

}  // namespace

namespace pyserver::triton {

void SetServerHooks(const ServerHooks& hooks) {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  g_hooks = hooks;
}

void Deliver(std::shared_ptr<Submission> submission, Completion completion) {
  CallbackThread::Get().Push(std::move(submission), std::move(completion));
}

void DrainDeliveries() { CallbackThread::Get().Drain(); }

void DeliverTrace(TraceReport report) { CallbackThread::Get().Push(std::move(report)); }

void ResponseTensor::Own(std::vector<char> bytes) {
  auto owned = std::make_shared<std::vector<char>>(std::move(bytes));
  data = owned->data();
  byte_size = owned->size();
  keep = std::move(owned);
}

namespace {
std::mutex g_returned_mu;
std::vector<void*>* g_returned = new std::vector<void*>();  // lives to the process's end
}  // namespace

std::shared_ptr<const void> Lend(void* owner) {
  return std::shared_ptr<const void>(owner, [](const void* p) {
    std::lock_guard<std::mutex> lock(g_returned_mu);
    g_returned->push_back(const_cast<void*>(p));
  });
}

std::vector<void*> TakeReturned() {
  std::vector<void*> out;
  std::lock_guard<std::mutex> lock(g_returned_mu);
  out.swap(*g_returned);
  return out;
}

Status CreateServedModel(BackendLibrary* library, const std::string& name, uint64_t version,
                         const std::string& repository, const std::string& config_json,
                         bool auto_complete, TRITONSERVER_Server* server,
                         std::unique_ptr<Model>* out) {
  t_initializing_server = server;
  Status status =
      Model::Create(library, name, version, repository, config_json, auto_complete, out);
  t_initializing_server = nullptr;
  if (status.ok()) (*out)->model()->server = server;
  return status;
}

}  // namespace pyserver::triton

// ---- the server -----------------------------------------------------------

API TRITONBACKEND_ModelServer(TRITONBACKEND_Model* model, TRITONSERVER_Server** server) {
  CHECK_ARG(model);
  CHECK_ARG(server);
  if (model->server != nullptr) {
    *server = model->server;
  } else if (t_initializing_server != nullptr) {
    *server = t_initializing_server;
  } else {
    *server = &g_no_server;
  }
  return nullptr;
}

API TRITONSERVER_ServerModelIsReady(TRITONSERVER_Server* server, const char* model_name,
                                    const int64_t model_version, bool* ready) {
  CHECK_ARG(server);
  CHECK_ARG(model_name);
  CHECK_ARG(ready);
  auto hooks = Hooks();
  if (server->owner == nullptr || hooks.model_info == nullptr) return NotServed();
  uint32_t txn = 0;
  TRITONSERVER_Error* err = hooks.model_info(server->owner, model_name, model_version, ready,
                                             &txn);
  if (err != nullptr && err->code == TRITONSERVER_ERROR_NOT_FOUND) {
    delete err;  // an unknown model is not ready
    *ready = false;
    return nullptr;
  }
  return err;
}

API TRITONSERVER_ServerLoadModelWithParameters(TRITONSERVER_Server* server,
                                               const char* model_name,
                                               const TRITONSERVER_Parameter** parameters,
                                               const uint64_t parameter_count) {
  CHECK_ARG(server);
  CHECK_ARG(model_name);
  if (parameters == nullptr && parameter_count != 0) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                "load parameters are not provided while parameter count is non-zero");
  }
  auto hooks = Hooks();
  if (server->owner == nullptr || hooks.load_model == nullptr) return NotServed();
  std::vector<const Parameter*> given;
  for (uint64_t i = 0; i < parameter_count; ++i) given.push_back(&parameters[i]->parameter);
  return hooks.load_model(server->owner, model_name, given);
}

namespace {

TRITONSERVER_Error* Unload(TRITONSERVER_Server* server, const char* model_name,
                           bool unload_dependents) {
  CHECK_ARG(server);
  CHECK_ARG(model_name);
  auto hooks = Hooks();
  if (server->owner == nullptr || hooks.unload_model == nullptr) return NotServed();
  return hooks.unload_model(server->owner, model_name, unload_dependents);
}

}  // namespace

API TRITONSERVER_ServerUnloadModel(TRITONSERVER_Server* server, const char* model_name) {
  return Unload(server, model_name, false);
}

API TRITONSERVER_ServerUnloadModelAndDependents(TRITONSERVER_Server* server,
                                                const char* model_name) {
  return Unload(server, model_name, true);
}

API TRITONSERVER_ServerModelTransactionProperties(TRITONSERVER_Server* server,
                                                  const char* model_name,
                                                  const int64_t model_version,
                                                  uint32_t* txn_flags, void** voidp) {
  CHECK_ARG(server);
  CHECK_ARG(model_name);
  CHECK_ARG(txn_flags);
  auto hooks = Hooks();
  if (server->owner == nullptr || hooks.model_info == nullptr) return NotServed();
  bool ready = false;
  if (voidp != nullptr) *voidp = nullptr;
  return hooks.model_info(server->owner, model_name, model_version, &ready, txn_flags);
}

API TRITONSERVER_ServerInferAsync(TRITONSERVER_Server* server,
                                  TRITONSERVER_InferenceRequest* request,
                                  TRITONSERVER_InferenceTrace* trace) {
  CHECK_ARG(server);
  CHECK_ARG(request);
  // The request is traced under `trace`'s parent (a spawned child, which
  // the server owns from here, as Triton's does) or under `trace` itself.
  request->parent_trace = 0;
  request->program_trace = nullptr;
  if (trace != nullptr && trace->program_owned) {
    request->program_trace = trace;  // traced as itself, for its program
  } else if (trace != nullptr) {
    request->parent_trace = trace->spawned ? trace->parent_id : trace->id;
    if (trace->spawned && request->trace.get() != trace) request->trace.reset(trace);
  }
  auto hooks = Hooks();
  if (server->owner == nullptr || hooks.submit == nullptr) return NotServed();
  if (request->callbacks.response_fn == nullptr || request->callbacks.allocator == nullptr) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                Tag(request) + "the request has no response callback");
  }
  auto submission = std::make_shared<Submission>();
  submission->request = request;
  submission->callbacks = request->callbacks;
  submission->model_name = request->model_name;
  submission->model_version = request->model_version;
  submission->id = request->id;
  // As Triton: a cancel before this call does not carry over to this run.
  request->cancelled = false;
  request->in_flight = submission;
  TRITONSERVER_Error* err = hooks.submit(server->owner, request, std::move(submission));
  if (err != nullptr) request->in_flight.reset();
  return err;
}

API TRITONSERVER_InferenceRequestCancel(TRITONSERVER_InferenceRequest* request) {
  CHECK_ARG(request);
  request->cancelled = true;
  std::shared_ptr<Submission> submission = request->in_flight.lock();
  auto hooks = Hooks();
  // Not in flight (never submitted, or its final response already went):
  // there is nothing to stop; IsCancelled says it was asked.
  if (submission == nullptr || request->server == nullptr ||
      request->server->owner == nullptr || hooks.cancel == nullptr) {
    return nullptr;
  }
  return hooks.cancel(request->server->owner, submission->token);
}

API TRITONSERVER_InferenceRequestIsCancelled(TRITONSERVER_InferenceRequest* request,
                                             bool* is_cancelled) {
  CHECK_ARG(request);
  CHECK_ARG(is_cancelled);
  *is_cancelled = request->cancelled;
  return nullptr;
}

// ---- response allocators ----------------------------------------------------

API TRITONSERVER_ResponseAllocatorNew(TRITONSERVER_ResponseAllocator** allocator,
                                      TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn,
                                      TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn,
                                      TRITONSERVER_ResponseAllocatorStartFn_t start_fn) {
  CHECK_ARG(allocator);
  CHECK_ARG(alloc_fn);
  CHECK_ARG(release_fn);
  *allocator = new TRITONSERVER_ResponseAllocator();
  (*allocator)->alloc_fn = alloc_fn;
  (*allocator)->release_fn = release_fn;
  (*allocator)->start_fn = start_fn;
  return nullptr;
}

API TRITONSERVER_ResponseAllocatorSetBufferAttributesFunction(
    TRITONSERVER_ResponseAllocator* allocator,
    TRITONSERVER_ResponseAllocatorBufferAttributesFn_t buffer_attributes_fn) {
  CHECK_ARG(allocator);
  allocator->buffer_attributes_fn = buffer_attributes_fn;
  return nullptr;
}

API TRITONSERVER_ResponseAllocatorSetQueryFunction(TRITONSERVER_ResponseAllocator* allocator,
                                                   TRITONSERVER_ResponseAllocatorQueryFn_t fn) {
  CHECK_ARG(allocator);
  allocator->query_fn = fn;
  return nullptr;
}

API TRITONSERVER_ResponseAllocatorDelete(TRITONSERVER_ResponseAllocator* allocator) {
  delete allocator;
  return nullptr;
}

// ---- requests ---------------------------------------------------------------

API TRITONSERVER_InferenceRequestNew(TRITONSERVER_InferenceRequest** request,
                                     TRITONSERVER_Server* server, const char* model_name,
                                     const int64_t model_version) {
  CHECK_ARG(request);
  CHECK_ARG(server);
  CHECK_ARG(model_name);
  auto hooks = Hooks();
  if (server->owner != nullptr && hooks.model_info != nullptr) {
    bool ready = false;
    uint32_t txn = 0;  // as Triton, an unknown model fails here
    TRITONSERVER_Error* err = hooks.model_info(server->owner, model_name, model_version, &ready,
                                               &txn);
    if (err != nullptr) return err;
  }
  *request = new TRITONSERVER_InferenceRequest();
  (*request)->server = server;
  (*request)->model_name = model_name;
  (*request)->model_version = model_version;
  return nullptr;
}

API TRITONSERVER_InferenceRequestDelete(TRITONSERVER_InferenceRequest* request) {
  delete request;
  return nullptr;
}

API TRITONSERVER_InferenceRequestId(TRITONSERVER_InferenceRequest* request, const char** id) {
  CHECK_ARG(request);
  CHECK_ARG(id);
  *id = request->id.c_str();
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetId(TRITONSERVER_InferenceRequest* request, const char* id) {
  CHECK_ARG(request);
  CHECK_ARG(id);
  request->id = id;
  return nullptr;
}

API TRITONSERVER_InferenceRequestFlags(TRITONSERVER_InferenceRequest* request, uint32_t* flags) {
  CHECK_ARG(request);
  CHECK_ARG(flags);
  *flags = request->flags;
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetFlags(TRITONSERVER_InferenceRequest* request,
                                          uint32_t flags) {
  CHECK_ARG(request);
  request->flags = flags;
  return nullptr;
}

API TRITONSERVER_InferenceRequestCorrelationId(TRITONSERVER_InferenceRequest* request,
                                               uint64_t* correlation_id) {
  CHECK_ARG(request);
  CHECK_ARG(correlation_id);
  if (request->correlation_id_is_string) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                Tag(request) + "given request's correlation id is not an unsigned int");
  }
  *correlation_id = request->correlation_id;
  return nullptr;
}

API TRITONSERVER_InferenceRequestCorrelationIdString(TRITONSERVER_InferenceRequest* request,
                                                     const char** correlation_id) {
  CHECK_ARG(request);
  CHECK_ARG(correlation_id);
  if (!request->correlation_id_is_string) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                Tag(request) + "given request's correlation id is not a string");
  }
  *correlation_id = request->correlation_id_string.c_str();
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetCorrelationId(TRITONSERVER_InferenceRequest* request,
                                                  uint64_t correlation_id) {
  CHECK_ARG(request);
  request->correlation_id = correlation_id;
  request->correlation_id_is_string = false;
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetCorrelationIdString(TRITONSERVER_InferenceRequest* request,
                                                        const char* correlation_id) {
  CHECK_ARG(request);
  CHECK_ARG(correlation_id);
  request->correlation_id_string = correlation_id;
  request->correlation_id_is_string = true;
  return nullptr;
}

API TRITONSERVER_InferenceRequestPriority(TRITONSERVER_InferenceRequest* request,
                                          uint32_t* priority) {
  CHECK_ARG(request);
  CHECK_ARG(priority);
  *priority = static_cast<uint32_t>(request->priority);
  return nullptr;
}

API TRITONSERVER_InferenceRequestPriorityUInt64(TRITONSERVER_InferenceRequest* request,
                                                uint64_t* priority) {
  CHECK_ARG(request);
  CHECK_ARG(priority);
  *priority = request->priority;
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetPriority(TRITONSERVER_InferenceRequest* request,
                                             uint32_t priority) {
  CHECK_ARG(request);
  request->priority = priority;
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetPriorityUInt64(TRITONSERVER_InferenceRequest* request,
                                                   uint64_t priority) {
  CHECK_ARG(request);
  request->priority = priority;
  return nullptr;
}

API TRITONSERVER_InferenceRequestTimeoutMicroseconds(TRITONSERVER_InferenceRequest* request,
                                                     uint64_t* timeout_us) {
  CHECK_ARG(request);
  CHECK_ARG(timeout_us);
  *timeout_us = request->timeout_us;
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(TRITONSERVER_InferenceRequest* request,
                                                        uint64_t timeout_us) {
  CHECK_ARG(request);
  request->timeout_us = timeout_us;
  return nullptr;
}

// ---- inputs -------------------------------------------------------------------

API TRITONSERVER_InferenceRequestAddInput(TRITONSERVER_InferenceRequest* request,
                                          const char* name,
                                          const TRITONSERVER_DataType datatype,
                                          const int64_t* shape, uint64_t dim_count) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  if (shape == nullptr && dim_count > 0) CHECK_ARG(shape);
  if (FindInput(request, name) != nullptr) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                Tag(request) + "input '" + name + "' already exists in request");
  }
  for (const auto& input : request->inputs) {
    if (input.raw) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                  Tag(request) + "raw input '" + input.name +
                      "' can't be added to request with other inputs");
    }
  }
  RequestInput input;
  input.name = name;
  input.datatype = datatype;
  input.shape.assign(shape, shape + dim_count);
  request->inputs.push_back(std::move(input));
  return nullptr;
}

API TRITONSERVER_InferenceRequestAddRawInput(TRITONSERVER_InferenceRequest* request,
                                             const char* name) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  if (!request->inputs.empty()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                Tag(request) + "raw input '" + name +
                    "' can't be added to request with other inputs");
  }
  RequestInput input;
  input.name = name;
  input.raw = true;
  request->inputs.push_back(std::move(input));
  return nullptr;
}

API TRITONSERVER_InferenceRequestRemoveInput(TRITONSERVER_InferenceRequest* request,
                                             const char* name) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  for (auto it = request->inputs.begin(); it != request->inputs.end(); ++it) {
    if (it->name == name) {
      request->inputs.erase(it);
      return nullptr;
    }
  }
  return NoSuchInput(request, name);
}

API TRITONSERVER_InferenceRequestRemoveAllInputs(TRITONSERVER_InferenceRequest* request) {
  CHECK_ARG(request);
  request->inputs.clear();
  return nullptr;
}

API TRITONSERVER_InferenceRequestAppendInputData(TRITONSERVER_InferenceRequest* request,
                                                 const char* name, const void* base,
                                                 size_t byte_size,
                                                 TRITONSERVER_MemoryType memory_type,
                                                 int64_t) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  if (base == nullptr && byte_size > 0) CHECK_ARG(base);
  RequestInput* input = FindInput(request, name);
  if (input == nullptr) return NoSuchInput(request, name);
  if (memory_type == TRITONSERVER_MEMORY_GPU) {
    return Err(TRITONSERVER_ERROR_UNSUPPORTED,
                Tag(request) + "input '" + name +
                    "': GPU memory is not supported for BLS inputs by pyserver");
  }
  input->spans.push_back(InputSpan{base, byte_size});
  input->byte_size += byte_size;
  return nullptr;
}

API TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(
    TRITONSERVER_InferenceRequest* request, const char* name, const void* base, size_t byte_size,
    TRITONSERVER_MemoryType memory_type, int64_t memory_type_id, const char*) {
  // One host policy here: data for any policy is the input's data.
  return TRITONSERVER_InferenceRequestAppendInputData(request, name, base, byte_size,
                                                      memory_type, memory_type_id);
}

API TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(
    TRITONSERVER_InferenceRequest* request, const char* name, const void* base,
    TRITONSERVER_BufferAttributes* attributes) {
  CHECK_ARG(attributes);
  size_t byte_size = 0;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  TRITONSERVER_Error* err = TRITONSERVER_BufferAttributesByteSize(attributes, &byte_size);
  if (err == nullptr) err = TRITONSERVER_BufferAttributesMemoryType(attributes, &memory_type);
  if (err == nullptr) {
    err = TRITONSERVER_BufferAttributesMemoryTypeId(attributes, &memory_type_id);
  }
  if (err != nullptr) return err;
  return TRITONSERVER_InferenceRequestAppendInputData(request, name, base, byte_size,
                                                      memory_type, memory_type_id);
}

API TRITONSERVER_InferenceRequestRemoveAllInputData(TRITONSERVER_InferenceRequest* request,
                                                    const char* name) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  RequestInput* input = FindInput(request, name);
  if (input == nullptr) return NoSuchInput(request, name);
  input->spans.clear();
  input->byte_size = 0;
  return nullptr;
}

// ---- requested outputs, parameters, callbacks ---------------------------------

API TRITONSERVER_InferenceRequestAddRequestedOutput(TRITONSERVER_InferenceRequest* request,
                                                    const char* name) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  for (const auto& output : request->requested_outputs) {
    if (output == name) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                  Tag(request) + "output '" + name + "' already exists in request");
    }
  }
  request->requested_outputs.emplace_back(name);
  return nullptr;
}

API TRITONSERVER_InferenceRequestRemoveRequestedOutput(TRITONSERVER_InferenceRequest* request,
                                                       const char* name) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  for (auto it = request->requested_outputs.begin(); it != request->requested_outputs.end();
       ++it) {
    if (*it == name) {
      request->requested_outputs.erase(it);
      return nullptr;
    }
  }
  return Err(TRITONSERVER_ERROR_INVALID_ARG,
              Tag(request) + "output '" + name + "' does not exist in request");
}

API TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(
    TRITONSERVER_InferenceRequest* request) {
  CHECK_ARG(request);
  request->requested_outputs.clear();
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetStringParameter(TRITONSERVER_InferenceRequest* request,
                                                    const char* key, const char* value) {
  CHECK_ARG(value);
  return PutParameter(request, key, TRITONSERVER_PARAMETER_STRING,
                      [&](Parameter* p) { p->string_value = value; });
}

API TRITONSERVER_InferenceRequestSetIntParameter(TRITONSERVER_InferenceRequest* request,
                                                 const char* key, const int64_t value) {
  return PutParameter(request, key, TRITONSERVER_PARAMETER_INT,
                      [&](Parameter* p) { p->int_value = value; });
}

API TRITONSERVER_InferenceRequestSetBoolParameter(TRITONSERVER_InferenceRequest* request,
                                                  const char* key, const bool value) {
  return PutParameter(request, key, TRITONSERVER_PARAMETER_BOOL,
                      [&](Parameter* p) { p->bool_value = value; });
}

API TRITONSERVER_InferenceRequestSetDoubleParameter(TRITONSERVER_InferenceRequest* request,
                                                    const char* key, const double value) {
  return PutParameter(request, key, TRITONSERVER_PARAMETER_DOUBLE,
                      [&](Parameter* p) { p->double_value = value; });
}

API TRITONSERVER_InferenceRequestSetReleaseCallback(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_InferenceRequestReleaseFn_t release_fn,
    void* release_userp) {
  CHECK_ARG(request);
  request->callbacks.release_fn = release_fn;
  request->callbacks.release_userp = release_userp;
  return nullptr;
}

API TRITONSERVER_InferenceRequestSetResponseCallback(
    TRITONSERVER_InferenceRequest* request, TRITONSERVER_ResponseAllocator* allocator,
    void* allocator_userp, TRITONSERVER_InferenceResponseCompleteFn_t response_fn,
    void* response_userp) {
  CHECK_ARG(request);
  request->callbacks.allocator = allocator;
  request->callbacks.allocator_userp = allocator_userp;
  request->callbacks.response_fn = response_fn;
  request->callbacks.response_userp = response_userp;
  return nullptr;
}

// ---- responses ----------------------------------------------------------------

API TRITONSERVER_InferenceResponseDelete(TRITONSERVER_InferenceResponse* response) {
  if (response == nullptr) return nullptr;
  TRITONSERVER_Error* first = nullptr;
  TRITONSERVER_ResponseAllocator* allocator = response->allocator;
  for (auto& out : response->outputs) {
    if (!out.allocated || allocator == nullptr) continue;
    TRITONSERVER_Error* err = allocator->release_fn(allocator, out.base, out.userp, out.byte_size,
                                                    out.memory_type, out.memory_type_id);
    if (first == nullptr) {
      first = err;
    } else {
      delete err;
    }
  }
  delete response->error;
  delete response;
  return first;
}

// As Triton's: a new error object the caller deletes (TRITONSERVER_ErrorDelete),
// the response keeping its own, so deleting both is no double free.
API TRITONSERVER_InferenceResponseError(TRITONSERVER_InferenceResponse* response) {
  CHECK_ARG(response);
  if (response->error == nullptr) return nullptr;
  return Err(response->error->code, response->error->message);
}

API TRITONSERVER_InferenceResponseModel(TRITONSERVER_InferenceResponse* response,
                                        const char** model_name, int64_t* model_version) {
  CHECK_ARG(response);
  CHECK_ARG(model_name);
  CHECK_ARG(model_version);
  *model_name = response->model_name.c_str();
  *model_version = response->model_version;
  return nullptr;
}

API TRITONSERVER_InferenceResponseId(TRITONSERVER_InferenceResponse* response,
                                     const char** request_id) {
  CHECK_ARG(response);
  CHECK_ARG(request_id);
  *request_id = response->id.c_str();
  return nullptr;
}

API TRITONSERVER_InferenceResponseParameterCount(TRITONSERVER_InferenceResponse* response,
                                                 uint32_t* count) {
  CHECK_ARG(response);
  CHECK_ARG(count);
  *count = static_cast<uint32_t>(response->parameters.size());
  return nullptr;
}

API TRITONSERVER_InferenceResponseParameter(TRITONSERVER_InferenceResponse* response,
                                            const uint32_t index, const char** name,
                                            TRITONSERVER_ParameterType* type,
                                            const void** vvalue) {
  CHECK_ARG(response);
  if (index >= response->parameters.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                "out of bounds index " + std::to_string(index) +
                    std::string(": response has ") +
                    std::to_string(response->parameters.size()) + " parameters");
  }
  const Parameter& p = response->parameters[index];
  if (name != nullptr) *name = p.name.c_str();
  if (type != nullptr) *type = p.type;
  if (vvalue != nullptr) *vvalue = p.value();
  return nullptr;
}

API TRITONSERVER_InferenceResponseOutputCount(TRITONSERVER_InferenceResponse* response,
                                              uint32_t* count) {
  CHECK_ARG(response);
  CHECK_ARG(count);
  *count = static_cast<uint32_t>(response->outputs.size());
  return nullptr;
}

API TRITONSERVER_InferenceResponseOutput(TRITONSERVER_InferenceResponse* response,
                                         const uint32_t index, const char** name,
                                         TRITONSERVER_DataType* datatype, const int64_t** shape,
                                         uint64_t* dim_count, const void** base,
                                         size_t* byte_size, TRITONSERVER_MemoryType* memory_type,
                                         int64_t* memory_type_id, void** userp) {
  CHECK_ARG(response);
  if (index >= response->outputs.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
                "out of bounds index " + std::to_string(index) +
                    std::string(": response has ") + std::to_string(response->outputs.size()) +
                    " outputs");
  }
  const TRITONSERVER_InferenceResponse::Output& out = response->outputs[index];
  if (name != nullptr) *name = out.name.c_str();
  if (datatype != nullptr) *datatype = out.datatype;
  if (shape != nullptr) *shape = out.shape.data();
  if (dim_count != nullptr) *dim_count = out.shape.size();
  if (base != nullptr) *base = out.base;
  if (byte_size != nullptr) *byte_size = out.byte_size;
  if (memory_type != nullptr) *memory_type = out.memory_type;
  if (memory_type_id != nullptr) *memory_type_id = out.memory_type_id;
  if (userp != nullptr) *userp = out.userp;
  return nullptr;
}

API TRITONSERVER_InferenceResponseOutputClassificationLabel(
    TRITONSERVER_InferenceResponse* response, const uint32_t index, const size_t,
    const char** label) {
  CHECK_ARG(response);
  CHECK_ARG(label);
  if (index >= response->outputs.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index " + std::to_string(index));
  }
  *label = nullptr;  // pyserver keeps no label files for C backends' outputs
  return nullptr;
}
