/* A decoupled Triton C backend for pyserver's tests: for IN (INT32, [n])
 * it sends n responses, OUT = [IN[i]], through the request's response
 * factory, then the final flag alone; a value of -1 is sent as an error
 * response instead, and -2 sends nothing but waits 400 ms (all of it inside
 * Execute: what was sent before must reach the client meanwhile). Each response and the final flag are reported with
 * TRITONBACKEND_ModelInstanceReportResponseStatistics. */
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

static uint64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One response's statistics: output_start 0 when it computed no output. */
static TRITONSERVER_Error* Report(TRITONBACKEND_ModelInstance* inst,
                                  TRITONBACKEND_ResponseFactory* factory, uint64_t start,
                                  uint64_t output_start, uint64_t end, TRITONSERVER_Error* error) {
  TRITONBACKEND_ModelInstanceResponseStatistics* stats;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceResponseStatisticsNew(&stats));
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(stats, inst);
  if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(stats, factory);
  if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(stats, start);
  if (err == NULL && output_start) {
    err = TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(stats, output_start);
  }
  if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(stats, end);
  if (err == NULL) err = TRITONBACKEND_ModelInstanceResponseStatisticsSetError(stats, error);
  if (err == NULL) err = TRITONBACKEND_ModelInstanceReportResponseStatistics(stats);
  TRITONSERVER_Error* del = TRITONBACKEND_ModelInstanceResponseStatisticsDelete(stats);
  if (err == NULL) return del;
  if (del != NULL) TRITONSERVER_ErrorDelete(del);
  return err;
}

static TRITONSERVER_Error* Repeat(TRITONBACKEND_ModelInstance* inst,
                                  TRITONBACKEND_Request* request) {
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
    if (values[i] == -2) {
      const struct timespec pause = {0, 400000000};
      nanosleep(&pause, NULL);
      continue;
    }
    const uint64_t start = NowNs();
    TRITONBACKEND_Response* response;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNewFromFactory(&response, factory));
    if (values[i] == -1) {
      TRITONSERVER_Error* refused = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "-1");
      TRITONSERVER_Error* err = TRITONBACKEND_ResponseSend(response, 0, refused);
      if (err == NULL) err = Report(inst, factory, start, 0, NowNs(), refused);
      TRITONSERVER_ErrorDelete(refused);
      RETURN_IF_ERROR(err);
      continue;
    }
    const uint64_t output_start = NowNs();
    TRITONBACKEND_Output* output;
    const int64_t shape[1] = {1};
    RETURN_IF_ERROR(
        TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_INT32, shape, 1));
    void* out;
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, sizeof(int32_t), &mem, &mem_id));
    *(int32_t*)out = values[i];
    RETURN_IF_ERROR(TRITONBACKEND_ResponseSend(response, 0, NULL));
    RETURN_IF_ERROR(Report(inst, factory, start, output_start, NowNs(), NULL));
  }
  const uint64_t start = NowNs();
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL));
  RETURN_IF_ERROR(Report(inst, factory, start, 0, NowNs(), NULL));
  return TRITONBACKEND_ResponseFactoryDelete(factory);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(Repeat(inst, requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
