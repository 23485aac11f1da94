/* A Triton C backend for pyserver's tests that keeps custom metrics, as
 * Triton's backends do: a counter family "c_requests" and a histogram
 * family "c_values" (buckets 1, 10), each with one metric labelled by the
 * model's name, made at ModelInitialize and deleted at ModelFinalize. Each
 * request counts once and observes IN[0] (FP32); OUT = IN. */
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

struct Metrics {
  TRITONSERVER_MetricFamily* requests_family;
  TRITONSERVER_MetricFamily* values_family;
  TRITONSERVER_Metric* requests;
  TRITONSERVER_Metric* values;
};

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  struct Metrics* m = calloc(1, sizeof(struct Metrics));
  RETURN_IF_ERROR(TRITONSERVER_MetricFamilyNew(&m->requests_family,
                                               TRITONSERVER_METRIC_KIND_COUNTER, "c_requests",
                                               "Requests the C backend executed"));
  RETURN_IF_ERROR(TRITONSERVER_MetricFamilyNew(&m->values_family,
                                               TRITONSERVER_METRIC_KIND_HISTOGRAM, "c_values",
                                               "The first value of each request"));
  TRITONSERVER_Parameter* label = TRITONSERVER_ParameterNew("model", TRITONSERVER_PARAMETER_STRING,
                                                            name);
  const TRITONSERVER_Parameter* labels[1] = {label};
  RETURN_IF_ERROR(TRITONSERVER_MetricNew(&m->requests, m->requests_family, labels, 1));
  TRITONSERVER_MetricArgs* args;
  RETURN_IF_ERROR(TRITONSERVER_MetricArgsNew(&args));
  const double buckets[2] = {1.0, 10.0};
  RETURN_IF_ERROR(TRITONSERVER_MetricArgsSetHistogram(args, buckets, 2));
  RETURN_IF_ERROR(TRITONSERVER_MetricNewWithArgs(&m->values, m->values_family, labels, 1, args));
  TRITONSERVER_MetricArgsDelete(args);
  TRITONSERVER_ParameterDelete(label);
  return TRITONBACKEND_ModelSetState(model, m);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  struct Metrics* m = state;
  TRITONSERVER_MetricDelete(m->requests);
  TRITONSERVER_MetricDelete(m->values);
  TRITONSERVER_MetricFamilyDelete(m->requests_family);
  TRITONSERVER_MetricFamilyDelete(m->values_family);
  free(m);
  return NULL;
}

static TRITONSERVER_Error* Answer(struct Metrics* m, TRITONBACKEND_Request* request) {
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
  RETURN_IF_ERROR(TRITONSERVER_MetricIncrement(m->requests, 1));
  if (bytes >= sizeof(float)) RETURN_IF_ERROR(TRITONSERVER_MetricObserve(m->values, *(const float*)data));
  TRITONBACKEND_Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  TRITONBACKEND_Output* output;
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, shape, dims));
  void* out;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, bytes, &mem, &mem_id));
  memcpy(out, data, bytes);
  return TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, NULL);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  TRITONBACKEND_Model* model;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(Answer(state, requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
