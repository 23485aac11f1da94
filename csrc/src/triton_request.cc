// What a Triton backend asks of a request beyond its inputs and outputs:
// its parameters, string correlation ID, timeout, cancellation, buffer
// attributes and output buffer preferences; a response's parameters; and
// the instance-level reports pyserver takes but does not use (response
// statistics, memory usage, secondary devices, profiles, preferred
// instance groups). Texts as Triton's core words them.
#include <string>

#include "triton_api_internal.h"

using pyserver::ResponseOutcome;
using pyserver::triton::Err;
using pyserver::triton::Parameter;

namespace {

TRITONSERVER_Error* AddParameter(TRITONBACKEND_Response* response, const char* name,
                                 Parameter parameter) {
  CHECK_ARG(response);
  CHECK_ARG(name);
  parameter.name = name;
  response->parameters.push_back(std::move(parameter));
  return nullptr;
}

}  // namespace

// ---- requests --------------------------------------------------------------

API TRITONBACKEND_RequestCorrelationIdString(TRITONBACKEND_Request* request, const char** id) {
  CHECK_ARG(request);
  if (!request->correlation_is_string) {  // a number, or none (Triton's 0)
    return Err(TRITONSERVER_ERROR_INVALID_ARG, pyserver::triton::RequestTag(request->id) +
                                                   "correlation ID in request is not a string");
  }
  *id = request->correlation_id_string.c_str();
  return nullptr;
}

API TRITONBACKEND_InferenceRequestTimeoutMicroseconds(TRITONBACKEND_Request* request,
                                                      uint64_t* timeout) {
  CHECK_ARG(request);
  *timeout = request->timeout_us;
  return nullptr;
}

API TRITONBACKEND_RequestIsCancelled(TRITONBACKEND_Request* request, bool* is_cancelled) {
  CHECK_ARG(request);
  *is_cancelled = request->sink->IsCancelled();
  return nullptr;
}

API TRITONBACKEND_ResponseFactoryIsCancelled(TRITONBACKEND_ResponseFactory* factory,
                                             bool* is_cancelled) {
  CHECK_ARG(factory);
  *is_cancelled = factory->sink->IsCancelled();
  return nullptr;
}

API TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* request, uint32_t* count) {
  CHECK_ARG(request);
  *count = static_cast<uint32_t>(request->parameters.size());
  return nullptr;
}

API TRITONBACKEND_RequestParameter(TRITONBACKEND_Request* request, const uint32_t index,
                                   const char** key, TRITONSERVER_ParameterType* type,
                                   const void** vvalue) {
  CHECK_ARG(request);
  if (index >= request->parameters.size()) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "out of bounds index " + std::to_string(index) + ": request has " +
                   std::to_string(request->parameters.size()) + " parameters");
  }
  const Parameter& parameter = request->parameters[index];
  *key = parameter.name.c_str();
  *type = parameter.type;
  *vvalue = parameter.value();
  return nullptr;
}

API TRITONBACKEND_RequestOutputBufferProperties(TRITONBACKEND_Request* request, const char*,
                                                size_t*, TRITONSERVER_MemoryType* memory_type,
                                                int64_t* memory_type_id) {
  CHECK_ARG(request);
  // Outputs are CPU memory, whatever the caller prefers (as OutputBuffer says).
  if (memory_type != nullptr) *memory_type = TRITONSERVER_MEMORY_CPU;
  if (memory_type_id != nullptr) *memory_type_id = 0;
  return nullptr;
}

API TRITONBACKEND_InputBufferAttributes(TRITONBACKEND_Input* input, const uint32_t index,
                                        const void** buffer,
                                        TRITONSERVER_BufferAttributes** buffer_attributes) {
  CHECK_ARG(input);
  if (index != 0) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "input buffer index is out of range: input '" + input->name + "' has 1 buffer");
  }
  input->attributes.byte_size = input->byte_size;
  *buffer = input->data;
  *buffer_attributes = &input->attributes;
  return nullptr;
}

API TRITONBACKEND_OutputBufferAttributes(TRITONBACKEND_Output* output,
                                         TRITONSERVER_BufferAttributes** buffer_attributes) {
  CHECK_ARG(output);
  *buffer_attributes = &reinterpret_cast<pyserver::triton::OutputTensor*>(output)->attributes;
  return nullptr;
}

// ---- response parameters ---------------------------------------------------

API TRITONBACKEND_ResponseSetStringParameter(TRITONBACKEND_Response* response, const char* name,
                                             const char* value) {
  CHECK_ARG(value);
  Parameter parameter;
  parameter.string_value = value;
  return AddParameter(response, name, std::move(parameter));
}

API TRITONBACKEND_ResponseSetIntParameter(TRITONBACKEND_Response* response, const char* name,
                                          const int64_t value) {
  Parameter parameter;
  parameter.type = TRITONSERVER_PARAMETER_INT;
  parameter.int_value = value;
  return AddParameter(response, name, std::move(parameter));
}

API TRITONBACKEND_ResponseSetBoolParameter(TRITONBACKEND_Response* response, const char* name,
                                           const bool value) {
  Parameter parameter;
  parameter.type = TRITONSERVER_PARAMETER_BOOL;
  parameter.bool_value = value;
  return AddParameter(response, name, std::move(parameter));
}

API TRITONBACKEND_ResponseSetDoubleParameter(TRITONBACKEND_Response* response, const char* name,
                                             const double value) {
  Parameter parameter;
  parameter.type = TRITONSERVER_PARAMETER_DOUBLE;
  parameter.double_value = value;
  return AddParameter(response, name, std::move(parameter));
}

// ---- per-response statistics ------------------------------------------------

API TRITONBACKEND_ModelInstanceResponseStatisticsNew(
    TRITONBACKEND_ModelInstanceResponseStatistics** response_statistics) {
  CHECK_ARG(response_statistics);
  *response_statistics = new TRITONBACKEND_ModelInstanceResponseStatistics();
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsDelete(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics) {
  delete response_statistics;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics,
    TRITONBACKEND_ModelInstance* model_instance) {
  CHECK_ARG(response_statistics);
  response_statistics->instance = model_instance;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics,
    TRITONBACKEND_ResponseFactory* response_factory) {
  CHECK_ARG(response_statistics);
  response_statistics->factory = response_factory;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t ns) {
  CHECK_ARG(response_statistics);
  response_statistics->response_start_ns = ns;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t ns) {
  CHECK_ARG(response_statistics);
  response_statistics->compute_output_start_ns = ns;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics, uint64_t ns) {
  CHECK_ARG(response_statistics);
  response_statistics->response_end_ns = ns;
  return nullptr;
}

API TRITONBACKEND_ModelInstanceResponseStatisticsSetError(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics,
    TRITONSERVER_Error* error) {
  CHECK_ARG(response_statistics);
  // Only its code counts (cancelled or failed); the caller keeps the error.
  response_statistics->failed = error != nullptr;
  if (error != nullptr) response_statistics->error_code = TRITONSERVER_ErrorCode(error);
  return nullptr;
}

namespace {

// The response's durations as Triton derives them from its three times, or
// Triton's error for times out of order.
TRITONSERVER_Error* ResponseDurations(const TRITONBACKEND_ModelInstanceResponseStatistics& rs,
                                      bool with_output, uint64_t* infer_ns, uint64_t* output_ns) {
  if (with_output) {
    if (rs.response_start_ns > rs.compute_output_start_ns) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                 "Response start cannot happen after compute output start");
    }
    if (rs.compute_output_start_ns > rs.response_end_ns) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                 "Compute output start cannot happen after response end");
    }
    *infer_ns = rs.compute_output_start_ns - rs.response_start_ns;
    *output_ns = rs.response_end_ns - rs.compute_output_start_ns;
    return nullptr;
  }
  if (rs.response_start_ns > rs.response_end_ns) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "Response start cannot happen after response end");
  }
  *infer_ns = rs.response_end_ns - rs.response_start_ns;
  *output_ns = 0;
  return nullptr;
}

}  // namespace

API TRITONBACKEND_ModelInstanceReportResponseStatistics(
    TRITONBACKEND_ModelInstanceResponseStatistics* response_statistics) {
  CHECK_ARG(response_statistics);
  const auto& rs = *response_statistics;
  if (rs.instance == nullptr || rs.factory == nullptr) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "model instance and response factory must be set on the response statistics");
  }
  // As in Triton, the report takes its index even when its times are refused.
  const uint32_t index = rs.factory->sink->NextResponseIndex();
  ResponseOutcome outcome = ResponseOutcome::kSuccess;
  bool with_output = rs.compute_output_start_ns > 0;
  if (rs.failed && rs.error_code == TRITONSERVER_ERROR_CANCELLED) {
    outcome = ResponseOutcome::kCancel;
    with_output = false;
  } else if (rs.failed) {
    outcome = ResponseOutcome::kFail;
  } else if (!with_output) {
    outcome = ResponseOutcome::kEmpty;
  }
  uint64_t infer_ns = 0, output_ns = 0;
  TRITONSERVER_Error* err = ResponseDurations(rs, with_output, &infer_ns, &output_ns);
  if (err != nullptr) return err;
  if (rs.instance->stats != nullptr) {
    rs.instance->stats->RecordResponse(index, outcome, infer_ns, output_ns);
  }
  return nullptr;
}

// ---- instance reports --------------------------------------------------------


API TRITONBACKEND_ModelInstanceReportMemoryUsage(TRITONBACKEND_ModelInstance* instance,
                                                 TRITONSERVER_BufferAttributes** usage,
                                                 uint32_t usage_size) {
  CHECK_ARG(instance);
  if (usage_size > 0) {
    CHECK_ARG(usage);
  }
  instance->memory_usage.Replace(usage, usage_size);
  return nullptr;
}

API TRITONBACKEND_ModelReportMemoryUsage(TRITONBACKEND_Model* model,
                                         TRITONSERVER_BufferAttributes** usage,
                                         uint32_t usage_size) {
  CHECK_ARG(model);
  if (usage_size > 0) {
    CHECK_ARG(usage);
  }
  model->memory_usage.Replace(usage, usage_size);
  return nullptr;
}

API TRITONBACKEND_ModelInstanceSecondaryDeviceCount(TRITONBACKEND_ModelInstance* instance,
                                                    uint32_t* count) {
  CHECK_ARG(instance);
  *count = 0;  // pyserver's configs name no secondary devices
  return nullptr;
}

API TRITONBACKEND_ModelInstanceSecondaryDeviceProperties(TRITONBACKEND_ModelInstance* instance,
                                                         uint32_t index, const char**,
                                                         int64_t*) {
  CHECK_ARG(instance);
  return Err(TRITONSERVER_ERROR_INVALID_ARG,
             "out of bounds index " + std::to_string(index) + ": instance has 0 secondary devices");
}

API TRITONBACKEND_ModelInstanceProfileCount(TRITONBACKEND_ModelInstance* instance,
                                            uint32_t* count) {
  CHECK_ARG(instance);
  *count = 0;  // TensorRT optimization profiles: not a C backend's here
  return nullptr;
}

API TRITONBACKEND_ModelInstanceProfileName(TRITONBACKEND_ModelInstance* instance,
                                           const uint32_t index, const char**) {
  CHECK_ARG(instance);
  return Err(TRITONSERVER_ERROR_INVALID_ARG,
             "out of bounds index " + std::to_string(index) + ": instance has 0 profiles");
}

API TRITONBACKEND_StateBufferAttributes(TRITONBACKEND_State* state,
                                        TRITONSERVER_BufferAttributes** buffer_attributes) {
  CHECK_ARG(state);
  *buffer_attributes = &state->tensor.attributes;
  return nullptr;
}

API TRITONBACKEND_BackendArtifacts(TRITONBACKEND_Backend* backend,
                                   TRITONBACKEND_ArtifactType* artifact_type,
                                   const char** location) {
  CHECK_ARG(backend);
  *artifact_type = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  *location = backend->location.c_str();
  return nullptr;
}

API TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
    TRITONBACKEND_BackendAttribute* backend_attributes, const TRITONSERVER_InstanceGroupKind,
    const uint64_t, const uint64_t*, const uint64_t) {
  CHECK_ARG(backend_attributes);
  return nullptr;  // a config without instance_group gets one CPU instance
}
