/* A Triton C backend for pyserver's tests that answers from its own threads
 * after ModelInstanceExecute returned, as Triton lets a backend do. Each
 * request gets a thread, which first waits (up to 10 s) for its partner:
 * requests pair up in arrival order, so a test sees whether two run side
 * by side (on one instance, or on two). IN (INT32, [n]):
 *   decoupled model: n responses OUT = [IN[i]], then the final flag alone;
 *   otherwise:       one response OUT = IN, with the final flag.
 * IN[0] = -7 instead: the thread pairs with no one; it polls
 * TRITONBACKEND_RequestIsCancelled (at most 20 s), logs "threaded: holding"
 * first and then which came, and answers OUT = IN. IN[0] = -8: the thread
 * answers at once with an INVALID_ARG error. Its instances log
 * "threaded: instance finalized" as they go.
 * Then the thread releases the request. Execute reports the batch's
 * statistics with 5 ms of input preparation before a 1 ms compute, so a
 * test can see that the server took the backend's times. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int arrived = 0; /* requests pair up in the order they arrive */

struct Job {
  TRITONBACKEND_Request* request;
  int decoupled;
};

static uint64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void SleepNs(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

/* 0 when this request's partner (the next or previous to arrive) came
 * within 10 s, so the two ran side by side. */
static int WaitForCompany(void) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  pthread_mutex_lock(&mu);
  int ticket = arrived++;
  int pair_complete = ticket - ticket % 2 + 2;
  pthread_cond_broadcast(&changed);
  int rc = 0;
  while (arrived < pair_complete && rc == 0) {
    rc = pthread_cond_timedwait(&changed, &mu, &deadline);
  }
  int alone = arrived < pair_complete;
  pthread_mutex_unlock(&mu);
  return alone;
}

static TRITONSERVER_Error* Send(TRITONBACKEND_ResponseFactory* factory, const int32_t* values,
                                int64_t n, uint32_t flags) {
  TRITONBACKEND_Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNewFromFactory(&response, factory));
  TRITONBACKEND_Output* output;
  const int64_t shape[1] = {n};
  RETURN_IF_ERROR(
      TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_INT32, shape, 1));
  void* out;
  TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
  int64_t mem_id = 0;
  RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &out, n * sizeof(int32_t), &mem, &mem_id));
  memcpy(out, values, n * sizeof(int32_t));
  return TRITONBACKEND_ResponseSend(response, flags, NULL);
}

static TRITONSERVER_Error* Answer(struct Job* job, TRITONBACKEND_ResponseFactory* factory) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(job->request, "IN", &input));
  const void* data;
  uint64_t bytes;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, 0, &data, &bytes, &mem, &mem_id));
  const int32_t* values = data;
  int64_t n = (int64_t)(bytes / sizeof(int32_t));
  if (n > 0 && values[0] == -8) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "threaded: -8 refused");
  }
  if (n > 0 && values[0] == -7) {
    TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__, "threaded: holding");
    bool cancelled = false;
    for (int i = 0; i < 20000 && !cancelled; ++i) {
      RETURN_IF_ERROR(TRITONBACKEND_RequestIsCancelled(job->request, &cancelled));
      if (!cancelled) SleepNs(1000000);
    }
    TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__,
                            cancelled ? "threaded: cancelled while held" : "threaded: never cancelled");
  } else if (WaitForCompany()) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "ran alone for 10 s");
  }
  if (!job->decoupled) return Send(factory, values, n, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
  for (int64_t i = 0; i < n; ++i) {
    SleepNs(1000000);
    RETURN_IF_ERROR(Send(factory, values + i, 1, 0));
  }
  return TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
}

static void* Run(void* arg) {
  struct Job* job = arg;
  TRITONBACKEND_ResponseFactory* factory;
  if (TRITONBACKEND_ResponseFactoryNew(&factory, job->request) == NULL) {
    TRITONSERVER_Error* err = Answer(job, factory);
    if (err != NULL) { /* one response with the error, as the final one */
      TRITONBACKEND_Response* response;
      if (TRITONBACKEND_ResponseNewFromFactory(&response, factory) == NULL) {
        TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
      }
      TRITONSERVER_ErrorDelete(err);
    }
    TRITONBACKEND_ResponseFactoryDelete(factory);
  }
  TRITONBACKEND_RequestRelease(job->request, TRITONSERVER_REQUEST_RELEASE_ALL);
  free(job);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  int decoupled = strstr(json, "\"decoupled\":true") != NULL ||
                  strstr(json, "\"decoupled\": true") != NULL;
  TRITONSERVER_MessageDelete(config);
  return TRITONBACKEND_ModelSetState(model, decoupled ? (void*)1 : NULL);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  TRITONBACKEND_Model* model;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  uint64_t exec_start = NowNs();
  SleepNs(5000000); /* "input preparation" */
  uint64_t compute_start = NowNs();
  SleepNs(1000000);
  uint64_t compute_end = NowNs();
  for (uint32_t r = 0; r < count; ++r) {
    struct Job* job = malloc(sizeof(struct Job));
    job->request = requests[r];
    job->decoupled = state != NULL;
    pthread_t thread;
    pthread_create(&thread, NULL, Run, job);
    pthread_detach(thread);
  }
  return TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, count, exec_start,
                                                          compute_start, compute_end, NowNs());
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  (void)instance;
  TRITONSERVER_LogMessage(TRITONSERVER_LOG_INFO, __FILE__, __LINE__,
                          "threaded: instance finalized");
  return NULL;
}
