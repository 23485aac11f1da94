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
 *       "trace"    the program's own traces (TRITONSERVER_InferenceTraceNew
 *                  and _TensorNew) on add_sub, on a refused request and on
 *                  the ensemble "pipeline" (whose step is a child trace)
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

/* What the program's trace was told, on the library's callback thread. */
struct TraceLog {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  TRITONSERVER_InferenceTrace* root; /* the trace the program made */
  int root_released;
  int children_released;
  uint64_t last_ns;
  int backwards;     /* timestamps that went back in time */
  char lines[4096];  /* the activities, in order; a child's prefixed "child:" */
  char header[512];  /* the released traces: id, parent, model, version, request id, context */
};

static void trace_log_init(struct TraceLog* log, TRITONSERVER_InferenceTrace* root) {
  memset(log, 0, sizeof *log);
  pthread_mutex_init(&log->mu, NULL);
  pthread_cond_init(&log->cv, NULL);
  log->root = root;
}

static void append(char* buffer, size_t size, const char* text) {
  size_t used = strlen(buffer);
  snprintf(buffer + used, size - used, "%s%s", used ? " " : "", text);
}

static void on_trace_activity(TRITONSERVER_InferenceTrace* trace,
                              TRITONSERVER_InferenceTraceActivity activity, uint64_t ns,
                              void* userp) {
  struct TraceLog* log = userp;
  char word[96];
  snprintf(word, sizeof word, "%s%s", trace == log->root ? "" : "child:",
           TRITONSERVER_InferenceTraceActivityString(activity));
  pthread_mutex_lock(&log->mu);
  if (trace == log->root) {
    if (ns < log->last_ns) log->backwards++;
    log->last_ns = ns;
  }
  append(log->lines, sizeof log->lines, word);
  pthread_mutex_unlock(&log->mu);
}

static void on_trace_tensor(TRITONSERVER_InferenceTrace* trace,
                            TRITONSERVER_InferenceTraceActivity activity, const char* name,
                            TRITONSERVER_DataType datatype, const void* base, size_t byte_size,
                            const int64_t* shape, uint64_t dim_count,
                            TRITONSERVER_MemoryType memory_type, int64_t memory_type_id,
                            void* userp) {
  struct TraceLog* log = userp;
  char word[160];
  const float* v = base;
  (void)trace, (void)memory_type_id;
  snprintf(word, sizeof word, "%s:%s:%s:%zu:%lldx%lld:%s:last=%g",
           TRITONSERVER_InferenceTraceActivityString(activity), name,
           TRITONSERVER_DataTypeString(datatype), byte_size,
           dim_count > 0 ? (long long)shape[0] : -1, dim_count > 1 ? (long long)shape[1] : -1,
           memory_type == TRITONSERVER_MEMORY_CPU ? "cpu" : "other",
           byte_size >= 4 ? (double)v[byte_size / 4 - 1] : -1.0);
  pthread_mutex_lock(&log->mu);
  append(log->lines, sizeof log->lines, word);
  pthread_mutex_unlock(&log->mu);
}

static void on_trace_release(TRITONSERVER_InferenceTrace* trace, void* userp) {
  struct TraceLog* log = userp;
  uint64_t id = 0, parent = 0;
  const char* model = NULL;
  int64_t version = -2;
  const char* request_id = NULL;
  const char* context = NULL;
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceId(trace, &id), "trace id");
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceParentId(trace, &parent), "trace parent");
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceModelName(trace, &model), "trace model");
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceModelVersion(trace, &version), "trace version");
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceRequestId(trace, &request_id), "trace request id");
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceContext(trace, &context), "trace context");
  uint64_t root_id = 0;
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceId(log->root, &root_id), "root id");
  char line[256];
  snprintf(line, sizeof line, "%s[id=%s parent=%s model=%s version=%lld request=%s context=%s]",
           trace == log->root ? "own" : "child",
           id == 0 ? "0" : (id == root_id ? "own" : "new"),
           parent == 0 ? "0" : (parent == root_id ? "own" : "other"), model,
           (long long)version, request_id, context);
  pthread_mutex_lock(&log->mu);
  append(log->header, sizeof log->header, line);
  if (trace == log->root) {
    log->root_released = 1;
  } else {
    log->children_released++;
  }
  pthread_cond_broadcast(&log->cv);
  pthread_mutex_unlock(&log->mu);
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceDelete(trace), "trace delete");
}

/* Runs add_sub on INPUT0 = i, INPUT1 = 2 (FP32[1,16]); `input1` renames the
 * second input (a bad request when it is not INPUT1); `trace` (with its
 * log, or NULL) traces it and is waited for. Prints the outcome. */
static void infer(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator,
                  const char* model, const char* input1, struct TraceLog* log,
                  const char* what) {
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
  FAIL_IF_ERR(TRITONSERVER_ServerInferAsync(server, request, log ? log->root : NULL),
              "infer async");
  pthread_mutex_lock(&a.mu);
  while (a.response == NULL || !a.released) pthread_cond_wait(&a.cv, &a.mu);
  pthread_mutex_unlock(&a.mu);
  if (log != NULL) {
    pthread_mutex_lock(&log->mu);
    while (!log->root_released) pthread_cond_wait(&log->cv, &log->mu);
    pthread_mutex_unlock(&log->mu);
  }
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

static TRITONSERVER_ResponseAllocator* new_allocator(void) {
  TRITONSERVER_ResponseAllocator* allocator;
  FAIL_IF_ERR(TRITONSERVER_ResponseAllocatorNew(&allocator, alloc_fn, release_fn, NULL),
              "allocator");
  return allocator;
}

/* The end of a run: the allocator and the (stopped) server deleted. */
static int finish(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator) {
  FAIL_IF_ERR(TRITONSERVER_ResponseAllocatorDelete(allocator), "allocator delete");
  FAIL_IF_ERR(TRITONSERVER_ServerDelete(server), "delete");
  printf("deleted\n");
  return 0;
}

/* One traced inference; prints what its trace (and its children's) reported. */
static void traced(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator,
                   const char* model, const char* input1, int tensors, const char* what) {
  TRITONSERVER_InferenceTrace* trace;
  struct TraceLog log;
  if (tensors) {
    FAIL_IF_ERR(TRITONSERVER_InferenceTraceTensorNew(
                    &trace, TRITONSERVER_TRACE_LEVEL_TIMESTAMPS | TRITONSERVER_TRACE_LEVEL_TENSORS,
                    0, on_trace_activity, on_trace_tensor, on_trace_release, &log),
                "trace tensor new");
  } else {
    FAIL_IF_ERR(TRITONSERVER_InferenceTraceNew(&trace, TRITONSERVER_TRACE_LEVEL_TIMESTAMPS, 0,
                                               on_trace_activity, on_trace_release, &log),
                "trace new");
  }
  trace_log_init(&log, trace);
  uint64_t id = 0;
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceId(trace, &id), "trace id");
  FAIL_IF_ERR(TRITONSERVER_InferenceTraceSetContext(trace, "ctx-1"), "set context");
  infer(server, allocator, model, input1, &log, what);
  printf("%s id: %s\n", what, id > 0 ? "set" : "0");
  printf("%s activities: %s\n", what, log.lines);
  printf("%s released: %s\n", what, log.header);
  printf("%s in order: %s\n", what, log.backwards ? "no" : "yes");
}

static int trace_requests(const char* repository) {
  TRITONSERVER_Server* server = start(repository, TRITONSERVER_MODEL_CONTROL_NONE, 0, NULL);
  if (server == NULL) return 4;
  TRITONSERVER_ResponseAllocator* allocator = new_allocator();
  traced(server, allocator, "add_sub", "INPUT1", 0, "timestamps");
  traced(server, allocator, "add_sub", "INPUT1", 1, "tensors");
  traced(server, allocator, "add_sub", "WRONG", 0, "refused");
  traced(server, allocator, "pipeline", "INPUT1", 0, "ensemble");
  infer(server, allocator, "add_sub", "INPUT1", NULL, "untraced");
  FAIL_IF_ERR(TRITONSERVER_ServerStop(server), "stop");
  return finish(server, allocator);
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s REPOSITORY serve|explicit|strict|loose|trace [SECOND]\n", argv[0]);
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
  if (strcmp(mode, "trace") == 0) return trace_requests(argv[1]);
  const int explicit_mode = strcmp(mode, "explicit") == 0;
  TRITONSERVER_Server* server = start(
      argv[1], explicit_mode ? TRITONSERVER_MODEL_CONTROL_EXPLICIT : TRITONSERVER_MODEL_CONTROL_POLL,
      0, NULL);
  if (server == NULL) return 4;
  TRITONSERVER_ResponseAllocator* allocator = new_allocator();
  TRITONSERVER_Message* message;
  FAIL_IF_ERR(TRITONSERVER_ServerMetadata(server, &message), "metadata");
  print_message(message, "metadata");
  if (explicit_mode) {
    FAIL_IF_ERR(TRITONSERVER_ServerModelIndex(server, TRITONSERVER_INDEX_FLAG_READY, &message),
                "index");
    print_message(message, "ready index before load");
    infer(server, allocator, "add_sub", "INPUT1", NULL, "infer before load");
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
  for (int i = 0; i < 3; ++i) infer(server, allocator, "add_sub", "INPUT1", NULL, "infer");
  infer(server, allocator, "add_sub", "WRONG", NULL, "infer wrong input");
  infer(server, allocator, "no_such_model", "INPUT1", NULL, "infer unknown model");
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
      infer(server, allocator, "add_sub2", "INPUT1", NULL, "infer add_sub2");
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
  infer(server, allocator, "add_sub", "INPUT1", NULL, "infer after stop");
  FAIL_IF_ERR(TRITONSERVER_ServerStop(server), "second stop");
  return finish(server, allocator);
}
