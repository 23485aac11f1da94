/* A Triton C backend for pyserver's tests that controls its server's
 * models: a request's parameter "load" (a model name, with an optional
 * "config" parameter passed on) loads that model, "unload" unloads it,
 * through TRITONSERVER_ServerLoadModelWithParameters / ServerUnloadModel on
 * the server TRITONBACKEND_ModelServer names. The response is OUT = IN, or
 * the call's error. */
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

static TRITONSERVER_Error* Control(TRITONBACKEND_ModelInstance* instance,
                                   TRITONBACKEND_Request* request) {
  TRITONBACKEND_Model* model;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  TRITONSERVER_Server* server;
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &server));
  uint32_t count;
  RETURN_IF_ERROR(TRITONBACKEND_RequestParameterCount(request, &count));
  const char* load = NULL;
  const char* unload = NULL;
  const char* config = NULL;
  for (uint32_t i = 0; i < count; ++i) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* value;
    RETURN_IF_ERROR(TRITONBACKEND_RequestParameter(request, i, &key, &type, &value));
    if (type != TRITONSERVER_PARAMETER_STRING) continue;
    if (strcmp(key, "load") == 0) load = value;
    if (strcmp(key, "unload") == 0) unload = value;
    if (strcmp(key, "config") == 0) config = value;
  }
  if (load != NULL) {
    TRITONSERVER_Parameter* parameter =
        config ? TRITONSERVER_ParameterNew("config", TRITONSERVER_PARAMETER_STRING, config) : NULL;
    const TRITONSERVER_Parameter* parameters[1] = {parameter};
    TRITONSERVER_Error* err =
        TRITONSERVER_ServerLoadModelWithParameters(server, load, parameters, parameter ? 1 : 0);
    if (parameter) TRITONSERVER_ParameterDelete(parameter);
    RETURN_IF_ERROR(err);
  }
  if (unload != NULL) RETURN_IF_ERROR(TRITONSERVER_ServerUnloadModel(server, unload));
  return NULL;
}

static TRITONSERVER_Error* Answer(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &input));
  const int64_t* shape;
  uint32_t dims;
  uint64_t bytes;
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, NULL, NULL, &shape, &dims, &bytes, NULL));
  const void* data;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &bytes, &mem, &mem_id));
  TRITONBACKEND_Output* output;
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_INT32, shape, dims));
  void* out;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, bytes, &mem, &mem_id));
  memcpy(out, data, bytes);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Response* response;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, requests[r]));
    TRITONSERVER_Error* err = Control(instance, requests[r]);
    if (err == NULL) err = Answer(requests[r], response);
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err));
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
