/* A Triton C backend for pyserver's tests that answers readiness itself
 * (TRITONBACKEND_ModelInstanceReady): an instance is not ready while the
 * file named by the model's "not_ready_file" parameter exists. Each request
 * is answered with an empty response. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

/* The value of "not_ready_file" in the config JSON (a plain path). */
static char* MarkerFromConfig(const char* json) {
  const char* value = strstr(json, "\"not_ready_file\"");
  if (value == NULL || (value = strstr(value, "\"string_value\"")) == NULL) return NULL;
  value = strchr(value + strlen("\"string_value\""), '"');
  if (value == NULL) return NULL;
  const char* end = strchr(++value, '"');
  if (end == NULL) return NULL;
  return strndup(value, (size_t)(end - value));
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json;
  size_t size;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  char* marker = err == NULL ? MarkerFromConfig(json) : NULL;
  TRITONSERVER_MessageDelete(config);
  RETURN_IF_ERROR(err);
  if (marker == NULL) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "config has no 'not_ready_file'");
  }
  return TRITONBACKEND_ModelSetState(model, marker);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  free(state);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReady(TRITONBACKEND_ModelInstance* inst) {
  TRITONBACKEND_Model* model;
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(inst, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  if (access((const char*)state, F_OK) == 0) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "marked not ready");
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  (void)inst;
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Response* response;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, requests[r]));
    RETURN_IF_ERROR(
        TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
