// Triton's backend C API as csrc/src/triton_api.cc implements it: errors,
// requests and inputs, responses into a request's sink (directly and
// through a factory), output buffers, messages, the memory manager.
#include <gtest/gtest.h>

#include <cstring>

#include "pyserver/cuda_runtime.h"
#include "pyserver/triton/library.h"
#include "pyserver/triton/objects.h"

namespace pyserver::triton {
namespace {

TEST(TritonApi, ErrorsCarryCodeAndMessageAndBecomeStatuses) {
  TRITONSERVER_Error* err = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "later");
  EXPECT_EQ(TRITONSERVER_ErrorCode(err), TRITONSERVER_ERROR_UNAVAILABLE);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(err), "later");
  EXPECT_STREQ(TRITONSERVER_ErrorCodeString(err), "Unavailable");
  Status status = FromError(err);  // takes it
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "later");
  EXPECT_TRUE(FromError(nullptr).ok());
}

TEST(TritonApi, DataTypes) {
  EXPECT_STREQ(TRITONSERVER_DataTypeString(TRITONSERVER_TYPE_FP32), "FP32");
  EXPECT_EQ(TRITONSERVER_StringToDataType("INT64"), TRITONSERVER_TYPE_INT64);
  EXPECT_EQ(TRITONSERVER_DataTypeByteSize(TRITONSERVER_TYPE_FP16), 2u);
  EXPECT_EQ(TRITONSERVER_DataTypeByteSize(TRITONSERVER_TYPE_BYTES), 0u);
}

TEST(TritonApi, RequestInputsAndAResponse) {
  float data[3] = {1, 2, 3};
  TRITONBACKEND_Request request;
  request.id = "r1";
  request.inputs.push_back({"IN", TRITONSERVER_TYPE_FP32, {1, 3}, data, sizeof(data)});
  request.requested_outputs.push_back("OUT");
  uint32_t count = 0;
  ASSERT_EQ(TRITONBACKEND_RequestInputCount(&request, &count), nullptr);
  EXPECT_EQ(count, 1u);
  TRITONBACKEND_Input* input = nullptr;
  ASSERT_EQ(TRITONBACKEND_RequestInput(&request, "IN", &input), nullptr);
  TRITONSERVER_Error* missing = TRITONBACKEND_RequestInput(&request, "NOPE", &input);
  ASSERT_NE(missing, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(missing), TRITONSERVER_ERROR_INVALID_ARG);
  TRITONSERVER_ErrorDelete(missing);
  const void* buffer;
  uint64_t size;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  ASSERT_EQ(TRITONBACKEND_InputBuffer(input, 0, &buffer, &size, &mem, &mem_id), nullptr);
  EXPECT_EQ(buffer, data);
  EXPECT_EQ(size, sizeof(data));
  TRITONSERVER_Error* out_of_range = TRITONBACKEND_InputBuffer(input, 1, &buffer, &size, &mem,
                                                               &mem_id);
  ASSERT_NE(out_of_range, nullptr);
  TRITONSERVER_ErrorDelete(out_of_range);

  TRITONBACKEND_Response* response;
  ASSERT_EQ(TRITONBACKEND_ResponseNew(&response, &request), nullptr);
  TRITONBACKEND_Output* output;
  const int64_t shape[2] = {1, 3};
  ASSERT_EQ(TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32,
                                         shape, 2),
            nullptr);
  void* out;
  ASSERT_EQ(TRITONBACKEND_OutputBuffer(output, &out, sizeof(data), &mem, &mem_id), nullptr);
  EXPECT_EQ(mem, TRITONSERVER_MEMORY_CPU);
  std::memcpy(out, data, sizeof(data));
  ASSERT_EQ(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, nullptr),
            nullptr);
  // RESCHEDULE is refused (no iterative C-backend model) and the request
  // stays the backend's, as in Triton for a model not configured for it
  TRITONSERVER_Error* reschedule =
      TRITONBACKEND_RequestRelease(&request, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE);
  ASSERT_NE(reschedule, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(reschedule), TRITONSERVER_ERROR_INVALID_ARG);
  TRITONSERVER_ErrorDelete(reschedule);
  EXPECT_FALSE(request.released);
  ASSERT_EQ(TRITONBACKEND_RequestRelease(&request, TRITONSERVER_REQUEST_RELEASE_ALL), nullptr);
  EXPECT_TRUE(request.released);

  std::vector<SentResponse> sent = request.sink->Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].final);
  ASSERT_EQ(sent[0].outputs.size(), 1u);
  EXPECT_EQ(sent[0].outputs[0]->name, "OUT");
  EXPECT_EQ(sent[0].outputs[0]->shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(std::memcmp(sent[0].outputs[0]->data.data(), data, sizeof(data)), 0);
}

TEST(TritonApi, AResponsesOutputsCanBeReadBackByNameAndIndex) {
  TRITONBACKEND_Request request;
  TRITONBACKEND_Response* response;
  ASSERT_EQ(TRITONBACKEND_ResponseNew(&response, &request), nullptr);
  const int64_t shape[2] = {2, 3};
  TRITONBACKEND_Output* output;
  ASSERT_EQ(TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_FP32, shape, 2),
            nullptr);
  TRITONSERVER_DataType datatype = TRITONSERVER_TYPE_INVALID;
  const int64_t* got = nullptr;
  uint64_t dims = 0;
  ASSERT_EQ(TRITONBACKEND_InferenceResponseOutputByName(response, "OUT", &datatype, &got, &dims),
            nullptr);
  EXPECT_EQ(datatype, TRITONSERVER_TYPE_FP32);
  ASSERT_EQ(dims, 2u);
  EXPECT_EQ(got[1], 3);
  TRITONSERVER_Error* err =
      TRITONBACKEND_InferenceResponseOutputByName(response, "NOPE", &datatype, &got, &dims);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(err), TRITONSERVER_ERROR_NOT_FOUND);
  TRITONSERVER_ErrorDelete(err);
  const char* name = nullptr;
  ASSERT_EQ(TRITONBACKEND_InferenceResponseOutput(response, 0, &name, &datatype, &got, &dims),
            nullptr);
  EXPECT_STREQ(name, "OUT");
  err = TRITONBACKEND_InferenceResponseOutput(response, 1, &name, &datatype, &got, &dims);
  ASSERT_NE(err, nullptr);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(err), "out of bounds index 1: response has 1 outputs");
  TRITONSERVER_ErrorDelete(err);
  ASSERT_EQ(TRITONBACKEND_ResponseDelete(response), nullptr);
}

TEST(TritonApi, AFactoryOutlivesItsRequestAndSendsTheFinalFlagAlone) {
  TRITONBACKEND_ResponseFactory* factory;
  std::shared_ptr<ResponseSink> sink;
  {
    TRITONBACKEND_Request request;
    sink = request.sink;
    ASSERT_EQ(TRITONBACKEND_ResponseFactoryNew(&factory, &request), nullptr);
  }
  for (int i = 0; i < 2; ++i) {
    TRITONBACKEND_Response* response;
    ASSERT_EQ(TRITONBACKEND_ResponseNewFromFactory(&response, factory), nullptr);
    TRITONSERVER_Error* err =
        i == 1 ? TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "second failed") : nullptr;
    ASSERT_EQ(TRITONBACKEND_ResponseSend(response, 0, err), nullptr);
    TRITONSERVER_ErrorDelete(err);
  }
  ASSERT_EQ(TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
            nullptr);
  ASSERT_EQ(TRITONBACKEND_ResponseFactoryDelete(factory), nullptr);
  std::vector<SentResponse> sent = sink->Take();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_TRUE(sent[0].has_response);
  EXPECT_TRUE(sent[1].has_error);
  EXPECT_EQ(sent[1].error_message, "second failed");
  EXPECT_FALSE(sent[2].has_response);
  EXPECT_TRUE(sent[2].final);
}

std::string MessageOf(TRITONSERVER_Error* err) {
  std::string text = err != nullptr ? TRITONSERVER_ErrorMessage(err) : "";
  TRITONSERVER_ErrorDelete(err);
  return text;
}

TEST(TritonApi, ResponseStatisticsCountPerIndexAsTritonDoes) {
  TRITONBACKEND_ModelInstance instance;
  instance.stats = std::make_shared<ModelStats>();
  TRITONBACKEND_Request request;
  TRITONBACKEND_ResponseFactory* factory;
  ASSERT_EQ(TRITONBACKEND_ResponseFactoryNew(&factory, &request), nullptr);
  auto report = [&](uint64_t start, uint64_t output_start, uint64_t end,
                    TRITONSERVER_Error_Code* code) {
    TRITONBACKEND_ModelInstanceResponseStatistics* rs;
    EXPECT_EQ(TRITONBACKEND_ModelInstanceResponseStatisticsNew(&rs), nullptr);
    TRITONBACKEND_ModelInstanceResponseStatisticsSetModelInstance(rs, &instance);
    TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseFactory(rs, factory);
    TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseStart(rs, start);
    TRITONBACKEND_ModelInstanceResponseStatisticsSetComputeOutputStart(rs, output_start);
    TRITONBACKEND_ModelInstanceResponseStatisticsSetResponseEnd(rs, end);
    TRITONSERVER_Error* error = code != nullptr ? TRITONSERVER_ErrorNew(*code, "x") : nullptr;
    TRITONBACKEND_ModelInstanceResponseStatisticsSetError(rs, error);
    TRITONSERVER_ErrorDelete(error);  // the report keeps only its code
    std::string text = MessageOf(TRITONBACKEND_ModelInstanceReportResponseStatistics(rs));
    TRITONBACKEND_ModelInstanceResponseStatisticsDelete(rs);
    return text;
  };
  TRITONSERVER_Error_Code failed = TRITONSERVER_ERROR_INTERNAL;
  TRITONSERVER_Error_Code cancelled = TRITONSERVER_ERROR_CANCELLED;
  EXPECT_EQ(report(100, 160, 200, nullptr), "");  // index 0: success
  EXPECT_EQ(report(300, 0, 340, &failed), "");     // 1: failed before any output
  EXPECT_EQ(report(400, 0, 410, nullptr), "");     // 2: empty (the final flag alone)
  EXPECT_EQ(report(500, 0, 520, &cancelled), "");  // 3: cancelled
  // Times out of order are refused with Triton's texts; the index is spent.
  EXPECT_EQ(report(700, 650, 800, nullptr), "Response start cannot happen after compute output start");
  EXPECT_EQ(report(700, 900, 800, nullptr), "Compute output start cannot happen after response end");
  EXPECT_EQ(report(900, 0, 800, nullptr), "Response start cannot happen after response end");
  EXPECT_EQ(report(1000, 1001, 1003, &failed), "");  // 7: failed with its outputs made
  // Without the instance or factory set, nothing is counted.
  TRITONBACKEND_ModelInstanceResponseStatistics* bare;
  ASSERT_EQ(TRITONBACKEND_ModelInstanceResponseStatisticsNew(&bare), nullptr);
  EXPECT_NE(MessageOf(TRITONBACKEND_ModelInstanceReportResponseStatistics(bare)), "");
  TRITONBACKEND_ModelInstanceResponseStatisticsDelete(bare);
  TRITONBACKEND_ResponseFactoryDelete(factory);

  ModelStatsSnapshot s = instance.stats->Snapshot();
  ASSERT_EQ(s.response_stats.size(), 5u);  // 0-3 and 7
  const ResponseStat& ok = s.response_stats[0];
  EXPECT_EQ(ok.success.count, 1u);
  EXPECT_EQ(ok.success.ns, 100u);
  EXPECT_EQ(ok.compute_infer.ns, 60u);
  EXPECT_EQ(ok.compute_output.ns, 40u);
  const ResponseStat& fail = s.response_stats[1];
  EXPECT_EQ(fail.fail.count, 1u);
  EXPECT_EQ(fail.compute_infer.ns, 40u);
  EXPECT_EQ(fail.compute_output.count, 0u);
  const ResponseStat& empty = s.response_stats[2];
  EXPECT_EQ(empty.empty_response.count, 1u);
  EXPECT_EQ(empty.compute_infer.count, 1u);
  EXPECT_EQ(empty.compute_output.count, 0u);
  const ResponseStat& cancel = s.response_stats[3];
  EXPECT_EQ(cancel.cancel.count, 1u);
  EXPECT_EQ(cancel.cancel.ns, 20u);
  EXPECT_EQ(cancel.compute_infer.count, 0u);
  const ResponseStat& late_fail = s.response_stats[7];
  EXPECT_EQ(late_fail.fail.ns, 3u);
  EXPECT_EQ(late_fail.compute_output.count, 1u);
}

TEST(TritonApi, MemoryUsageReportsReplaceTheLastAndAreKeptByDevice) {
  TRITONBACKEND_Model model;
  TRITONSERVER_BufferAttributes cpu, gpu1, cpu_again;
  cpu.byte_size = 10;
  gpu1.memory_type = TRITONSERVER_MEMORY_GPU;
  gpu1.memory_type_id = 1;
  gpu1.byte_size = 20;
  cpu_again.byte_size = 30;  // the same device again: the later entry stands
  TRITONSERVER_BufferAttributes* first[] = {&gpu1, nullptr, &cpu, &cpu_again};
  ASSERT_EQ(TRITONBACKEND_ModelReportMemoryUsage(&model, first, 4), nullptr);
  std::vector<MemoryUsage::Entry> seen = model.memory_usage.Snapshot();
  ASSERT_EQ(seen.size(), 2u);  // by type: CPU before GPU
  EXPECT_EQ(seen[0].type, TRITONSERVER_MEMORY_CPU);
  EXPECT_EQ(seen[0].byte_size, 30u);
  EXPECT_EQ(seen[1].type, TRITONSERVER_MEMORY_GPU);
  EXPECT_EQ(seen[1].id, 1);
  TRITONSERVER_BufferAttributes* second[] = {&cpu};
  ASSERT_EQ(TRITONBACKEND_ModelReportMemoryUsage(&model, second, 1), nullptr);
  seen = model.memory_usage.Snapshot();
  ASSERT_EQ(seen.size(), 1u);  // the GPU entry went with the report that had it
  EXPECT_EQ(seen[0].byte_size, 10u);
  ASSERT_EQ(TRITONBACKEND_ModelReportMemoryUsage(&model, nullptr, 0), nullptr);
  EXPECT_TRUE(model.memory_usage.Snapshot().empty());
  EXPECT_NE(MessageOf(TRITONBACKEND_ModelReportMemoryUsage(&model, nullptr, 1)), "");
  TRITONBACKEND_ModelInstance instance;
  ASSERT_EQ(TRITONBACKEND_ModelInstanceReportMemoryUsage(&instance, second, 1), nullptr);
  EXPECT_EQ(instance.memory_usage.Snapshot().size(), 1u);
}

TEST(TritonApi, MessagesAndTheMemoryManager) {
  TRITONSERVER_Message* message;
  const char json[] = "{\"a\":1}";
  ASSERT_EQ(TRITONSERVER_MessageNewFromSerializedJson(&message, json, sizeof(json) - 1),
            nullptr);
  const char* base;
  size_t size;
  ASSERT_EQ(TRITONSERVER_MessageSerializeToJson(message, &base, &size), nullptr);
  EXPECT_EQ(std::string(base, size), json);
  TRITONSERVER_MessageDelete(message);

  TRITONBACKEND_Backend backend;
  TRITONBACKEND_MemoryManager* manager;
  ASSERT_EQ(TRITONBACKEND_BackendMemoryManager(&backend, &manager), nullptr);
  void* buffer;
  ASSERT_EQ(TRITONBACKEND_MemoryManagerAllocate(manager, &buffer, TRITONSERVER_MEMORY_CPU, 0, 64),
            nullptr);
  std::memset(buffer, 1, 64);
  ASSERT_EQ(TRITONBACKEND_MemoryManagerFree(manager, buffer, TRITONSERVER_MEMORY_CPU, 0), nullptr);
  // GPU memory where this machine has CUDA (triton_memory_manager_test.cc
  // covers both cases against a stand-in runtime)
  TRITONSERVER_Error* gpu =
      TRITONBACKEND_MemoryManagerAllocate(manager, &buffer, TRITONSERVER_MEMORY_GPU, 0, 64);
  if (pyserver::CudaRuntime::Get().available()) {
    ASSERT_EQ(gpu, nullptr);
    EXPECT_EQ(TRITONBACKEND_MemoryManagerFree(manager, buffer, TRITONSERVER_MEMORY_GPU, 0), nullptr);
  } else {
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(TRITONSERVER_ErrorCode(gpu), TRITONSERVER_ERROR_UNSUPPORTED);
    TRITONSERVER_ErrorDelete(gpu);
  }
}

// What a getter of a server-owned message must do: give ``own`` itself on
// every call (a backend that asks twice leaks nothing), reading as its JSON.
template <typename Get>
void ExpectTheServersMessage(Get get, TRITONSERVER_Message* own) {
  TRITONSERVER_Message* first;
  TRITONSERVER_Message* second;
  ASSERT_EQ(get(&first), nullptr);
  ASSERT_EQ(get(&second), nullptr);
  EXPECT_EQ(first, own);
  EXPECT_EQ(second, first);
  const char* base;
  size_t size;
  ASSERT_EQ(TRITONSERVER_MessageSerializeToJson(first, &base, &size), nullptr);
  EXPECT_EQ(std::string(base, size), own->json);
}

TEST(TritonApi, TheBackendConfigMessageStaysTheServers) {
  // Triton's rule: the message TRITONBACKEND_BackendConfig returns is owned
  // by the server; the backend neither changes nor deletes it.
  TRITONBACKEND_Backend backend;
  backend.config.json = "{\"cmdline\":{\"k\":\"v\"}}";
  ExpectTheServersMessage(
      [&](TRITONSERVER_Message** m) { return TRITONBACKEND_BackendConfig(&backend, m); },
      &backend.config);
}

TEST(TritonApi, AnInstancesHostPolicyIsTheServersMessage) {
  // As BackendConfig's: the same server-owned message on every call.
  TRITONBACKEND_ModelInstance instance;
  instance.host_policy.json = "{\"numa0\":{\"numa-node\":\"0\"}}";
  ExpectTheServersMessage(
      [&](TRITONSERVER_Message** m) {
        return TRITONBACKEND_ModelInstanceHostPolicy(&instance, m);
      },
      &instance.host_policy);
  TRITONSERVER_Error* refused = TRITONBACKEND_ModelInstanceHostPolicy(&instance, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(refused), TRITONSERVER_ERROR_INVALID_ARG);
  TRITONSERVER_ErrorDelete(refused);
}

TEST(TritonApi, CustomMetricsOfEachKindTakeWhatTheirKindAllows) {
  TRITONSERVER_MetricFamily* gauges;
  ASSERT_EQ(TRITONSERVER_MetricFamilyNew(&gauges, TRITONSERVER_METRIC_KIND_GAUGE, "g", "a gauge"),
            nullptr);
  TRITONSERVER_MetricKind kind;
  ASSERT_EQ(TRITONSERVER_GetMetricFamilyKind(gauges, &kind), nullptr);
  EXPECT_EQ(kind, TRITONSERVER_METRIC_KIND_GAUGE);
  int64_t seven = 7;
  TRITONSERVER_Parameter* label = TRITONSERVER_ParameterNew("n", TRITONSERVER_PARAMETER_INT, &seven);
  const TRITONSERVER_Parameter* labels[1] = {label};
  TRITONSERVER_Metric* gauge;
  ASSERT_EQ(TRITONSERVER_MetricNew(&gauge, gauges, labels, 1), nullptr);
  TRITONSERVER_ParameterDelete(label);
  kind = TRITONSERVER_METRIC_KIND_COUNTER;
  ASSERT_EQ(TRITONSERVER_GetMetricKind(gauge, &kind), nullptr);
  EXPECT_EQ(kind, TRITONSERVER_METRIC_KIND_GAUGE);
  ASSERT_EQ(TRITONSERVER_MetricSet(gauge, 2.5), nullptr);
  ASSERT_EQ(TRITONSERVER_MetricIncrement(gauge, -1.0), nullptr);
  double value;
  ASSERT_EQ(TRITONSERVER_MetricValue(gauge, &value), nullptr);
  EXPECT_DOUBLE_EQ(value, 1.5);
  TRITONSERVER_Error* observe = TRITONSERVER_MetricObserve(gauge, 1.0);
  ASSERT_NE(observe, nullptr);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(observe),
               "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe");
  TRITONSERVER_ErrorDelete(observe);

  TRITONSERVER_MetricFamily* histograms;
  ASSERT_EQ(TRITONSERVER_MetricFamilyNew(&histograms, TRITONSERVER_METRIC_KIND_HISTOGRAM, "h", ""),
            nullptr);
  TRITONSERVER_Metric* histogram;
  TRITONSERVER_Error* no_buckets = TRITONSERVER_MetricNew(&histogram, histograms, nullptr, 0);
  ASSERT_NE(no_buckets, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(no_buckets), TRITONSERVER_ERROR_INVALID_ARG);
  TRITONSERVER_ErrorDelete(no_buckets);
  TRITONSERVER_MetricArgs* args;
  ASSERT_EQ(TRITONSERVER_MetricArgsNew(&args), nullptr);
  const double buckets[2] = {1.0, 10.0};
  ASSERT_EQ(TRITONSERVER_MetricArgsSetHistogram(args, buckets, 2), nullptr);
  ASSERT_EQ(TRITONSERVER_MetricNewWithArgs(&histogram, histograms, nullptr, 0, args), nullptr);
  TRITONSERVER_MetricArgsDelete(args);
  ASSERT_EQ(TRITONSERVER_MetricObserve(histogram, 0.5), nullptr);
  ASSERT_EQ(TRITONSERVER_MetricObserve(histogram, 5.0), nullptr);
  ASSERT_EQ(TRITONSERVER_MetricObserve(histogram, 50.0), nullptr);
  std::vector<MetricFamilySnapshot> seen = SnapshotMetrics();
  const MetricFamilySnapshot* g = nullptr;
  const MetricFamilySnapshot* h = nullptr;
  for (const auto& family : seen) {
    if (family.name == "g") g = &family;
    if (family.name == "h") h = &family;
  }
  ASSERT_NE(g, nullptr);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(g->description, "a gauge");
  ASSERT_EQ(g->samples.size(), 1u);
  EXPECT_EQ(g->samples[0].labels,
            (std::vector<std::pair<std::string, std::string>>{{"n", "7"}}));
  EXPECT_DOUBLE_EQ(g->samples[0].value, 1.5);
  ASSERT_EQ(h->samples.size(), 1u);
  EXPECT_DOUBLE_EQ(h->samples[0].value, 55.5);  // a histogram's sum
  EXPECT_EQ(h->samples[0].bucket_counts, (std::vector<uint64_t>{1, 1, 1}));
  TRITONSERVER_Error* busy = TRITONSERVER_MetricFamilyDelete(histograms);
  ASSERT_NE(busy, nullptr);  // its metric is still alive
  EXPECT_EQ(TRITONSERVER_ErrorCode(busy), TRITONSERVER_ERROR_INTERNAL);
  TRITONSERVER_ErrorDelete(busy);
  TRITONSERVER_Error* value_of_histogram = TRITONSERVER_MetricValue(histogram, &value);
  ASSERT_NE(value_of_histogram, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(value_of_histogram), TRITONSERVER_ERROR_UNSUPPORTED);
  TRITONSERVER_ErrorDelete(value_of_histogram);
  TRITONSERVER_MetricDelete(histogram);
  TRITONSERVER_MetricDelete(gauge);
  TRITONSERVER_MetricFamilyDelete(histograms);
  TRITONSERVER_MetricFamilyDelete(gauges);
}

TEST(TritonApi, ImplicitStateIsCheckedAndTheLastUpdateWins) {
  TRITONBACKEND_Request request;
  request.model_name = "m";
  const int64_t shape[1] = {1};
  TRITONBACKEND_State* state;
  TRITONSERVER_Error* no_states =
      TRITONBACKEND_StateNew(&state, &request, "S", TRITONSERVER_TYPE_INT32, shape, 1);
  ASSERT_NE(no_states, nullptr);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(no_states),
               "unable to add state 'S'. State configuration is missing for model 'm'.");
  TRITONSERVER_ErrorDelete(no_states);
  const std::vector<std::string> names{"S"};
  request.state_names = &names;
  TRITONSERVER_Error* unknown =
      TRITONBACKEND_StateNew(&state, &request, "T", TRITONSERVER_TYPE_INT32, shape, 1);
  ASSERT_NE(unknown, nullptr);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(unknown), "state 'T' is not a valid state name.");
  TRITONSERVER_ErrorDelete(unknown);
  for (int32_t v : {1, 2}) {
    ASSERT_EQ(TRITONBACKEND_StateNew(&state, &request, "S", TRITONSERVER_TYPE_INT32, shape, 1),
              nullptr);
    void* buffer;
    TRITONSERVER_MemoryType mem = TRITONSERVER_MEMORY_GPU;
    int64_t mem_id = 0;
    ASSERT_EQ(TRITONBACKEND_StateBuffer(state, &buffer, sizeof(v), &mem, &mem_id), nullptr);
    EXPECT_EQ(mem, TRITONSERVER_MEMORY_CPU);
    std::memcpy(buffer, &v, sizeof(v));
    ASSERT_EQ(TRITONBACKEND_StateUpdate(state), nullptr);
  }
  auto states = request.sink->TakeStates();
  ASSERT_EQ(states.size(), 1u);
  int32_t kept;
  std::memcpy(&kept, states[0]->data.data(), sizeof(kept));
  EXPECT_EQ(kept, 2);
}

TEST(TritonApi, ALibraryWithoutExecuteIsRefused) {
  std::unique_ptr<BackendLibrary> library;
  Status missing = BackendLibrary::Create("/nonexistent/libtriton_x.so", "x", "{}", &library);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pyserver::triton
