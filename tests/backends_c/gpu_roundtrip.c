/* A Triton C backend for pyserver's GPU tests: OUTPUT0 = 2 * INPUT0 (FP32),
 * the values taken through memory the server's backend memory manager
 * hands out: INPUT0 is copied into GPU memory (TRITONSERVER_MEMORY_GPU on the
 * instance's device), from there into pinned host memory
 * (TRITONSERVER_MEMORY_CPU_PINNED), doubled into the output, and both blocks
 * given back. The CUDA runtime it copies with is the one named by
 * --backend-config=gpu_roundtrip,cudart=PATH. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

#define RETURN_IF_ERROR(x)            \
  do {                                \
    TRITONSERVER_Error* e__ = (x);    \
    if (e__ != NULL) return e__;      \
  } while (0)

/* cudaMemcpy and its kinds, as the CUDA runtime declares them */
typedef int (*MemcpyFn)(void* dst, const void* src, size_t count, int kind);
enum { kHostToDevice = 1, kDeviceToHost = 2 };

static void* cudart = NULL;
static MemcpyFn cuda_memcpy = NULL;

static TRITONSERVER_Error* Failed(const char* what) {
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, what);
}

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  TRITONSERVER_Message* config;
  RETURN_IF_ERROR(TRITONBACKEND_BackendConfig(backend, &config));
  const char* json;
  size_t size;
  TRITONSERVER_Error* err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  char path[4096] = {0};
  if (err == NULL) {
    /* {"cmdline": {"cudart": "PATH", ...}}: the string after "cudart" */
    const char* at = strstr(json, "\"cudart\"");
    if (at != NULL) {
      at += strlen("\"cudart\"");
      while (*at == ' ' || *at == ':') ++at;
      const char* end = *at == '"' ? strchr(++at, '"') : NULL;
      if (end != NULL && (size_t)(end - at) < sizeof(path)) memcpy(path, at, (size_t)(end - at));
    }
  }
  RETURN_IF_ERROR(err);  /* config stays the server's: not deleted */
  if (path[0] == '\0') return Failed("--backend-config=gpu_roundtrip,cudart=PATH is required");
  cudart = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (cudart == NULL) return Failed("the CUDA runtime named by cudart= does not load");
  cuda_memcpy = (MemcpyFn)dlsym(cudart, "cudaMemcpy");
  if (cuda_memcpy == NULL) return Failed("the CUDA runtime has no cudaMemcpy");
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* backend) {
  (void)backend;
  if (cudart != NULL) dlclose(cudart);
  cudart = NULL;
  return NULL;
}

/* The instance's state: the manager and the device it allocates on. */
typedef struct {
  TRITONBACKEND_MemoryManager* manager;
  int32_t device;
} Instance;

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* inst) {
  TRITONBACKEND_Model* model;
  TRITONBACKEND_Backend* backend;
  Instance* state = calloc(1, sizeof(Instance));
  if (state == NULL) return Failed("out of memory");
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceModel(inst, &model);
  if (err == NULL) err = TRITONBACKEND_ModelBackend(model, &backend);
  if (err == NULL) err = TRITONBACKEND_BackendMemoryManager(backend, &state->manager);
  if (err == NULL) err = TRITONBACKEND_ModelInstanceDeviceId(inst, &state->device);
  /* a KIND_GPU instance must be told it is one (Triton's backends set up
     their CUDA streams on that answer) */
  TRITONSERVER_InstanceGroupKind kind = TRITONSERVER_INSTANCEGROUPKIND_AUTO;
  if (err == NULL) err = TRITONBACKEND_ModelInstanceKind(inst, &kind);
  if (err == NULL && kind != TRITONSERVER_INSTANCEGROUPKIND_GPU)
    err = Failed("gpu_roundtrip: the instance is not a GPU instance");
  if (err == NULL) err = TRITONBACKEND_ModelInstanceSetState(inst, state);
  if (err != NULL) free(state);
  return err;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* inst) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(inst, &state));
  free(state);
  return NULL;
}

/* INPUT0 (all its buffers) through GPU then pinned memory into `out`, doubled. */
static TRITONSERVER_Error* RoundTrip(Instance* state, TRITONBACKEND_Input* input,
                                     uint32_t buffers, uint64_t bytes, float* out) {
  void* gpu = NULL;
  void* pinned = NULL;
  TRITONSERVER_Error* err = TRITONBACKEND_MemoryManagerAllocate(
      state->manager, &gpu, TRITONSERVER_MEMORY_GPU, state->device, bytes);
  if (err == NULL) {
    err = TRITONBACKEND_MemoryManagerAllocate(state->manager, &pinned,
                                              TRITONSERVER_MEMORY_CPU_PINNED, 0, bytes);
  }
  uint64_t done = 0;
  for (uint32_t b = 0; err == NULL && b < buffers; ++b) {
    const void* in;
    uint64_t n;
    TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
    int64_t mem_id = 0;
    err = TRITONBACKEND_InputBuffer(input, b, &in, &n, &mem, &mem_id);
    if (err == NULL && cuda_memcpy((char*)gpu + done, in, n, kHostToDevice) != 0) {
      err = Failed("cudaMemcpy into the manager's GPU memory failed");
    }
    done += n;
  }
  if (err == NULL && cuda_memcpy(pinned, gpu, bytes, kDeviceToHost) != 0) {
    err = Failed("cudaMemcpy into the manager's pinned memory failed");
  }
  if (err == NULL) {
    const float* values = (const float*)pinned;
    for (uint64_t i = 0; i < bytes / sizeof(float); ++i) out[i] = 2.0f * values[i];
  }
  if (pinned != NULL) {
    TRITONSERVER_Error* freed = TRITONBACKEND_MemoryManagerFree(
        state->manager, pinned, TRITONSERVER_MEMORY_CPU_PINNED, 0);
    if (err == NULL) err = freed; else if (freed != NULL) TRITONSERVER_ErrorDelete(freed);
  }
  if (gpu != NULL) {
    TRITONSERVER_Error* freed = TRITONBACKEND_MemoryManagerFree(
        state->manager, gpu, TRITONSERVER_MEMORY_GPU, state->device);
    if (err == NULL) err = freed; else if (freed != NULL) TRITONSERVER_ErrorDelete(freed);
  }
  return err;
}

static TRITONSERVER_Error* Respond(Instance* state, TRITONBACKEND_Request* request) {
  TRITONBACKEND_Input* input;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, "INPUT0", &input));
  TRITONSERVER_DataType dtype;
  const int64_t* shape;
  uint32_t dims, buffers;
  uint64_t bytes;
  RETURN_IF_ERROR(
      TRITONBACKEND_InputProperties(input, NULL, &dtype, &shape, &dims, &bytes, &buffers));
  TRITONBACKEND_Response* response;
  RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, request));
  TRITONBACKEND_Output* output;
  TRITONSERVER_Error* err =
      TRITONBACKEND_ResponseOutput(response, &output, "OUTPUT0", dtype, shape, dims);
  void* out = NULL;
  TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_CPU;
  int64_t mem_id = 0;
  if (err == NULL) err = TRITONBACKEND_OutputBuffer(output, &out, bytes, &mem, &mem_id);
  if (err == NULL && mem != TRITONSERVER_MEMORY_CPU && mem != TRITONSERVER_MEMORY_CPU_PINNED) {
    err = Failed("the output buffer is not in host memory");
  }
  if (err == NULL) err = RoundTrip(state, input, buffers, bytes, (float*)out);
  TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
  if (err != NULL) TRITONSERVER_ErrorDelete(err);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* inst,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t count) {
  void* state;
  RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceState(inst, &state));
  for (uint32_t r = 0; r < count; ++r) {
    RETURN_IF_ERROR(Respond((Instance*)state, requests[r]));
    RETURN_IF_ERROR(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
  }
  return NULL;
}
