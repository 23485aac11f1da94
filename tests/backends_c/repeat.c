/* A decoupled Triton C backend for pyserver's tests: for IN (INT32, [n])
 * it sends n responses, OUT = [IN[i]], through the request's response
 * factory, then the final flag alone. */
#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

static TRITONSERVER_Error* Repeat(TRITONBACKEND_Request* request) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &input));
  const void* data;
  uint64_t bytes;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &bytes, &mem, &mem_id));
  TRITONBACKEND_ResponseFactory* factory;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseFactoryNew(&factory, request));
  const int32_t* values = data;
  for (uint64_t i = 0; i < bytes / sizeof(int32_t); ++i) {
    TRITONBACKEND_Response* response;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNewFromFactory(&response, factory));
    TRITONBACKEND_Output* output;
    const int64_t shape[1] = {1};
    RETURN_IF_ERROR(
        TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_INT32, shape, 1));
    void* out;
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, sizeof(int32_t), &mem, &mem_id));
    *(int32_t*)out = values[i];
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, 0, NULL));
  }
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL));
  return TRITONBACKEND_ResponseFactoryDelete(factory);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  (void)inst;
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(Repeat(requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
