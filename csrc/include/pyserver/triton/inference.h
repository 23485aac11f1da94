// Inference requests a backend sends to other models of its server (BLS):
// the objects behind TRITONSERVER_InferenceRequest, _InferenceResponse,
// _ResponseAllocator and _Server (csrc/src/triton_inference.cc).
//
// Plain C++ (no Python). The server side lives in Python, so the engine
// (engine/triton_bls.pyx) registers ServerHooks, functions that take the GIL
// themselves: ServerInferAsync hands the request to the submit hook, which
// copies what it needs and queues it on the server's event loop. Responses
// come back through Deliver() from the event loop; a thread of this library
// then asks the backend's allocator for buffers, fills them and calls the
// backend's response and release callbacks (without the GIL, off the loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pyserver/status.h"
#include "pyserver/triton/library.h"
#include "pyserver/triton/objects.h"

// One pyserver Server as backends see it; owner is the engine's handle for
// it, null for a model served by no server (tools, tests).
struct TRITONSERVER_Server {
  void* owner = nullptr;
};

struct TRITONSERVER_ResponseAllocator {
  TRITONSERVER_ResponseAllocatorAllocFn_t alloc_fn = nullptr;
  TRITONSERVER_ResponseAllocatorReleaseFn_t release_fn = nullptr;
  TRITONSERVER_ResponseAllocatorStartFn_t start_fn = nullptr;
  TRITONSERVER_ResponseAllocatorQueryFn_t query_fn = nullptr;
  TRITONSERVER_ResponseAllocatorBufferAttributesFn_t buffer_attributes_fn = nullptr;
};

namespace pyserver::triton {

// A span of an input's bytes: the caller's memory until the release callback.
struct InputSpan {
  const void* base = nullptr;
  size_t byte_size = 0;
};

struct RequestInput {
  std::string name;
  TRITONSERVER_DataType datatype = TRITONSERVER_TYPE_INVALID;
  std::vector<int64_t> shape;
  bool raw = false;  // AddRawInput: datatype and shape from the model's config
  std::vector<InputSpan> spans;
  uint64_t byte_size = 0;  // over all spans
};

// What a request calls back: SetReleaseCallback, SetResponseCallback.
struct Callbacks {
  TRITONSERVER_InferenceRequestReleaseFn_t release_fn = nullptr;
  void* release_userp = nullptr;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  void* allocator_userp = nullptr;
  TRITONSERVER_InferenceResponseCompleteFn_t response_fn = nullptr;
  void* response_userp = nullptr;
};

// A request handed to the server: its callbacks and names, copied out of it
// at ServerInferAsync (the backend may change or reuse it after that).
struct Submission {
  TRITONSERVER_InferenceRequest* request = nullptr;
  Callbacks callbacks;
  std::string model_name;
  int64_t model_version = -1;
  std::string id;
  // The engine's name for the request while it is in flight (set by the
  // submit hook), which the cancel hook is given.
  uint64_t token = 0;
};

// One tensor of a response: a view of its bytes, which `keep` holds until
// the callback thread has copied them into the backend's buffer (the
// server's own array, lent without a copy: see Lend).
struct ResponseTensor {
  std::string name;
  TRITONSERVER_DataType datatype = TRITONSERVER_TYPE_INVALID;
  std::vector<int64_t> shape;
  const char* data = nullptr;
  size_t byte_size = 0;
  std::shared_ptr<const void> keep;
  // The tensor holds its own copy of `bytes`.
  void Own(std::vector<char> bytes);
};

// The server's objects whose bytes a response lends: Lend(owner) holds
// `owner` (an opaque pointer; the engine's reference to a Python object)
// until the last copy of what it returns goes, on whichever thread, and
// then queues it for TakeReturned(), which the engine calls with the GIL
// held to drop those references. No Python runs on the callback thread.
std::shared_ptr<const void> Lend(void* owner);
std::vector<void*> TakeReturned();

// One response (or error, or the final flag alone) for a Submission.
struct Completion {
  bool has_response = false;
  bool has_error = false;
  TRITONSERVER_Error_Code error_code = TRITONSERVER_ERROR_INTERNAL;
  std::string error_message;
  int64_t model_version = -1;
  std::vector<ResponseTensor> outputs;
  std::vector<Parameter> parameters;
  bool final = false;
};

// What the engine registers. Both may be called from any thread and take the
// GIL themselves; they return a new error (the caller's) or nullptr.
struct ServerHooks {
  // Whether the model exists (else Triton's "unknown model" error), is ready,
  // and its TRITONSERVER_TXN_* flags.
  TRITONSERVER_Error* (*model_info)(void* owner, const char* model_name, int64_t version,
                                    bool* ready, uint32_t* txn_flags) = nullptr;
  // Queues the request (its callbacks in *submission) to the server.
  TRITONSERVER_Error* (*submit)(void* owner, TRITONSERVER_InferenceRequest* request,
                                std::shared_ptr<Submission> submission) = nullptr;
  // Loads (or reloads) a model and returns once it is done (explicit model
  // control): parameters "config" and "file:<path>", as the load API has them.
  TRITONSERVER_Error* (*load_model)(void* owner, const char* model_name,
                                    const std::vector<const Parameter*>& parameters) = nullptr;
  // Unloads a model (and, asked to, an ensemble's composing models).
  TRITONSERVER_Error* (*unload_model)(void* owner, const char* model_name,
                                      bool unload_dependents) = nullptr;
  // Cancels the submitted request named `token`, best effort: still queued,
  // it ends with a CANCELLED error response; already running, its model sees
  // it cancelled and its responses still come.
  TRITONSERVER_Error* (*cancel)(void* owner, uint64_t token) = nullptr;
};
void SetServerHooks(const ServerHooks& hooks);

// Hands one completion of a submitted request to the callback thread, which
// builds the TRITONSERVER_InferenceResponse (the backend's allocator gives
// the buffers) and calls the response callback; after the final one, the
// request's release callback (TRITONSERVER_REQUEST_RELEASE_ALL).
void Deliver(std::shared_ptr<Submission> submission, Completion completion);

// Waits until every delivered completion has been handed to the backend
// (for tests and shutdown).
void DrainDeliveries();

// One activity of a traced request: a timestamp, or (`tensor`) a tensor.
struct TraceActivity {
  TRITONSERVER_InferenceTraceActivity activity = TRITONSERVER_TRACE_CUSTOM_ACTIVITY;
  uint64_t timestamp_ns = 0;
  bool tensor = false;
  std::string name;
  TRITONSERVER_DataType datatype = TRITONSERVER_TYPE_INVALID;
  std::vector<int64_t> shape;
  std::vector<char> bytes;  // BYTES serialized as Triton's (4-byte lengths)
};

// What a request traced for a program recorded, once it ended: reported to
// the program's callbacks on the callback thread, in order with responses
// (the timestamps in order, then the tensors), then the trace handed to its
// release callback. `trace` is the program's own trace for its request;
// null for a request the server spawned under it (an ensemble's step, a
// backend's BLS call), whose trace is made then and owned by the program
// once released.
struct TraceReport {
  TRITONSERVER_InferenceTrace* trace = nullptr;
  ProgramTrace program;
  uint64_t id = 0;
  uint64_t parent_id = 0;
  std::string model_name;
  int64_t model_version = -1;
  std::string request_id;
  std::vector<TraceActivity> activities;
};
void DeliverTrace(TraceReport report);

// Model::Create for a model served by `server` (which it names to the
// backend through TRITONBACKEND_ModelServer, also during ModelInitialize).
Status CreateServedModel(BackendLibrary* library, const std::string& name, uint64_t version,
                         const std::string& repository, const std::string& config_json,
                         bool auto_complete, TRITONSERVER_Server* server,
                         std::unique_ptr<Model>* out);

}  // namespace pyserver::triton

struct TRITONSERVER_InferenceRequest {
  TRITONSERVER_Server* server = nullptr;
  std::string model_name;
  int64_t model_version = -1;
  std::string id;
  uint32_t flags = 0;
  uint64_t correlation_id = 0;
  std::string correlation_id_string;
  bool correlation_id_is_string = false;
  uint64_t priority = 0;
  uint64_t timeout_us = 0;
  std::vector<pyserver::triton::RequestInput> inputs;
  std::vector<std::string> requested_outputs;
  std::vector<pyserver::triton::Parameter> parameters;
  pyserver::triton::Callbacks callbacks;
  // Set by ServerInferAsync: what TRITONSERVER_InferenceRequestCancel reaches
  // until the final response (a request in flight is not otherwise touched
  // by the backend, as Triton asks; cancel from another thread while the
  // request is being submitted is a race in Triton too).
  std::weak_ptr<pyserver::triton::Submission> in_flight;
  bool cancelled = false;  // since its last ServerInferAsync
  // The trace the request is a child of, from its last ServerInferAsync (0:
  // not traced), and the spawned trace given there: as in Triton, the server
  // owns it from that call.
  uint64_t parent_trace = 0;
  std::unique_ptr<TRITONSERVER_InferenceTrace> trace;
  // A program's own trace given to its last ServerInferAsync (the program
  // owns it; the server reports to it and hands it back through its release
  // callback), else null.
  TRITONSERVER_InferenceTrace* program_trace = nullptr;
};

struct TRITONSERVER_InferenceResponse {
  struct Output {
    std::string name;
    TRITONSERVER_DataType datatype = TRITONSERVER_TYPE_INVALID;
    std::vector<int64_t> shape;
    void* base = nullptr;
    size_t byte_size = 0;
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_type_id = 0;
    void* userp = nullptr;
    bool allocated = false;  // the allocator gave base: release it
  };
  std::string model_name;
  int64_t model_version = -1;
  std::string id;
  TRITONSERVER_Error* error = nullptr;  // owned by the response
  std::vector<Output> outputs;
  std::vector<pyserver::triton::Parameter> parameters;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
};
