// pyserver's implementation of the TRITONSERVER_* and TRITONBACKEND_*
// functions a Triton backend calls, over the objects in
// pyserver/triton/objects.h. CPU memory only. What a backend asks of a
// request beyond its inputs (parameters, cancellation, ...) is in
// triton_request.cc; BLS in triton_inference.cc.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pyserver/trace_id.h"
#include "pyserver/triton/log.h"
#include "pyserver/triton/objects.h"
#include "triton_api_internal.h"

using pyserver::triton::BackendLog;
using pyserver::triton::Err;
using pyserver::triton::OutputRules;
using pyserver::triton::OutputTensor;
using pyserver::triton::ResponseSink;
using pyserver::triton::SentResponse;


// ---- TRITONSERVER_*: versions, types, logging, errors, messages ----------

API TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = TRITONSERVER_API_VERSION_MAJOR;
  *minor = TRITONSERVER_API_VERSION_MINOR;
  return nullptr;
}

static const char* const kTypeNames[] = {"INVALID", "BOOL",  "UINT8", "UINT16", "UINT32",
                                         "UINT64",  "INT8",  "INT16", "INT32",  "INT64",
                                         "FP16",    "FP32",  "FP64",  "BYTES",  "BF16"};
static const uint32_t kTypeSizes[] = {0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 0, 2};

extern "C" const char* TRITONSERVER_DataTypeString(TRITONSERVER_DataType datatype) {
  unsigned i = static_cast<unsigned>(datatype);
  return i < 15 ? kTypeNames[i] : "<invalid>";
}

extern "C" TRITONSERVER_DataType TRITONSERVER_StringToDataType(const char* dtype) {
  for (unsigned i = 1; i < 15; ++i) {
    if (std::strcmp(dtype, kTypeNames[i]) == 0) return static_cast<TRITONSERVER_DataType>(i);
  }
  return TRITONSERVER_TYPE_INVALID;
}

extern "C" uint32_t TRITONSERVER_DataTypeByteSize(TRITONSERVER_DataType datatype) {
  unsigned i = static_cast<unsigned>(datatype);
  return i < 15 ? kTypeSizes[i] : 0;
}

extern "C" const char* TRITONSERVER_MemoryTypeString(TRITONSERVER_MemoryType memtype) {
  switch (memtype) {
    case TRITONSERVER_MEMORY_CPU: return "CPU";
    case TRITONSERVER_MEMORY_CPU_PINNED: return "CPU_PINNED";
    case TRITONSERVER_MEMORY_GPU: return "GPU";
  }
  return "<invalid>";
}

extern "C" const char* TRITONSERVER_ParameterTypeString(TRITONSERVER_ParameterType paramtype) {
  switch (paramtype) {
    case TRITONSERVER_PARAMETER_STRING: return "STRING";
    case TRITONSERVER_PARAMETER_INT: return "INT";
    case TRITONSERVER_PARAMETER_BOOL: return "BOOL";
    case TRITONSERVER_PARAMETER_DOUBLE: return "DOUBLE";
    case TRITONSERVER_PARAMETER_BYTES: return "BYTES";
  }
  return "<invalid>";
}

extern "C" bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level) {
  return BackendLog::Get().Enabled(level);
}

API TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char* filename, const int line,
                            const char* msg) {
  BackendLog& log = BackendLog::Get();
  if (log.Enabled(level)) log.Write(level, filename, line, msg);
  return nullptr;
}

API TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  return Err(code, msg ? msg : "");
}

extern "C" void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error) { delete error; }

extern "C" TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error* error) {
  return error->code;
}

extern "C" const char* TRITONSERVER_ErrorCodeString(TRITONSERVER_Error* error) {
  static const char* const kNames[] = {"Unknown",     "Internal",     "Not found",
                                       "Invalid argument", "Unavailable", "Unsupported",
                                       "Already exists",   "Cancelled"};
  unsigned i = static_cast<unsigned>(error->code);
  return i < 8 ? kNames[i] : "<invalid code>";
}

extern "C" const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error) {
  return error->message.c_str();
}

API TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message** message, const char* base,
                                              size_t byte_size) {
  CHECK_ARG(message);
  *message = new TRITONSERVER_Message{std::string(base, byte_size)};
  return nullptr;
}

API TRITONSERVER_MessageDelete(TRITONSERVER_Message* message) {
  delete message;
  return nullptr;
}

API TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* message, const char** base,
                                        size_t* byte_size) {
  CHECK_ARG(message);
  *base = message->json.c_str();
  *byte_size = message->json.size();
  return nullptr;
}

// ---- TRITONBACKEND_*: backend, model, instance ---------------------------

API TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = TRITONBACKEND_API_VERSION_MAJOR;
  *minor = TRITONBACKEND_API_VERSION_MINOR;
  return nullptr;
}

API TRITONBACKEND_BackendName(TRITONBACKEND_Backend* backend, const char** name) {
  CHECK_ARG(backend);
  *name = backend->name.c_str();
  return nullptr;
}

API TRITONBACKEND_BackendConfig(TRITONBACKEND_Backend* backend,
                                TRITONSERVER_Message** backend_config) {
  CHECK_ARG(backend);
  *backend_config = &backend->config;  // the server's, as in Triton
  return nullptr;
}

API TRITONBACKEND_BackendExecutionPolicy(TRITONBACKEND_Backend* backend,
                                         TRITONBACKEND_ExecutionPolicy* policy) {
  CHECK_ARG(backend);
  *policy = backend->policy;
  return nullptr;
}

API TRITONBACKEND_BackendSetExecutionPolicy(TRITONBACKEND_Backend* backend,
                                            TRITONBACKEND_ExecutionPolicy policy) {
  CHECK_ARG(backend);
  backend->policy = policy;
  return nullptr;
}

API TRITONBACKEND_BackendState(TRITONBACKEND_Backend* backend, void** state) {
  CHECK_ARG(backend);
  *state = backend->state;
  return nullptr;
}

API TRITONBACKEND_BackendSetState(TRITONBACKEND_Backend* backend, void* state) {
  CHECK_ARG(backend);
  backend->state = state;
  return nullptr;
}

API TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name) {
  CHECK_ARG(model);
  *name = model->name.c_str();
  return nullptr;
}

API TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version) {
  CHECK_ARG(model);
  *version = model->version;
  return nullptr;
}

API TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* model,
                                  TRITONBACKEND_ArtifactType* artifact_type,
                                  const char** location) {
  CHECK_ARG(model);
  *artifact_type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = model->repository.c_str();
  return nullptr;
}

API TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* model, const uint32_t config_version,
                              TRITONSERVER_Message** model_config) {
  CHECK_ARG(model);
  if (config_version != 1) {
    return Err(TRITONSERVER_ERROR_UNSUPPORTED,
               "model configuration version " + std::to_string(config_version) +
                   " not supported, supported versions are: 1");
  }
  *model_config = new TRITONSERVER_Message{model->config_json};
  return nullptr;
}

API TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model* model, bool* auto_complete) {
  CHECK_ARG(model);
  *auto_complete = model->auto_complete;
  return nullptr;
}

API TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model* model, const uint32_t config_version,
                                 TRITONSERVER_Message* model_config) {
  CHECK_ARG(model);
  CHECK_ARG(model_config);
  if (config_version != 1) {
    return Err(TRITONSERVER_ERROR_UNSUPPORTED, "model configuration version not supported");
  }
  model->config_json = model_config->json;
  return nullptr;
}

API TRITONBACKEND_ModelBackend(TRITONBACKEND_Model* model, TRITONBACKEND_Backend** backend) {
  CHECK_ARG(model);
  *backend = model->backend;
  return nullptr;
}

API TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state) {
  CHECK_ARG(model);
  *state = model->state;
  return nullptr;
}

API TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state) {
  CHECK_ARG(model);
  model->state = state;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* instance, const char** name) {
  CHECK_ARG(instance);
  *name = instance->name.c_str();
  return nullptr;
}

API TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* instance,
                                    TRITONSERVER_InstanceGroupKind* kind) {
  CHECK_ARG(instance);
  *kind = instance->kind;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance,
                                        int32_t* device_id) {
  CHECK_ARG(instance);
  *device_id = instance->device_id;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceIsPassive(TRITONBACKEND_ModelInstance* instance,
                                         bool* is_passive) {
  CHECK_ARG(instance);
  *is_passive = false;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance,
                                     TRITONBACKEND_Model** model) {
  CHECK_ARG(instance);
  *model = instance->model;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state) {
  CHECK_ARG(instance);
  *state = instance->state;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state) {
  CHECK_ARG(instance);
  instance->state = state;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* instance,
                                                TRITONBACKEND_Request* request, const bool,
                                                const uint64_t, const uint64_t,
                                                const uint64_t, const uint64_t) {
  // Per request, pyserver's statistics take the batch's times (below) and
  // the request's own outcome from its response.
  CHECK_ARG(instance);
  CHECK_ARG(request);
  return nullptr;
}

API TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance* instance, const uint64_t, const uint64_t exec_start_ns,
    const uint64_t compute_start_ns, const uint64_t compute_end_ns, const uint64_t exec_end_ns) {
  CHECK_ARG(instance);
  std::lock_guard<std::mutex> lock(instance->stats_mu);
  instance->reported = {exec_start_ns, compute_start_ns, compute_end_ns, exec_end_ns};
  return nullptr;
}

// ---- requests and their inputs -------------------------------------------

API TRITONBACKEND_RequestId(TRITONBACKEND_Request* request, const char** id) {
  CHECK_ARG(request);
  *id = request->id.c_str();
  return nullptr;
}

// As Triton: a request with a string correlation ID has no number to give
// (the Python backend then asks CorrelationIdString); one without any has 0.
API TRITONBACKEND_RequestCorrelationId(TRITONBACKEND_Request* request, uint64_t* id) {
  CHECK_ARG(request);
  if (request->correlation_is_string) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               pyserver::triton::RequestTag(request->id) +
                   "correlation ID in request is not an unsigned int");
  }
  *id = request->correlation_id;
  return nullptr;
}

API TRITONBACKEND_RequestFlags(TRITONBACKEND_Request* request, uint32_t* flags) {
  CHECK_ARG(request);
  *flags = request->flags;
  return nullptr;
}

API TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count) {
  CHECK_ARG(request);
  *count = static_cast<uint32_t>(request->inputs.size());
  return nullptr;
}

API TRITONBACKEND_RequestInputName(TRITONBACKEND_Request* request, const uint32_t index,
                                   const char** input_name) {
  CHECK_ARG(request);
  if (index >= request->inputs.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index " + std::to_string(index) +
                                                   ": request has " +
                                                   std::to_string(request->inputs.size()) +
                                                   " inputs");
  }
  *input_name = request->inputs[index].name.c_str();
  return nullptr;
}

API TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name,
                               TRITONBACKEND_Input** input) {
  CHECK_ARG(request);
  CHECK_ARG(name);
  for (auto& in : request->inputs) {
    if (in.name == name) {
      *input = &in;
      return nullptr;
    }
  }
  return Err(TRITONSERVER_ERROR_INVALID_ARG,
             std::string("unknown request input name ") + name);
}

API TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request* request, const uint32_t index,
                                      TRITONBACKEND_Input** input) {
  CHECK_ARG(request);
  if (index >= request->inputs.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index " + std::to_string(index));
  }
  *input = &request->inputs[index];
  return nullptr;
}

API TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request, uint32_t* count) {
  CHECK_ARG(request);
  *count = static_cast<uint32_t>(request->requested_outputs.size());
  return nullptr;
}

API TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* request, const uint32_t index,
                                    const char** output_name) {
  CHECK_ARG(request);
  if (index >= request->requested_outputs.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "out of bounds index " + std::to_string(index));
  }
  *output_name = request->requested_outputs[index].c_str();
  return nullptr;
}

API TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t release_flags) {
  CHECK_ARG(request);
  // Triton's text for a model not configured for it; the request stays the
  // backend's. (pyserver runs no C backend's model iteratively.)
  if (release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the "
               "model is not configured to handle such a flag.");
  }
  request->released = true;
  request->release_flags = release_flags;
  // A request the batch handed off (a decoupled one still running after
  // Execute returned) is the releaser's to free; otherwise the batch's.
  if (request->sink->MarkReleased()) delete request;
  return nullptr;
}

API TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name,
                                  TRITONSERVER_DataType* datatype, const int64_t** shape,
                                  uint32_t* dims_count, uint64_t* byte_size,
                                  uint32_t* buffer_count) {
  CHECK_ARG(input);
  if (name) *name = input->name.c_str();
  if (datatype) *datatype = input->datatype;
  if (shape) *shape = input->shape.data();
  if (dims_count) *dims_count = static_cast<uint32_t>(input->shape.size());
  if (byte_size) *byte_size = input->byte_size;
  if (buffer_count) *buffer_count = 1;
  return nullptr;
}

API TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, const uint32_t index,
                              const void** buffer, uint64_t* buffer_byte_size,
                              TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  CHECK_ARG(input);
  if (index != 0) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "buffer index " + std::to_string(index) + " out of range: input '" + input->name +
                   "' has 1 buffer");
  }
  *buffer = input->data;
  *buffer_byte_size = input->byte_size;
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return nullptr;
}

// ---- responses, outputs, factories ---------------------------------------

API TRITONBACKEND_ResponseFactoryNew(TRITONBACKEND_ResponseFactory** factory,
                                     TRITONBACKEND_Request* request) {
  CHECK_ARG(request);
  request->sink->AddHolder();
  *factory = new TRITONBACKEND_ResponseFactory{request->sink};
  return nullptr;
}

API TRITONBACKEND_ResponseFactoryDelete(TRITONBACKEND_ResponseFactory* factory) {
  if (factory != nullptr) factory->sink->DropHolder();
  delete factory;
  return nullptr;
}

API TRITONBACKEND_ResponseFactorySendFlags(TRITONBACKEND_ResponseFactory* factory,
                                           const uint32_t send_flags) {
  CHECK_ARG(factory);
  SentResponse sent;
  sent.final = (send_flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) != 0;
  factory->sink->Push(std::move(sent));
  return nullptr;
}

API TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response,
                              TRITONBACKEND_Request* request) {
  CHECK_ARG(request);
  request->sink->AddHolder();
  *response = new TRITONBACKEND_Response{request->sink, {}, {}};
  return nullptr;
}

API TRITONBACKEND_ResponseNewFromFactory(TRITONBACKEND_Response** response,
                                         TRITONBACKEND_ResponseFactory* factory) {
  CHECK_ARG(factory);
  factory->sink->AddHolder();
  *response = new TRITONBACKEND_Response{factory->sink, {}, {}};
  return nullptr;
}

API TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response) {
  if (response != nullptr) response->sink->DropHolder();
  delete response;
  return nullptr;
}

API TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response,
                                 TRITONBACKEND_Output** output, const char* name,
                                 const TRITONSERVER_DataType datatype, const int64_t* shape,
                                 const uint32_t dims_count) {
  CHECK_ARG(response);
  CHECK_ARG(name);
  for (auto& out : response->outputs) {
    if (out->name == name) {
      return Err(TRITONSERVER_ERROR_ALREADY_EXISTS,
                 std::string("response already has an output named ") + name);
    }
  }
  auto tensor = std::make_unique<OutputTensor>();
  tensor->name = name;
  tensor->datatype = datatype;
  tensor->shape.assign(shape, shape + dims_count);
  const OutputRules* rules = response->sink ? response->sink->output_rules() : nullptr;
  if (rules != nullptr && !rules->Apply(tensor->name, &tensor->shape)) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, std::string("unexpected inference output '") +
                                                   name + "' for model '" + rules->model_name +
                                                   "'");
  }
  *output = reinterpret_cast<TRITONBACKEND_Output*>(tensor.get());
  response->outputs.push_back(std::move(tensor));
  return nullptr;
}

// What a backend asks of a response it is building: its outputs so far.
API TRITONBACKEND_InferenceResponseOutputByName(TRITONBACKEND_Response* response, const char* name,
                                                TRITONSERVER_DataType* datatype,
                                                const int64_t** shape, uint64_t* dim_count) {
  CHECK_ARG(response);
  CHECK_ARG(name);
  for (const auto& out : response->outputs) {
    if (out->name == name) {
      *datatype = out->datatype;
      *shape = out->shape.data();
      *dim_count = out->shape.size();
      return nullptr;
    }
  }
  return Err(TRITONSERVER_ERROR_NOT_FOUND, std::string("Output name ") + name + " not found.");
}

API TRITONBACKEND_InferenceResponseOutput(TRITONBACKEND_Response* response, const uint32_t index,
                                          const char** name, TRITONSERVER_DataType* datatype,
                                          const int64_t** shape, uint64_t* dim_count) {
  CHECK_ARG(response);
  if (index >= response->outputs.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "out of bounds index " + std::to_string(index) + ": response has " +
                   std::to_string(response->outputs.size()) + " outputs");
  }
  const auto& out = response->outputs[index];
  *name = out->name.c_str();
  *datatype = out->datatype;
  *shape = out->shape.data();
  *dim_count = out->shape.size();
  return nullptr;
}

API TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* output, void** buffer,
                               const uint64_t buffer_byte_size,
                               TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  CHECK_ARG(output);
  auto* tensor = reinterpret_cast<OutputTensor*>(output);
  tensor->data.resize(buffer_byte_size);
  // Whatever memory was asked for, the buffer is CPU memory: say so.
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  *buffer = tensor->data.data();
  tensor->attributes.byte_size = buffer_byte_size;
  return nullptr;
}

API TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response, const uint32_t send_flags,
                               TRITONSERVER_Error* error) {
  CHECK_ARG(response);
  SentResponse sent;
  sent.has_response = error == nullptr;
  sent.final = (send_flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) != 0;
  if (error != nullptr) {  // the error stays the backend's to delete
    sent.has_error = true;
    sent.error_code = error->code;
    sent.error_message = error->message;
  } else {
    sent.outputs = std::move(response->outputs);
    sent.parameters = std::move(response->parameters);
  }
  response->sink->Push(std::move(sent));
  response->sink->DropHolder();
  delete response;
  return nullptr;
}

// ---- memory manager, host policy, buffer attributes, state ---------------

// The memory manager: triton_memory_manager.cc.

API TRITONBACKEND_InputPropertiesForHostPolicy(TRITONBACKEND_Input* input, const char*,
                                               const char** name,
                                               TRITONSERVER_DataType* datatype,
                                               const int64_t** shape, uint32_t* dims_count,
                                               uint64_t* byte_size, uint32_t* buffer_count) {
  return TRITONBACKEND_InputProperties(input, name, datatype, shape, dims_count, byte_size,
                                       buffer_count);
}

API TRITONBACKEND_InputBufferForHostPolicy(TRITONBACKEND_Input* input, const char*,
                                           const uint32_t index, const void** buffer,
                                           uint64_t* buffer_byte_size,
                                           TRITONSERVER_MemoryType* memory_type,
                                           int64_t* memory_type_id) {
  return TRITONBACKEND_InputBuffer(input, index, buffer, buffer_byte_size, memory_type,
                                   memory_type_id);
}

// TRITONBACKEND_ModelServer: triton_inference.cc (the model's server, for BLS).

API TRITONBACKEND_ModelInstanceHostPolicy(TRITONBACKEND_ModelInstance* instance,
                                          TRITONSERVER_Message** host_policy) {
  CHECK_ARG(instance);
  CHECK_ARG(host_policy);
  // The server's message, as Triton's: the backend neither changes nor
  // deletes it (Instance::Create sets it).
  *host_policy = &instance->host_policy;
  return nullptr;
}

API TRITONBACKEND_StateNew(TRITONBACKEND_State** state, TRITONBACKEND_Request* request,
                           const char* name, const TRITONSERVER_DataType datatype,
                           const int64_t* shape, const uint32_t dims_count) {
  CHECK_ARG(state);
  CHECK_ARG(request);
  CHECK_ARG(name);
  if (request->state_names == nullptr || request->state_names->empty()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               std::string("unable to add state '") + name +
                   "'. State configuration is missing for model '" + request->model_name +
                   "'.");
  }
  bool known = false;
  for (const std::string& s : *request->state_names) known = known || s == name;
  if (!known) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               std::string("state '") + name + "' is not a valid state name.");
  }
  auto made = std::make_unique<TRITONBACKEND_State>();
  made->sink = request->sink;
  made->tensor.name = name;
  made->tensor.datatype = datatype;
  made->tensor.shape.assign(shape, shape + dims_count);
  *state = made.get();
  request->states.push_back(std::move(made));
  return nullptr;
}

API TRITONBACKEND_StateBuffer(TRITONBACKEND_State* state, void** buffer,
                              const uint64_t buffer_byte_size,
                              TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id) {
  CHECK_ARG(state);
  state->tensor.data.resize(buffer_byte_size);
  state->tensor.attributes.byte_size = buffer_byte_size;
  *memory_type = TRITONSERVER_MEMORY_CPU;  // whatever was asked for, as OutputBuffer
  *memory_type_id = 0;
  *buffer = state->tensor.data.data();
  return nullptr;
}

API TRITONBACKEND_StateUpdate(TRITONBACKEND_State* state) {
  CHECK_ARG(state);
  state->sink->UpdateState(std::make_unique<OutputTensor>(state->tensor));
  return nullptr;
}

API TRITONSERVER_BufferAttributesNew(TRITONSERVER_BufferAttributes** buffer_attributes) {
  *buffer_attributes = new TRITONSERVER_BufferAttributes();
  return nullptr;
}

API TRITONSERVER_BufferAttributesDelete(TRITONSERVER_BufferAttributes* buffer_attributes) {
  delete buffer_attributes;
  return nullptr;
}

API TRITONSERVER_BufferAttributesSetMemoryTypeId(TRITONSERVER_BufferAttributes* attributes,
                                                 int64_t memory_type_id) {
  attributes->memory_type_id = memory_type_id;
  return nullptr;
}

API TRITONSERVER_BufferAttributesSetMemoryType(TRITONSERVER_BufferAttributes* attributes,
                                               TRITONSERVER_MemoryType memory_type) {
  attributes->memory_type = memory_type;
  return nullptr;
}

API TRITONSERVER_BufferAttributesSetByteSize(TRITONSERVER_BufferAttributes* attributes,
                                             size_t byte_size) {
  attributes->byte_size = byte_size;
  return nullptr;
}

API TRITONSERVER_BufferAttributesMemoryTypeId(TRITONSERVER_BufferAttributes* attributes,
                                              int64_t* memory_type_id) {
  CHECK_ARG(attributes);
  *memory_type_id = attributes->memory_type_id;
  return nullptr;
}

API TRITONSERVER_BufferAttributesMemoryType(TRITONSERVER_BufferAttributes* attributes,
                                            TRITONSERVER_MemoryType* memory_type) {
  CHECK_ARG(attributes);
  *memory_type = attributes->memory_type;
  return nullptr;
}

API TRITONSERVER_BufferAttributesByteSize(TRITONSERVER_BufferAttributes* attributes,
                                          size_t* byte_size) {
  CHECK_ARG(attributes);
  *byte_size = attributes->byte_size;
  return nullptr;
}

// ---- parameters, tracing, attributes ------------------------------------

extern "C" TRITONSERVER_Parameter* TRITONSERVER_ParameterNew(const char* name,
                                                             const TRITONSERVER_ParameterType type,
                                                             const void* value) {
  auto* made = new TRITONSERVER_Parameter();
  pyserver::triton::Parameter& p = made->parameter;
  p.name = name ? name : "";
  p.type = type;
  if (value != nullptr) {
    switch (type) {
      case TRITONSERVER_PARAMETER_INT: p.int_value = *static_cast<const int64_t*>(value); break;
      case TRITONSERVER_PARAMETER_BOOL: p.bool_value = *static_cast<const bool*>(value); break;
      case TRITONSERVER_PARAMETER_DOUBLE:
        p.double_value = *static_cast<const double*>(value);
        break;
      case TRITONSERVER_PARAMETER_STRING: p.string_value = static_cast<const char*>(value); break;
      case TRITONSERVER_PARAMETER_BYTES: break;  // ParameterBytesNew carries a size
    }
  }
  return made;
}

extern "C" TRITONSERVER_Parameter* TRITONSERVER_ParameterBytesNew(const char* name,
                                                                  const void* byte_ptr,
                                                                  const uint64_t size) {
  TRITONSERVER_Parameter* made = TRITONSERVER_ParameterNew(name, TRITONSERVER_PARAMETER_BYTES,
                                                           nullptr);
  if (byte_ptr != nullptr) {
    made->parameter.string_value.assign(static_cast<const char*>(byte_ptr), size);
  }
  return made;
}

extern "C" void TRITONSERVER_ParameterDelete(TRITONSERVER_Parameter* parameter) {
  delete parameter;
}

// A backend's own activity, into its request's trace record (a spawned
// child has none until the server starts its request: nothing to record).
API TRITONSERVER_InferenceTraceReportActivity(TRITONSERVER_InferenceTrace* trace,
                                              uint64_t timestamp, const char* activity_name) {
  CHECK_ARG(trace);
  CHECK_ARG(activity_name);
  if (trace->report != nullptr && trace->id != 0) {
    trace->report(trace->reporter, trace->id, timestamp, activity_name);
  }
  return nullptr;
}

// What SetContext gave, else empty, as Triton's for a trace without
// OpenTelemetry context (callers build a std::string from it).
API TRITONSERVER_InferenceTraceContext(TRITONSERVER_InferenceTrace* trace,
                                       const char** trace_context) {
  CHECK_ARG(trace_context);
  *trace_context = trace != nullptr ? trace->context.c_str() : "";
  return nullptr;
}

API TRITONSERVER_InferenceTraceSetContext(TRITONSERVER_InferenceTrace* trace,
                                          const char* trace_context) {
  CHECK_ARG(trace);
  trace->context = trace_context != nullptr ? trace_context : "";
  return nullptr;
}

API TRITONSERVER_InferenceTraceTensorNew(
    TRITONSERVER_InferenceTrace** trace, TRITONSERVER_InferenceTraceLevel level,
    uint64_t parent_id, TRITONSERVER_InferenceTraceActivityFn_t activity_fn,
    TRITONSERVER_InferenceTraceTensorActivityFn_t tensor_activity_fn,
    TRITONSERVER_InferenceTraceReleaseFn_t release_fn, void* trace_userp) {
  CHECK_ARG(trace);
  // Read as the int the caller passed: the levels are bits, so a
  // combination is no enumerator (see RawEnum).
  uint32_t bits = static_cast<uint32_t>(pyserver::triton::RawEnum(level));
  if (bits & (TRITONSERVER_TRACE_LEVEL_MIN | TRITONSERVER_TRACE_LEVEL_MAX)) {
    bits = (bits & ~3u) | TRITONSERVER_TRACE_LEVEL_TIMESTAMPS;  // the deprecated names
  }
  auto made = new TRITONSERVER_InferenceTrace();
  made->id = pyserver::NextTraceId();
  made->parent_id = parent_id;
  made->program_owned = true;
  made->program.level = bits;
  made->program.activity_fn = activity_fn;
  made->program.tensor_activity_fn = tensor_activity_fn;
  made->program.release_fn = release_fn;
  made->program.userp = trace_userp;
  *trace = made;
  return nullptr;
}

API TRITONSERVER_InferenceTraceNew(TRITONSERVER_InferenceTrace** trace,
                                   TRITONSERVER_InferenceTraceLevel level, uint64_t parent_id,
                                   TRITONSERVER_InferenceTraceActivityFn_t activity_fn,
                                   TRITONSERVER_InferenceTraceReleaseFn_t release_fn,
                                   void* trace_userp) {
  return TRITONSERVER_InferenceTraceTensorNew(trace, level, parent_id, activity_fn, nullptr,
                                              release_fn, trace_userp);
}

API TRITONSERVER_InferenceTraceSpawnChildTrace(TRITONSERVER_InferenceTrace* trace,
                                               TRITONSERVER_InferenceTrace** child_trace) {
  CHECK_ARG(child_trace);
  if (trace == nullptr) {  // an untraced request's child: none, as in Triton
    *child_trace = nullptr;
    return nullptr;
  }
  auto child = new TRITONSERVER_InferenceTrace();
  child->parent_id = trace->id;
  child->spawned = true;
  *child_trace = child;
  return nullptr;
}

extern "C" const char* TRITONSERVER_InferenceTraceLevelString(
    TRITONSERVER_InferenceTraceLevel level) {
  switch (level) {
    case TRITONSERVER_TRACE_LEVEL_DISABLED: return "DISABLED";
    case TRITONSERVER_TRACE_LEVEL_MIN: return "MIN";
    case TRITONSERVER_TRACE_LEVEL_MAX: return "MAX";
    case TRITONSERVER_TRACE_LEVEL_TIMESTAMPS: return "TIMESTAMPS";
    case TRITONSERVER_TRACE_LEVEL_TENSORS: return "TENSORS";
  }
  return "<unknown>";  // a combination of flags names no one level
}

extern "C" const char* TRITONSERVER_InferenceTraceActivityString(
    TRITONSERVER_InferenceTraceActivity activity) {
  // The activity's name is its enumerator's, without the prefix.
  static const char* const kNames[] = {
      "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
      "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END", "TENSOR_QUEUE_INPUT",
      "TENSOR_BACKEND_INPUT", "TENSOR_BACKEND_OUTPUT", "CUSTOM_ACTIVITY"};
  const auto index = static_cast<unsigned>(activity);
  return index < sizeof(kNames) / sizeof(kNames[0]) ? kNames[index] : "<unknown>";
}

API TRITONSERVER_InferenceTraceDelete(TRITONSERVER_InferenceTrace* trace) {
  CHECK_ARG(trace);
  // A request's own trace is part of its request: only a spawned child,
  // not yet given to ServerInferAsync, is the backend's to delete, and a
  // trace of a program's (its own, or one its release callback was given).
  if (!trace->spawned && !trace->program_owned) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "the trace belongs to its request");
  }
  delete trace;
  return nullptr;
}

API TRITONSERVER_InferenceTraceId(TRITONSERVER_InferenceTrace* trace, uint64_t* id) {
  CHECK_ARG(trace);
  CHECK_ARG(id);
  *id = trace->id;
  return nullptr;
}

API TRITONSERVER_InferenceTraceParentId(TRITONSERVER_InferenceTrace* trace, uint64_t* parent_id) {
  CHECK_ARG(trace);
  CHECK_ARG(parent_id);
  *parent_id = trace->parent_id;
  return nullptr;
}

API TRITONSERVER_InferenceTraceModelName(TRITONSERVER_InferenceTrace* trace,
                                         const char** model_name) {
  CHECK_ARG(trace);
  CHECK_ARG(model_name);
  *model_name = trace->model_name.c_str();
  return nullptr;
}

API TRITONSERVER_InferenceTraceModelVersion(TRITONSERVER_InferenceTrace* trace,
                                            int64_t* model_version) {
  CHECK_ARG(trace);
  CHECK_ARG(model_version);
  *model_version = trace->model_version;
  return nullptr;
}

API TRITONSERVER_InferenceTraceRequestId(TRITONSERVER_InferenceTrace* trace,
                                         const char** request_id) {
  CHECK_ARG(trace);
  CHECK_ARG(request_id);
  *request_id = trace->request_id.c_str();
  return nullptr;
}

API TRITONSERVER_BufferAttributesCudaIpcHandle(TRITONSERVER_BufferAttributes* buffer_attributes,
                                               void** cuda_ipc_handle) {
  CHECK_ARG(buffer_attributes);
  CHECK_ARG(cuda_ipc_handle);
  *cuda_ipc_handle = nullptr;  // CPU buffers have none
  return nullptr;
}

API TRITONSERVER_BufferAttributesSetCudaIpcHandle(TRITONSERVER_BufferAttributes* buffer_attributes,
                                                  void*) {
  CHECK_ARG(buffer_attributes);
  return Err(TRITONSERVER_ERROR_UNSUPPORTED, "CUDA IPC handles are not supported for C backends");
}

extern "C" const char* TRITONSERVER_InstanceGroupKindString(TRITONSERVER_InstanceGroupKind kind) {
  switch (kind) {
    case TRITONSERVER_INSTANCEGROUPKIND_AUTO: return "AUTO";
    case TRITONSERVER_INSTANCEGROUPKIND_CPU: return "CPU";
    case TRITONSERVER_INSTANCEGROUPKIND_GPU: return "GPU";
    case TRITONSERVER_INSTANCEGROUPKIND_MODEL: return "MODEL";
  }
  return "<invalid>";
}

API TRITONBACKEND_RequestTrace(TRITONBACKEND_Request* request,
                               TRITONSERVER_InferenceTrace** trace) {
  CHECK_ARG(request);
  CHECK_ARG(trace);
  *trace = request->trace.id != 0 ? &request->trace : nullptr;
  return nullptr;
}

API TRITONBACKEND_BackendAttributeSetParallelModelInstanceLoading(
    TRITONBACKEND_BackendAttribute*, bool) {
  return nullptr;
}

// ---- custom metrics: in a registry /metrics reads ----------------------

namespace {

// One lock for every family and metric: their values change far less often
// than requests come, and a scrape reads them all at once.
std::mutex g_metrics_mu;
std::vector<TRITONSERVER_MetricFamily*> g_families;  // live, in creation order

TRITONSERVER_Error* Unsupported(const TRITONSERVER_Metric* metric, const char* what) {
  const char* kind = metric->family->kind == TRITONSERVER_METRIC_KIND_COUNTER ? "COUNTER"
                     : metric->family->kind == TRITONSERVER_METRIC_KIND_GAUGE ? "GAUGE"
                                                                              : "HISTOGRAM";
  return Err(TRITONSERVER_ERROR_UNSUPPORTED,
             std::string("TRITONSERVER_METRIC_KIND_") + kind + " does not support " + what);
}

std::string LabelValue(const pyserver::triton::Parameter& p) {
  switch (p.type) {
    case TRITONSERVER_PARAMETER_INT: return std::to_string(p.int_value);
    case TRITONSERVER_PARAMETER_BOOL: return p.bool_value ? "true" : "false";
    case TRITONSERVER_PARAMETER_DOUBLE: return std::to_string(p.double_value);
    default: return p.string_value;
  }
}

template <typename T>
void Forget(std::vector<T*>* live, T* gone) {
  for (auto it = live->begin(); it != live->end(); ++it) {
    if (*it == gone) {
      live->erase(it);
      return;
    }
  }
}

}  // namespace

namespace pyserver::triton {

std::vector<MetricFamilySnapshot> SnapshotMetrics() {
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  std::vector<MetricFamilySnapshot> out;
  for (const TRITONSERVER_MetricFamily* family : g_families) {
    MetricFamilySnapshot snapshot{family->name, family->description, family->kind, {}};
    for (const TRITONSERVER_Metric* metric : family->metrics) {
      MetricSample sample;
      sample.labels = metric->labels;
      sample.value = family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM ? metric->sum
                                                                        : metric->value;
      sample.buckets = metric->buckets;
      sample.bucket_counts = metric->bucket_counts;
      snapshot.samples.push_back(std::move(sample));
    }
    out.push_back(std::move(snapshot));
  }
  return out;
}

}  // namespace pyserver::triton

API TRITONSERVER_MetricFamilyNew(TRITONSERVER_MetricFamily** family,
                                 const TRITONSERVER_MetricKind kind, const char* name,
                                 const char* description) {
  CHECK_ARG(family);
  CHECK_ARG(name);
  *family = new TRITONSERVER_MetricFamily{kind, name, description ? description : "", {}};
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  g_families.push_back(*family);
  return nullptr;
}

API TRITONSERVER_MetricFamilyDelete(TRITONSERVER_MetricFamily* family) {
  if (family == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  if (!family->metrics.empty()) {  // Triton's rule: metrics go first
    return Err(TRITONSERVER_ERROR_INTERNAL,
               "Must call MetricDelete on all dependent metrics before calling "
               "MetricFamilyDelete.");
  }
  Forget(&g_families, family);
  delete family;
  return nullptr;
}

API TRITONSERVER_GetMetricFamilyKind(TRITONSERVER_MetricFamily* family,
                                     TRITONSERVER_MetricKind* kind) {
  CHECK_ARG(family);
  *kind = family->kind;
  return nullptr;
}

API TRITONSERVER_MetricArgsNew(TRITONSERVER_MetricArgs** args) {
  CHECK_ARG(args);
  *args = new TRITONSERVER_MetricArgs();
  return nullptr;
}

API TRITONSERVER_MetricArgsSetHistogram(TRITONSERVER_MetricArgs* args, const double* buckets,
                                        const uint64_t buckets_count) {
  CHECK_ARG(args);
  args->kind = TRITONSERVER_METRIC_KIND_HISTOGRAM;
  args->buckets.assign(buckets, buckets + buckets_count);
  args->has_buckets = true;
  return nullptr;
}

API TRITONSERVER_MetricArgsDelete(TRITONSERVER_MetricArgs* args) {
  delete args;
  return nullptr;
}

API TRITONSERVER_MetricNewWithArgs(TRITONSERVER_Metric** metric,
                                   TRITONSERVER_MetricFamily* family,
                                   const TRITONSERVER_Parameter** labels,
                                   const uint64_t label_count,
                                   const TRITONSERVER_MetricArgs* args) {
  CHECK_ARG(metric);
  CHECK_ARG(family);
  auto made = std::make_unique<TRITONSERVER_Metric>();
  made->family = family;
  for (uint64_t i = 0; i < label_count; ++i) {
    if (labels[i] != nullptr) {
      made->labels.emplace_back(labels[i]->parameter.name, LabelValue(labels[i]->parameter));
    }
  }
  if (family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM) {
    if (args == nullptr || !args->has_buckets) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG, "Bucket boundaries not found in Metric args.");
    }
    if (args->kind != TRITONSERVER_METRIC_KIND_HISTOGRAM) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG, "Metric args not set to histogram kind.");
    }
    made->buckets = args->buckets;
    made->bucket_counts.assign(args->buckets.size() + 1, 0);
  } else if (args != nullptr) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               family->kind == TRITONSERVER_METRIC_KIND_COUNTER
                   ? "Unexpected args found in counter Metric constructor."
                   : "Unexpected args found in gauge Metric constructor.");
  }
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  family->metrics.push_back(made.get());
  *metric = made.release();
  return nullptr;
}

API TRITONSERVER_MetricNew(TRITONSERVER_Metric** metric, TRITONSERVER_MetricFamily* family,
                           const TRITONSERVER_Parameter** labels, const uint64_t label_count) {
  return TRITONSERVER_MetricNewWithArgs(metric, family, labels, label_count, nullptr);
}

API TRITONSERVER_MetricDelete(TRITONSERVER_Metric* metric) {
  if (metric == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  Forget(&metric->family->metrics, metric);
  delete metric;
  return nullptr;
}

API TRITONSERVER_MetricValue(TRITONSERVER_Metric* metric, double* value) {
  CHECK_ARG(metric);
  CHECK_ARG(value);
  if (metric->family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM) {
    return Unsupported(metric, "Value");
  }
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  *value = metric->value;
  return nullptr;
}

API TRITONSERVER_GetMetricKind(TRITONSERVER_Metric* metric, TRITONSERVER_MetricKind* kind) {
  CHECK_ARG(metric);
  CHECK_ARG(kind);
  *kind = metric->family->kind;  // fixed at the family's creation: no lock
  return nullptr;
}

API TRITONSERVER_MetricSet(TRITONSERVER_Metric* metric, double value) {
  CHECK_ARG(metric);
  if (metric->family->kind != TRITONSERVER_METRIC_KIND_GAUGE) return Unsupported(metric, "Set");
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  metric->value = value;
  return nullptr;
}

API TRITONSERVER_MetricObserve(TRITONSERVER_Metric* metric, double value) {
  CHECK_ARG(metric);
  if (metric->family->kind != TRITONSERVER_METRIC_KIND_HISTOGRAM) {
    return Unsupported(metric, "Observe");
  }
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  size_t bucket = 0;  // the first whose upper bound holds the value
  while (bucket < metric->buckets.size() && value > metric->buckets[bucket]) ++bucket;
  ++metric->bucket_counts[bucket];
  metric->sum += value;
  ++metric->count;
  return nullptr;
}

API TRITONSERVER_MetricIncrement(TRITONSERVER_Metric* metric, double value) {
  CHECK_ARG(metric);
  if (metric->family->kind == TRITONSERVER_METRIC_KIND_HISTOGRAM) {
    return Unsupported(metric, "Increment");
  }
  if (metric->family->kind == TRITONSERVER_METRIC_KIND_COUNTER && value < 0) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
               "non-negative values.");
  }
  std::lock_guard<std::mutex> lock(g_metrics_mu);
  metric->value += value;
  return nullptr;
}
