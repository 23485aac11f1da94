/* A Triton C backend for pyserver's tests with implicit state (sequence
 * batching): OUT = INPUT_STATE + IN (INT32 [1]), and OUTPUT_STATE = OUT
 * through TRITONBACKEND_StateNew/StateBuffer/StateUpdate. A request whose
 * parameter "skip_update" is true leaves the state as it was (Triton's
 * rule); one whose "bad_state" is true asks for a state the config does not
 * have, and answers with that error. */
#include <stdbool.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

static TRITONSERVER_Error* Int32Of(TRITONBACKEND_Request* request, const char* name,
                                   int32_t* value) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, name, &input));
  const void* data;
  uint64_t bytes;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &bytes, &mem, &mem_id));
  *value = *(const int32_t*)data;
  return NULL;
}

static bool Flag(TRITONBACKEND_Request* request, const char* wanted) {
  uint32_t count = 0;
  TRITONBACKEND_RequestParameterCount(request, &count);
  for (uint32_t i = 0; i < count; ++i) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* value;
    if (TRITONBACKEND_RequestParameter(request, i, &key, &type, &value) == NULL &&
        type == TRITONSERVER_PARAMETER_BOOL && strcmp(key, wanted) == 0) {
      return *(const bool*)value;
    }
  }
  return false;
}

static TRITONSERVER_Error* Answer(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response) {
  int32_t in, state;
  RETURN_IF_ERROR(Int32Of(request, "IN", &in));
  RETURN_IF_ERROR(Int32Of(request, "INPUT_STATE", &state));
  const int32_t sum = state + in;
  const int64_t shape[1] = {1};
  TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
  int64_t mem_id = 0;
  if (Flag(request, "bad_state")) {
    TRITONBACKEND_State* bad;
    RETURN_IF_ERROR(TRITONBACKEND_StateNew(&bad, request, "NOPE", TRITONSERVER_TYPE_INT32, shape, 1));
  }
  if (!Flag(request, "skip_update")) {
    TRITONBACKEND_State* next;
    RETURN_IF_ERROR(
        TRITONBACKEND_StateNew(&next, request, "OUTPUT_STATE", TRITONSERVER_TYPE_INT32, shape, 1));
    void* buffer;
    RETURN_IF_ERROR(TRITONBACKEND_StateBuffer(next, &buffer, sizeof(int32_t), &mem, &mem_id));
    *(int32_t*)buffer = sum;
    RETURN_IF_ERROR(TRITONBACKEND_StateUpdate(next));
  }
  TRITONBACKEND_Output* output;
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_INT32, shape, 1));
  void* out;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, sizeof(int32_t), &mem, &mem_id));
  *(int32_t*)out = sum;
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  (void)instance;
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Response* response;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, requests[r]));
    TRITONSERVER_Error* err = Answer(requests[r], response);
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err));
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
