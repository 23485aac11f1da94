/* A Triton C backend for pyserver's tests: OUTPUT0 = INPUT0, any type and
 * shape, one response per request; counts the instances it made and reports
 * statistics as a Triton backend does, and its memory usage: the model 4096
 * bytes of CPU memory (reported twice, the second report replacing a first
 * of 1 byte) and 512 of pinned memory, each instance 1024 of CPU memory. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  uint32_t major, minor;
  RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNSUPPORTED, "API version mismatch");
  }
  TRITONSERVER_Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_BackendConfig(backend, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, json);
  /* --backend-config=identity,refuse=1 makes the library refuse to start */
  int refuse = strstr(json, "\"refuse\"") != NULL;  /* config stays the server's */
  if (refuse) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "refused by config");
  return NULL;
}

/* usage[i] = {memory type, byte size}, all on device 0. */
static TRITONSERVER_Error* Usage(TRITONSERVER_BufferAttributes** attrs, const size_t usage[][2],
                                 uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    RETURN_IF_ERROR(TRITONSERVER_BufferAttributesNew(&attrs[i]));
    RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryType(attrs[i],
                                                               (TRITONSERVER_MemoryType)usage[i][0]));
    RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetMemoryTypeId(attrs[i], 0));
    RETURN_IF_ERROR(TRITONSERVER_BufferAttributesSetByteSize(attrs[i], usage[i][1]));
  }
  return NULL;
}

static void FreeUsage(TRITONSERVER_BufferAttributes** attrs, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) TRITONSERVER_BufferAttributesDelete(attrs[i]);
}

static TRITONSERVER_Error* ReportModelUsage(TRITONBACKEND_Model* model) {
  const size_t first[1][2] = {{TRITONSERVER_MEMORY_CPU, 1}};
  const size_t usage[2][2] = {{TRITONSERVER_MEMORY_CPU, 4096}, {TRITONSERVER_MEMORY_CPU_PINNED, 512}};
  TRITONSERVER_BufferAttributes* attrs[2];
  RETURN_IF_ERROR(Usage(attrs, first, 1));
  TRITONSERVER_Error* err = TRITONBACKEND_ModelReportMemoryUsage(model, attrs, 1);
  FreeUsage(attrs, 1);
  RETURN_IF_ERROR(err);
  RETURN_IF_ERROR(Usage(attrs, usage, 2));
  err = TRITONBACKEND_ModelReportMemoryUsage(model, attrs, 2);
  FreeUsage(attrs, 2);
  return err;
}

/* Auto-completion as Triton's identity backend offers it: a config that
 * declares no INPUT0, with auto-complete on, gets INPUT0/OUTPUT0 (FP32, any
 * length), max_batch_size 8 and dynamic batching. */
static TRITONSERVER_Error* AutoComplete(TRITONBACKEND_Model* model) {
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  char json[1024];
  snprintf(json, sizeof json,
           "{\"name\":\"%s\",\"backend\":\"identity\",\"max_batch_size\":8,"
           "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
           "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
           "\"dynamic_batching\":{\"max_queue_delay_microseconds\":1000}}",
           name);
  TRITONSERVER_Message* completed;
  RETURN_IF_ERROR(TRITONSERVER_MessageNewFromSerializedJson(&completed, json, strlen(json)));
  TRITONSERVER_Error* err = TRITONBACKEND_ModelSetConfig(model, 1, completed);
  TRITONSERVER_MessageDelete(completed);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  int ok = strstr(json, "\"INPUT0\"") != NULL;
  TRITONSERVER_MessageDelete(config);
  bool auto_complete = false;
  RETURN_IF_ERROR(TRITONBACKEND_ModelAutoCompleteConfig(model, &auto_complete));
  if (!ok && auto_complete) {
    RETURN_IF_ERROR(AutoComplete(model));
    ok = 1;
  }
  if (!ok) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "config has no INPUT0");
  RETURN_IF_ERROR(ReportModelUsage(model));
  int* instances = calloc(1, sizeof(int));
  return TRITONBACKEND_ModelSetState(model, instances);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  free(state);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* inst) {
  TRITONBACKEND_Model* model;
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(inst, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  ++*(int*)state;
  /* its host policy in the log, as a backend that places its work reads it
     (the message stays the server's: not deleted) */
  TRITONSERVER_Message* policy;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceHostPolicy(inst, &policy));
  const char* policy_json;
  size_t policy_size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(policy, &policy_json, &policy_size));
  char line[512];
  snprintf(line, sizeof(line), "identity: host policy %s", policy_json);
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, line);
  const size_t usage[1][2] = {{TRITONSERVER_MEMORY_CPU, 1024}};
  TRITONSERVER_BufferAttributes* attrs[1];
  RETURN_IF_ERROR(Usage(attrs, usage, 1));
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceReportMemoryUsage(inst, attrs, 1);
  FreeUsage(attrs, 1);
  return err;
}

static TRITONSERVER_Error* Respond(TRITONBACKEND_Request* request) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  TRITONSERVER_DataType dtype;
  const int64_t* shape;
  uint32_t dims, buffers;
  uint64_t bytes;
  RETURN_IF_ERROR(
      TRITONBACKEND_InputProperties(input, NULL, &dtype, &shape, &dims, &bytes, &buffers));
  TRITONBACKEND_Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  TRITONBACKEND_Output* output;
  TRITONSERVER_Error* err =
      TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", dtype, shape, dims);
  void* out = NULL;
  TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
  int64_t mem_id = 0;
  if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &out, bytes, &mem, &mem_id);
  uint64_t done = 0;
  for (uint32_t b = 0; err == NULL && b < buffers; ++b) {
    const void* in;
    uint64_t n;
    err = TRITONBACKEND_InputBuffer(input, b, &in, &n, &mem, &mem_id);
    if (err == NULL) {
      memcpy((char*)out + done, in, n);
      done += n;
    }
  }
  TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(Respond(requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceReportStatistics(inst, requests[r], 1, 0, 0, 0, 0));
  }
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceReportBatchStatistics(inst, count, 0, 0, 0, 0));
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
