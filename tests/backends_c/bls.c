/* A Triton C backend for pyserver's tests that runs each request on another
 * model of its server (BLS): the model named by its config's "target"
 * parameter gets the request's inputs and requested outputs, and what it
 * answers becomes this model's response. A decoupled target's responses are
 * joined along their first dimension; an error (an unknown target, a bad
 * input) is sent back as the response's error. Each call waits for the final
 * response and for the request's release, as a backend must. With the config
 * parameter "own_thread", each call is made from a thread of the backend's
 * own (one Python never saw) rather than from the execute thread. With
 * "cancel", each call is cancelled (TRITONSERVER_InferenceRequestCancel) as
 * soon as it is sent, and must then say so (IsCancelled); what the target
 * answers still comes back, an error for a request cancelled in its queue.
 * With "trace", each call of a traced request is given a child of its trace
 * (TRITONBACKEND_RequestTrace, TRITONSERVER_InferenceTraceSpawnChildTrace),
 * as Triton's Python backend does for its BLS calls, after reporting a
 * custom activity, BLS_SENT, in the request's trace. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)         \
  do {                             \
    TRITONSERVER_Error* e__ = (x); \
    if (e__ != NULL) return e__;   \
  } while (0)

#define MAX_RESPONSES 64

typedef struct {
  TRITONSERVER_Server* server;
  struct TRITONSERVER_ResponseAllocator* allocator;
  char target[128];
  int own_thread;
  int cancel;
  int trace;
  char name[128];  /* the model's own name */
} ModelState;

/* One BLS call in flight: filled by the callbacks, on pyserver's thread. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int final;
  int released;
  uint32_t count;
  struct TRITONSERVER_InferenceResponse* responses[MAX_RESPONSES];
} Call;

static TRITONSERVER_Error* Alloc(struct TRITONSERVER_ResponseAllocator* allocator,
                                 const char* name, size_t byte_size,
                                 TRITONSERVER_MemoryType type, int64_t type_id, void* userp,
                                 void** buffer, void** buffer_userp,
                                 TRITONSERVER_MemoryType* actual_type, int64_t* actual_type_id) {
  (void)allocator, (void)name, (void)type, (void)type_id, (void)userp;
  *buffer = byte_size ? malloc(byte_size) : NULL;
  *buffer_userp = NULL;
  *actual_type = TRITONSERVER_MEMORY_CPU;
  *actual_type_id = 0;
  if (byte_size && *buffer == NULL) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "out of memory");
  }
  return NULL;
}

static TRITONSERVER_Error* Release(struct TRITONSERVER_ResponseAllocator* allocator,
                                   void* buffer, void* buffer_userp, size_t byte_size,
                                   TRITONSERVER_MemoryType type, int64_t type_id) {
  (void)allocator, (void)buffer_userp, (void)byte_size, (void)type, (void)type_id;
  free(buffer);
  return NULL;
}

static void OnResponse(struct TRITONSERVER_InferenceResponse* response, const uint32_t flags,
                       void* userp) {
  Call* call = (Call*)userp;
  pthread_mutex_lock(&call->mu);
  if (response != NULL) {
    if (call->count < MAX_RESPONSES) {
      call->responses[call->count++] = response;
    } else {
      TRITONSERVER_InferenceResponseDelete(response);
    }
  }
  if (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) call->final = 1;
  pthread_cond_broadcast(&call->cv);
  pthread_mutex_unlock(&call->mu);
}

static void OnRelease(struct TRITONSERVER_InferenceRequest* request, const uint32_t flags,
                      void* userp) {
  Call* call = (Call*)userp;
  pthread_mutex_lock(&call->mu);
  if (flags & TRITONSERVER_REQUEST_RELEASE_ALL) call->released = 1;
  pthread_cond_broadcast(&call->cv);
  pthread_mutex_unlock(&call->mu);
  (void)request;
}

/* The string value of the config's "target" parameter. */
static int TargetFromConfig(const char* json, char* out, size_t size) {
  const char* p = strstr(json, "\"target\"");
  if (p == NULL || (p = strstr(p, "\"string_value\"")) == NULL) return 0;
  p = strchr(p + strlen("\"string_value\""), '"');
  if (p == NULL) return 0;
  const char* end = strchr(++p, '"');
  if (end == NULL || (size_t)(end - p) >= size) return 0;
  memcpy(out, p, end - p);
  out[end - p] = '\0';
  return 1;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  ModelState* state = calloc(1, sizeof(ModelState));
  TRITONSERVER_Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, 1, &config));
  const char* json;
  size_t size;
  RETURN_IF_ERROR(TRITONSERVER_MessageSerializeToJson(config, &json, &size));
  int found = TargetFromConfig(json, state->target, sizeof(state->target));
  state->own_thread = strstr(json, "\"own_thread\"") != NULL;
  state->cancel = strstr(json, "\"cancel\"") != NULL;
  state->trace = strstr(json, "\"trace\"") != NULL;
  TRITONSERVER_MessageDelete(config);
  if (!found) {
    free(state);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "config has no 'target'");
  }
  const char* name;
  RETURN_IF_ERROR(TRITONBACKEND_ModelName(model, &name));
  snprintf(state->name, sizeof(state->name), "%s", name);
  RETURN_IF_ERROR(TRITONBACKEND_ModelServer(model, &state->server));
  RETURN_IF_ERROR(TRITONSERVER_ResponseAllocatorNew(&state->allocator, Alloc, Release, NULL));
  return TRITONBACKEND_ModelSetState(model, state);
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  ModelState* state = (ModelState*)vstate;
  TRITONSERVER_ResponseAllocatorDelete(state->allocator);
  free(state);
  return NULL;
}

/* The BLS request for `request`: its inputs (views of its buffers) and its
 * requested outputs, to the target. */
static TRITONSERVER_Error* BuildRequest(ModelState* state, TRITONBACKEND_Request* request,
                                        Call* call, struct TRITONSERVER_InferenceRequest** out) {
  struct TRITONSERVER_InferenceRequest* bls;
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestNew(&bls, state->server, state->target, -1));
  *out = bls;
  const char* id;
  RETURN_IF_ERROR(TRITONBACKEND_RequestId(request, &id));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetId(bls, id));
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetBoolParameter(bls, "from_bls", 1));
  uint32_t count;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request, &count));
  for (uint32_t i = 0; i < count; ++i) {
    TRITONBACKEND_Input* input;
    RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request, i, &input));
    const char* name;
    TRITONSERVER_DataType dtype;
    const int64_t* shape;
    uint32_t dims, buffers;
    uint64_t bytes;
    RETURN_IF_ERROR(
        TRITONBACKEND_InputProperties(input, &name, &dtype, &shape, &dims, &bytes, &buffers));
    RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddInput(bls, name, dtype, shape, dims));
    for (uint32_t b = 0; b < buffers; ++b) {
      const void* base;
      uint64_t n;
      TRITONSERVER_MemoryType mem;
      int64_t mem_id;
      RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(input, b, &base, &n, &mem, &mem_id));
      RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAppendInputData(bls, name, base, n, mem,
                                                                   mem_id));
    }
  }
  RETURN_IF_ERROR(TRITONBACKEND_RequestOutputCount(request, &count));
  for (uint32_t i = 0; i < count; ++i) {
    const char* name;
    RETURN_IF_ERROR(TRITONBACKEND_RequestOutputName(request, i, &name));
    RETURN_IF_ERROR(TRITONSERVER_InferenceRequestAddRequestedOutput(bls, name));
  }
  RETURN_IF_ERROR(TRITONSERVER_InferenceRequestSetReleaseCallback(bls, OnRelease, call));
  return TRITONSERVER_InferenceRequestSetResponseCallback(bls, state->allocator, NULL,
                                                          OnResponse, call);
}

/* This request's response from the call's: each output of the first
 * response, joined with the same output of the others along dimension 0. */
static TRITONSERVER_Error* Answer(TRITONBACKEND_Response* response, Call* call) {
  if (call->count == 0) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the target sent no response");
  }
  for (uint32_t r = 0; r < call->count; ++r) {
    TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(call->responses[r]);
    if (err != NULL) return err;  /* ours to pass on (Triton hands out a new one) */
  }
  uint32_t outputs;
  RETURN_IF_ERROR(TRITONSERVER_InferenceResponseOutputCount(call->responses[0], &outputs));
  for (uint32_t o = 0; o < outputs; ++o) {
    const char* name;
    TRITONSERVER_DataType dtype;
    const int64_t* shape;
    uint64_t dims;
    const void* base;
    size_t bytes, total = 0;
    TRITONSERVER_MemoryType mem;
    int64_t mem_id;
    void* userp;
    int64_t joined[8] = {0};
    for (uint32_t r = 0; r < call->count; ++r) {
      RETURN_IF_ERROR(TRITONSERVER_InferenceResponseOutput(call->responses[r], o, &name, &dtype,
                                                           &shape, &dims, &base, &bytes, &mem,
                                                           &mem_id, &userp));
      if (dims == 0 || dims > 8 || mem != TRITONSERVER_MEMORY_CPU) {
        return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNSUPPORTED, "unexpected output");
      }
      if (r == 0) memcpy(joined, shape, dims * sizeof(int64_t));
      else joined[0] += shape[0];
      total += bytes;
    }
    TRITONBACKEND_Output* output;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, name, dtype, joined,
                                                 (uint32_t)dims));
    void* dst;
    TRITONSERVER_MemoryType out_mem = TRITONSERVER_MEMORY_CPU;
    int64_t out_mem_id = 0;
    RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &dst, total, &out_mem, &out_mem_id));
    size_t done = 0;
    for (uint32_t r = 0; r < call->count; ++r) {
      RETURN_IF_ERROR(TRITONSERVER_InferenceResponseOutput(call->responses[r], o, &name, &dtype,
                                                           &shape, &dims, &base, &bytes, &mem,
                                                           &mem_id, &userp));
      if (bytes) memcpy((char*)dst + done, base, bytes);
      done += bytes;
    }
  }
  return NULL;
}

static TRITONSERVER_Error* RunOne(ModelState* state, TRITONBACKEND_Request* request,
                                  TRITONBACKEND_Response* response) {
  Call call;
  memset(&call, 0, sizeof(call));
  pthread_mutex_init(&call.mu, NULL);
  pthread_cond_init(&call.cv, NULL);
  struct TRITONSERVER_InferenceRequest* bls = NULL;
  TRITONSERVER_Error* err = BuildRequest(state, request, &call, &bls);
  /* the server owns the spawned child from ServerInferAsync on */
  TRITONSERVER_InferenceTrace* trace = NULL;
  if (err == NULL && state->trace) {
    TRITONSERVER_InferenceTrace* parent = NULL;
    err = TRITONBACKEND_RequestTrace(request, &parent);
    const char* traced_model = NULL;
    if (err == NULL && parent != NULL) err = TRITONSERVER_InferenceTraceModelName(parent, &traced_model);
    if (err == NULL && parent != NULL && strcmp(traced_model, state->name) != 0) {
      err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the trace names another model");
    }
    if (err == NULL && parent != NULL) err = TRITONSERVER_InferenceTraceSpawnChildTrace(parent, &trace);
    if (err == NULL && parent != NULL) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      err = TRITONSERVER_InferenceTraceReportActivity(
          parent, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, "BLS_SENT");
    }
  }
  if (err == NULL) err = TRITONSERVER_ServerInferAsync(state->server, bls, trace);
  if (err == NULL) {
    TRITONSERVER_Error* cancel_err = NULL;
    if (state->cancel) {
      cancel_err = TRITONSERVER_InferenceRequestCancel(bls);
      bool cancelled = false;
      if (cancel_err == NULL) cancel_err = TRITONSERVER_InferenceRequestIsCancelled(bls, &cancelled);
      if (cancel_err == NULL && !cancelled) {
        cancel_err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL,
                                           "IsCancelled said no after Cancel");
      }
    }
    /* in flight: its final response and release come whatever happened */
    pthread_mutex_lock(&call.mu);
    while (!call.final || !call.released) pthread_cond_wait(&call.cv, &call.mu);
    pthread_mutex_unlock(&call.mu);
    err = cancel_err != NULL ? cancel_err : Answer(response, &call);
  }
  for (uint32_t r = 0; r < call.count; ++r) {
    TRITONSERVER_Error* e = TRITONSERVER_InferenceResponseDelete(call.responses[r]);
    if (e != NULL) TRITONSERVER_ErrorDelete(e);
  }
  if (bls != NULL) TRITONSERVER_InferenceRequestDelete(bls);
  pthread_cond_destroy(&call.cv);
  pthread_mutex_destroy(&call.mu);
  return err;
}

typedef struct {
  ModelState* state;
  TRITONBACKEND_Request* request;
  TRITONBACKEND_Response* response;
  TRITONSERVER_Error* err;
} ThreadCall;

static void* RunOnThread(void* arg) {
  ThreadCall* t = (ThreadCall*)arg;
  t->err = RunOne(t->state, t->request, t->response);
  return NULL;
}

static TRITONSERVER_Error* Run(ModelState* state, TRITONBACKEND_Request* request,
                               TRITONBACKEND_Response* response) {
  if (!state->own_thread) return RunOne(state, request, response);
  ThreadCall t = {state, request, response, NULL};
  pthread_t thread;
  if (pthread_create(&thread, NULL, RunOnThread, &t) != 0) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "pthread_create failed");
  }
  pthread_join(thread, NULL);
  return t.err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  TRITONBACKEND_Model* model;
  void* vstate;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(inst, &model));
  RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &vstate));
  for (uint32_t r = 0; r < count; ++r) {
    TRITONBACKEND_Response* response;
    RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, requests[r]));
    TRITONSERVER_Error* err = Run((ModelState*)vstate, requests[r], response);
    TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
    if (err != NULL) TRITONSERVER_ErrorDelete(err);
  }
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
