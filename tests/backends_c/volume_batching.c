/* A custom batching strategy for pyserver's tests (Triton's volume batching
 * example, written again in C): a batch holds requests whose inputs total
 * at most the model's MAX_BATCH_VOLUME_BYTES parameter; a model without the
 * parameter fails to load. volume_batching_live() counts the batchers and
 * batch records made and not yet finalized, and volume_batching_includes()
 * the requests asked about, for the csrc test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "triton/core/tritonbackend.h"

static int live = 0;
static int includes = 0;

int volume_batching_live(void) { return __atomic_load_n(&live, __ATOMIC_SEQ_CST); }
int volume_batching_includes(void) { return __atomic_load_n(&includes, __ATOMIC_SEQ_CST); }

TRITONSERVER_Error* TRITONBACKEND_ModelBatcherInitialize(TRITONBACKEND_Batcher** batcher,
                                                         TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* config;
  TRITONSERVER_Error* err = TRITONBACKEND_ModelConfig(model, 1, &config);
  if (err != NULL) return err;
  const char* json;
  size_t size;
  err = TRITONSERVER_MessageSerializeToJson(config, &json, &size);
  if (err != NULL) {
    TRITONSERVER_MessageDelete(config);
    return err;
  }
  /* "MAX_BATCH_VOLUME_BYTES":{"string_value":"N"} */
  unsigned long volume = 0;
  const char* key = strstr(json, "\"MAX_BATCH_VOLUME_BYTES\"");
  const char* value = key == NULL ? NULL : strstr(key, "\"string_value\"");
  /* (a space in the format matches any whitespace, none included) */
  int found = value != NULL && sscanf(value, "\"string_value\" : \"%lu\"", &volume) == 1;
  TRITONSERVER_MessageDelete(config);
  if (!found) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_NOT_FOUND,
                                 "Unable to find MAX_BATCH_VOLUME_BYTES parameter in model config");
  }
  unsigned long* limit = malloc(sizeof(unsigned long));
  *limit = volume;
  *batcher = (TRITONBACKEND_Batcher*)limit;
  __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelBatcherFinalize(TRITONBACKEND_Batcher* batcher) {
  free(batcher);
  __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelBatchInitialize(const TRITONBACKEND_Batcher* batcher,
                                                       void** userp) {
  unsigned long* remaining = malloc(sizeof(unsigned long));
  *remaining = *(const unsigned long*)batcher;
  *userp = remaining;
  __atomic_add_fetch(&live, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelBatchIncludeRequest(TRITONBACKEND_Request* request,
                                                           void* userp, bool* should_include) {
  __atomic_add_fetch(&includes, 1, __ATOMIC_SEQ_CST);
  *should_include = false;
  unsigned long* remaining = userp;
  uint32_t count;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInputCount(request, &count);
  if (err != NULL) return err;
  unsigned long volume = 0;
  for (uint32_t i = 0; i < count; ++i) {
    TRITONBACKEND_Input* input;
    uint64_t byte_size;
    err = TRITONBACKEND_RequestInputByIndex(request, i, &input);
    if (err != NULL) return err;
    err = TRITONBACKEND_InputProperties(input, NULL, NULL, NULL, NULL, &byte_size, NULL);
    if (err != NULL) return err;
    volume += byte_size;
  }
  if (volume <= *remaining) {
    *should_include = true;
    *remaining -= volume;
  }
  return NULL;
}

TRITONSERVER_Error* TRITONBACKEND_ModelBatchFinalize(void* userp) {
  free(userp);
  __atomic_sub_fetch(&live, 1, __ATOMIC_SEQ_CST);
  return NULL;
}
