/* A Triton C backend for pyserver's tests that answers what it was asked:
 * OUT = IN (INT32), and response parameters echoing the request's
 * properties: each request parameter under its own name and type, and
 * "correlation_id" (its string, or its number as an int), "flags",
 * "timeout_us", "cancelled"; it logs a line per batch at INFO and VERBOSE. IN[0] = -7
 * runs until the request is cancelled (at most 20 s) and logs that it was. */
#include <string.h>
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

static TRITONSERVER_Error* EchoParameters(TRITONBACKEND_Request* request,
                                          TRITONBACKEND_Response* response) {
  uint32_t count;
  RETURN_IF_ERROR(TRITONBACKEND_RequestParameterCount(request, &count));
  for (uint32_t i = 0; i < count; ++i) {
    const char* key;
    TRITONSERVER_ParameterType type;
    const void* value;
    RETURN_IF_ERROR(TRITONBACKEND_RequestParameter(request, i, &key, &type, &value));
    switch (type) {
      case TRITONSERVER_PARAMETER_INT:
        RETURN_IF_ERROR(TRITONBACKEND_ResponseSetIntParameter(response, key, *(const int64_t*)value));
        break;
      case TRITONSERVER_PARAMETER_BOOL:
        RETURN_IF_ERROR(TRITONBACKEND_ResponseSetBoolParameter(response, key, *(const bool*)value));
        break;
      case TRITONSERVER_PARAMETER_DOUBLE:
        RETURN_IF_ERROR(
            TRITONBACKEND_ResponseSetDoubleParameter(response, key, *(const double*)value));
        break;
      default:
        RETURN_IF_ERROR(TRITONBACKEND_ResponseSetStringParameter(response, key, value));
    }
  }
  /* as Triton's Python backend asks: the number, else (an error) the string */
  uint64_t corr;
  TRITONSERVER_Error* not_number = TRITONBACKEND_RequestCorrelationId(request, &corr);
  if (not_number == NULL) {
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetIntParameter(response, "correlation_id", (int64_t)corr));
    const char* none;  /* a number (or none) is not a string */
    TRITONSERVER_Error* not_string = TRITONBACKEND_RequestCorrelationIdString(request, &none);
    if (not_string == NULL) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL,
                                                         "a numeric correlation ID read as a string");
    TRITONSERVER_ErrorDelete(not_string);
  } else {
    TRITONSERVER_ErrorDelete(not_number);
    const char* corr_string;
    RETURN_IF_ERROR(TRITONBACKEND_RequestCorrelationIdString(request, &corr_string));
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSetStringParameter(response, "correlation_id", corr_string));
  }
  uint32_t flags;
  RETURN_IF_ERROR(TRITONBACKEND_RequestFlags(request, &flags));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSetIntParameter(response, "flags", flags));
  uint64_t timeout;
  RETURN_IF_ERROR(TRITONBACKEND_InferenceRequestTimeoutMicroseconds(request, &timeout));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSetIntParameter(response, "timeout_us", (int64_t)timeout));
  bool cancelled;
  RETURN_IF_ERROR(TRITONBACKEND_RequestIsCancelled(request, &cancelled));
  return TRITONBACKEND_ResponseSetBoolParameter(response, "cancelled", cancelled);
}

static TRITONSERVER_Error* Answer(TRITONBACKEND_Request* request, const char* kind) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "IN", &input));
  const int64_t* shape;
  uint32_t dims;
  TRITONSERVER_DataType datatype;
  RETURN_IF_ERROR(TRITONBACKEND_InputProperties(input, NULL, &datatype, &shape, &dims, NULL, NULL));
  const void* data;
  TRITONSERVER_BufferAttributes* attributes;
  RETURN_IF_ERROR(TRITONBACKEND_InputBufferAttributes(input, 0, &data, &attributes));
  size_t bytes;
  RETURN_IF_ERROR(TRITONSERVER_BufferAttributesByteSize(attributes, &bytes));
  if (bytes >= sizeof(int32_t) && *(const int32_t*)data == -7) {
    /* IN[0] = -7: runs until cancelled (at most 20 s), polling as a long
     * running backend does, and logs which came first */
    bool cancelled = false;
    for (int i = 0; i < 20000 && !cancelled; ++i) {
      RETURN_IF_ERROR(TRITONBACKEND_RequestIsCancelled(request, &cancelled));
      if (!cancelled) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__,
                            cancelled ? "params: cancelled while running" : "params: never cancelled");
  }
  TRITONBACKEND_Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  RETURN_IF_ERROR(EchoParameters(request, response));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSetStringParameter(response, "instance_kind", kind));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSetStringParameter(response, "input_datatype",
                                                           TRITONSERVER_DataTypeString(datatype)));
  RETURN_IF_ERROR(TRITONBACKEND_ResponseSetBoolParameter(
      response, "log_verbose", TRITONSERVER_LogIsEnabled(TRITONSERVER_LOG_VERBOSE)));
  TRITONBACKEND_Output* output;
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseOutput(response, &output, "OUT", datatype, shape, dims));
  void* out;
  TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
  int64_t mem_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, bytes, &mem, &mem_id));
  memcpy(out, data, bytes);
  return TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  TRITONSERVER_InstanceGroupKind kind;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceKind(instance, &kind));
  /* one line per batch at each level (the server's settings choose) */
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, "params: a \"batch\"");
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_VERBOSE, __FILE__, __LINE__, "params: verbose");
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(Answer(requests[r], TRITONSERVER_InstanceGroupKindString(kind)));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
