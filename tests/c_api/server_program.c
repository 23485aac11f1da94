/* A program that embeds a server through Triton's in-process C API, as a
 * user's C program does (written for pyserver's tests, against
 * tritonserver.h, linked with -ltritonserver). It prints one line per step
 * for the test to check.
 *
 *   server_program REPOSITORY MODE [SECOND_REPOSITORY]
 *
 * MODE: "serve"    start (poll mode), queries, inferences, a bad request,
 *                  metrics, stop
 *       "explicit" explicit model control: nothing loaded, load, infer,
 *                  unload; SECOND_REPOSITORY registered, its "add_sub2"
 *                  loaded, unregistered
 *       "strict"   the C API's default strict model config: model "bare"'s
 *                  config as its folder has it (no inputs, no outputs)
 *       "loose"    strict model config off and the model config name "alt":
 *                  "bare"'s configs/alt.pbtxt, auto-completed
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "triton/core/tritonserver.h"

#define FAIL_IF_ERR(call, what)                                                  \
  do {                                                                          \
    TRITONSERVER_Error* err__ = (call);                                         \
    if (err__ != NULL) {                                                        \
      printf("%s failed: %s: %s\n", what, TRITONSERVER_ErrorCodeString(err__),  \
             TRITONSERVER_ErrorMessage(err__));                                 \
      TRITONSERVER_ErrorDelete(err__);                                          \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)

/* Prints an expected error, or says it was missing. */
static void expect_error(TRITONSERVER_Error* err, const char* what) {
  if (err == NULL) {
    printf("%s: no error\n", what);
    return;
  }
  printf("%s: %s: %s\n", what, TRITONSERVER_ErrorCodeString(err), TRITONSERVER_ErrorMessage(err));
  TRITONSERVER_ErrorDelete(err);
}

static void print_message(TRITONSERVER_Message* message, const char* what) {
  const char* base;
  size_t size;
  FAIL_IF_ERR(TRITONSERVER_MessageSerializeToJson(message, &base, &size), "serialize");
  printf("%s: %.*s\n", what, (int)size, base);
  TRITONSERVER_MessageDelete(message);
}

/* Output buffers from malloc, as most programs do. */
static TRITONSERVER_Error* alloc_fn(TRITONSERVER_ResponseAllocator* allocator, const char* name,
                                    size_t byte_size, TRITONSERVER_MemoryType type, int64_t type_id,
                                    void* userp, void** buffer, void** buffer_userp,
                                    TRITONSERVER_MemoryType* actual_type, int64_t* actual_type_id) {
  (void)allocator, (void)name, (void)type, (void)type_id, (void)userp;
  *buffer = byte_size ? malloc(byte_size) : NULL;
  *buffer_userp = NULL;
  *actual_type = TRITONSERVER_MEMORY_CPU;
  *actual_type_id = 0;
  return NULL;
}

static TRITONSERVER_Error* release_fn(TRITONSERVER_ResponseAllocator* allocator, void* buffer,
                                      void* buffer_userp, size_t byte_size,
                                      TRITONSERVER_MemoryType type, int64_t type_id) {
  (void)allocator, (void)buffer_userp, (void)byte_size, (void)type, (void)type_id;
  free(buffer);
  return NULL;
}

/* One request's answer, handed from the server's thread to main. */
struct Answer {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  TRITONSERVER_InferenceResponse* response;
  int released;
};

static void on_response(TRITONSERVER_InferenceResponse* response, const uint32_t flags,
                        void* userp) {
  struct Answer* a = userp;
  pthread_mutex_lock(&a->mu);
  if (response != NULL) a->response = response;
  (void)flags;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

static void on_release(TRITONSERVER_InferenceRequest* request, const uint32_t flags,
                       void* userp) {
  struct Answer* a = userp;
  (void)flags;
  pthread_mutex_lock(&a->mu);
  a->released = 1;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  TRITONSERVER_InferenceRequestDelete(request);
}

/* Runs add_sub on INPUT0 = i, INPUT1 = 2 (FP32[1,16]); `input1` renames the
 * second input (a bad request when it is not INPUT1). Prints the outcome. */
static void infer(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator,
                  const char* model, const char* input1, const char* what) {
  static float in0[16], in1[16];
  for (int i = 0; i < 16; ++i) in0[i] = (float)i, in1[i] = 2.0f;
  const int64_t shape[2] = {1, 16};
  struct Answer a;
  pthread_mutex_init(&a.mu, NULL);
  pthread_cond_init(&a.cv, NULL);
  a.response = NULL;
  a.released = 0;
  TRITONSERVER_InferenceRequest* request;
  TRITONSERVER_Error* err = TRITONSERVER_InferenceRequestNew(&request, server, model, -1);
  if (err != NULL) {
    expect_error(err, what);
    return;
  }
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestSetId(request, "c-program"), "set id");
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestAddInput(request, "INPUT0", TRITONSERVER_TYPE_FP32,
                                                    shape, 2), "add input");
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestAddInput(request, input1, TRITONSERVER_TYPE_FP32,
                                                    shape, 2), "add input");
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestAppendInputData(request, "INPUT0", in0, sizeof in0,
                                                           TRITONSERVER_MEMORY_CPU, 0), "data");
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestAppendInputData(request, input1, in1, sizeof in1,
                                                           TRITONSERVER_MEMORY_CPU, 0), "data");
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestSetReleaseCallback(request, on_release, &a),
              "release callback");
  FAIL_IF_ERR(TRITONSERVER_InferenceRequestSetResponseCallback(request, allocator, NULL,
                                                               on_response, &a),
              "response callback");
  FAIL_IF_ERR(TRITONSERVER_ServerInferAsync(server, request, NULL), "infer async");
  pthread_mutex_lock(&a.mu);
  while (a.response == NULL || !a.released) pthread_cond_wait(&a.cv, &a.mu);
  pthread_mutex_unlock(&a.mu);
  TRITONSERVER_Error* failed = TRITONSERVER_InferenceResponseError(a.response);
  if (failed != NULL) {
    printf("%s: %s: %s\n", what, TRITONSERVER_ErrorCodeString(failed),
           TRITONSERVER_ErrorMessage(failed));
  } else {
    uint32_t count = 0;
    FAIL_IF_ERR(TRITONSERVER_InferenceResponseOutputCount(a.response, &count), "outputs");
    int right = count == 2;
    for (uint32_t o = 0; o < count; ++o) {
      const char* name;
      TRITONSERVER_DataType datatype;
      const int64_t* dims;
      uint64_t dim_count;
      const void* base;
      size_t byte_size;
      TRITONSERVER_MemoryType type;
      int64_t type_id;
      void* userp;
      FAIL_IF_ERR(TRITONSERVER_InferenceResponseOutput(a.response, o, &name, &datatype, &dims,
                                                       &dim_count, &base, &byte_size, &type,
                                                       &type_id, &userp), "output");
      const float* v = base;
      const int sum = strcmp(name, "OUTPUT0") == 0;
      right = right && datatype == TRITONSERVER_TYPE_FP32 && dim_count == 2 && dims[1] == 16 &&
              byte_size == sizeof in0;
      for (int i = 0; right && i < 16; ++i) right = v[i] == (sum ? i + 2.0f : i - 2.0f);
    }
    printf("%s: %s\n", what, right ? "right" : "WRONG");
  }
  TRITONSERVER_InferenceResponseDelete(a.response);
}

static TRITONSERVER_Server* start(const char* repository, TRITONSERVER_ModelControlMode mode,
                                  int strict, const char* config_name) {
  TRITONSERVER_ServerOptions* options;
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsNew(&options), "options");
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, repository), "repo");
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetModelControlMode(options, mode), "mode");
  if (!strict) {
    FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetStrictModelConfig(options, false), "strict");
  }
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetLogVerbose(options, 0), "verbose");
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetServerId(options, "c-program"), "server id");
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetExitTimeout(options, 5), "exit timeout");
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetCacheConfig(options, "local", "{\"size\": 1048576}"),
              "cache config");
  FAIL_IF_ERR(TRITONSERVER_ServerOptionsAddRateLimiterResource(options, "R1", 4, -1),
              "rate limiter resource");
  if (config_name != NULL) {
    FAIL_IF_ERR(TRITONSERVER_ServerOptionsSetModelConfigName(options, config_name),
                "config name");
  }
  TRITONSERVER_Server* server = NULL;
  TRITONSERVER_Error* err = TRITONSERVER_ServerNew(&server, options);
  TRITONSERVER_ServerOptionsDelete(options);
  if (err != NULL) {
    expect_error(err, "server new");
    return NULL;
  }
  for (int i = 0; i < 3000; ++i) {
    bool live = false, ready = false;
    FAIL_IF_ERR(TRITONSERVER_ServerIsLive(server, &live), "is live");
    FAIL_IF_ERR(TRITONSERVER_ServerIsReady(server, &ready), "is ready");
    if (live && ready) {
      printf("server: live and ready\n");
      return server;
    }
    usleep(10000);
  }
  printf("server: not ready after 30 s\n");
  exit(3);
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s REPOSITORY serve|explicit|strict|loose [SECOND]\n", argv[0]);
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* mode = argv[2];
  uint32_t major, minor;
  FAIL_IF_ERR(TRITONSERVER_ApiVersion(&major, &minor), "api version");
  printf("api: %u.%u\n", major, minor);
  if (strcmp(mode, "strict") == 0 || strcmp(mode, "loose") == 0) {
    const int strict = strcmp(mode, "strict") == 0;
    TRITONSERVER_Server* server =
        start(argv[1], TRITONSERVER_MODEL_CONTROL_NONE, strict, strict ? NULL : "alt");
    if (server == NULL) return 4;
    TRITONSERVER_Message* config;
    FAIL_IF_ERR(TRITONSERVER_ServerModelConfig(server, "bare", -1, 1, &config), "config");
    print_message(config, "bare config");
    FAIL_IF_ERR(TRITONSERVER_ServerDelete(server), "delete");
    printf("deleted\n");
    return 0;
  }
  const int explicit_mode = strcmp(mode, "explicit") == 0;
  TRITONSERVER_Server* server = start(
      argv[1], explicit_mode ? TRITONSERVER_MODEL_CONTROL_EXPLICIT : TRITONSERVER_MODEL_CONTROL_POLL,
      0, NULL);
  if (server == NULL) return 4;
  TRITONSERVER_ResponseAllocator* allocator;
  FAIL_IF_ERR(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, NULL),
              "allocator");
  TRITONSERVER_Message* message;
  FAIL_IF_ERR(TRITONSERVER_ServerMetadata(server, &message), "metadata");
  print_message(message, "metadata");
  if (explicit_mode) {
    FAIL_IF_ERR(TRITONSERVER_ServerModelIndex(server, TRITONSERVER_INDEX_FLAG_READY, &message),
                "index");
    print_message(message, "ready index before load");
    infer(server, allocator, "add_sub", "INPUT1", "infer before load");
    FAIL_IF_ERR(TRITONSERVER_ServerLoadModel(server, "add_sub"), "load");
    expect_error(TRITONSERVER_ServerLoadModel(server, "no_such_model"), "load unknown");
  }
  FAIL_IF_ERR(TRITONSERVER_ServerModelIndex(server, 0, &message), "index");
  print_message(message, "index");
  bool ready = false;
  FAIL_IF_ERR(TRITONSERVER_ServerModelIsReady(server, "add_sub", -1, &ready), "model ready");
  printf("add_sub ready: %d\n", ready);
  FAIL_IF_ERR(TRITONSERVER_ServerModelMetadata(server, "add_sub", 1, &message), "model metadata");
  print_message(message, "model metadata");
  FAIL_IF_ERR(TRITONSERVER_ServerModelConfig(server, "add_sub", -1, 1, &message), "config");
  print_message(message, "model config");
  expect_error(TRITONSERVER_ServerModelConfig(server, "add_sub", -1, 2, &message),
               "config version 2");
  expect_error(TRITONSERVER_ServerModelMetadata(server, "no_such_model", -1, &message),
               "unknown model metadata");
  for (int i = 0; i < 3; ++i) infer(server, allocator, "add_sub", "INPUT1", "infer");
  infer(server, allocator, "add_sub", "WRONG", "infer wrong input");
  infer(server, allocator, "no_such_model", "INPUT1", "infer unknown model");
  FAIL_IF_ERR(TRITONSERVER_ServerModelStatistics(server, "add_sub", -1, &message), "stats");
  print_message(message, "statistics");
  uint32_t batch_flags = 0;
  FAIL_IF_ERR(TRITONSERVER_ServerModelBatchProperties(server, "add_sub", -1, &batch_flags, NULL),
              "batch properties");
  printf("batch properties: %s\n", batch_flags == TRITONSERVER_BATCH_FIRST_DIM ? "first dim"
                                                                              : "unknown");
  TRITONSERVER_Metrics* metrics;
  FAIL_IF_ERR(TRITONSERVER_ServerMetrics(server, &metrics), "metrics");
  const char* text;
  size_t text_size;
  FAIL_IF_ERR(TRITONSERVER_MetricsFormatted(metrics, TRITONSERVER_METRIC_PROMETHEUS, &text,
                                            &text_size), "metrics text");
  const char* line = strstr(text, "nv_inference_request_success{");
  printf("metrics: %.*s\n", line ? (int)strcspn(line, "\n") : 4, line ? line : "none");
  TRITONSERVER_MetricsDelete(metrics);
  FAIL_IF_ERR(TRITONSERVER_ServerSetExitTimeout(server, 3), "set exit timeout");
  if (explicit_mode) {
    FAIL_IF_ERR(TRITONSERVER_ServerUnloadModel(server, "add_sub"), "unload");
    FAIL_IF_ERR(TRITONSERVER_ServerModelIsReady(server, "add_sub", -1, &ready), "model ready");
    printf("add_sub ready after unload: %d\n", ready);
    if (argc == 4) {
      TRITONSERVER_Parameter* rename =
          TRITONSERVER_ParameterNew("add_sub2", TRITONSERVER_PARAMETER_STRING, "renamed");
      const TRITONSERVER_Parameter* mapping[1] = {rename};
      expect_error(TRITONSERVER_ServerRegisterModelRepository(server, argv[3], mapping, 1),
                   "register with a name mapping");
      TRITONSERVER_ParameterDelete(rename);
      FAIL_IF_ERR(TRITONSERVER_ServerRegisterModelRepository(server, argv[3], NULL, 0),
                  "register");
      FAIL_IF_ERR(TRITONSERVER_ServerLoadModel(server, "add_sub2"), "load add_sub2");
      FAIL_IF_ERR(TRITONSERVER_ServerModelIsReady(server, "add_sub2", -1, &ready), "ready");
      printf("add_sub2 ready: %d\n", ready);
      infer(server, allocator, "add_sub2", "INPUT1", "infer add_sub2");
      FAIL_IF_ERR(TRITONSERVER_ServerUnloadModel(server, "add_sub2"), "unload add_sub2");
      FAIL_IF_ERR(TRITONSERVER_ServerUnregisterModelRepository(server, argv[3]), "unregister");
      expect_error(TRITONSERVER_ServerLoadModel(server, "add_sub2"), "load after unregister");
    }
  } else {
    FAIL_IF_ERR(TRITONSERVER_ServerPollModelRepository(server), "poll");
    printf("poll: ok\n");
  }
  FAIL_IF_ERR(TRITONSERVER_ServerStop(server), "stop");
  bool live = true;
  FAIL_IF_ERR(TRITONSERVER_ServerIsLive(server, &live), "is live");
  printf("live after stop: %d\n", live);
  expect_error(TRITONSERVER_ServerMetadata(server, &message), "metadata after stop");
  infer(server, allocator, "add_sub", "INPUT1", "infer after stop");
  FAIL_IF_ERR(TRITONSERVER_ServerStop(server), "second stop");
  FAIL_IF_ERR(TRITONSERVER_ResponseAllocatorDelete(allocator), "allocator delete");
  FAIL_IF_ERR(TRITONSERVER_ServerDelete(server), "delete");
  printf("deleted\n");
  return 0;
}
