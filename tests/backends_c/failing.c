/* A Triton C backend for pyserver's tests that fails the way its model's
 * name says: fail_model_init, fail_instance_init, fail_execute (Execute
 * returns an error: the requests stay the server's), fail_response (each
 * request gets an error response), fail_output_name (each response asks for
 * an output its config does not declare, and sends the refusal). */
#include <string.h>

#include "triton/core/tritonbackend.h"

static int Named(TRITONBACKEND_Model* model, const char* what) {
  const char* name = "";
  TRITONBACKEND_ModelName(model, &name);
  return strstr(name, what) != NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  if (Named(model, "fail_model_init")) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "model init failed on purpose");
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* inst) {
  TRITONBACKEND_Model* model;
  TRITONBACKEND_ModelInstanceModel(inst, &model);
  if (Named(model, "fail_instance_init")) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "instance init failed on purpose");
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  TRITONBACKEND_Model* model;
  TRITONBACKEND_ModelInstanceModel(inst, &model);
  if (Named(model, "fail_execute")) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "execute failed on purpose");
  }
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Response* response;
    TRITONBACKEND_ResponseNew(&response, requests[r]);
    TRITONSERVER_Error* err;
    if (Named(model, "fail_output_name")) {
      TRITONBACKEND_Output* output;
      const int64_t shape[2] = {1, 1};
      err = TRITONBACKEND_ResponseOutput(response, &output, "NOT_IN_CONFIG",
                                         TRITONSERVER_TYPE_FP32, shape, 2);
      if (err == NULL) err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "not refused");
    } else {
      err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "bad request on purpose");
    }
    TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
    TRITONSERVER_ErrorDelete(err);
    TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL);
  }
  return NULL;
}
