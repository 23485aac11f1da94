// The objects behind Triton's opaque C API handles (tritonbackend.h):
// what pyserver's libtritonserver.so hands a backend loaded from a
// libtriton_NAME.so. Plain C++ (no Python): engine/triton_c.pyx fills
// requests from a batch's arrays, runs TRITONBACKEND_ModelInstanceExecute
// with the GIL released, and takes the responses from each request's
// ResponseSink (response_sink.h), also those sent after Execute returned.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pyserver/model_stats.h"
#include "pyserver/triton/response_sink.h"
#include "triton/core/tritonbackend.h"

struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  std::string message;
};

struct TRITONSERVER_Message {
  std::string json;
};

// A parameter a backend made (metric labels, model load parameters).
struct TRITONSERVER_Parameter {
  pyserver::triton::Parameter parameter;
};

// Custom metrics a backend made. Every live family is in the library's
// registry (SnapshotMetrics), which /metrics reads beside the Python
// models' families; a family's metrics and their values change under
// MetricsMutex().
struct TRITONSERVER_MetricFamily {
  TRITONSERVER_MetricKind kind;
  std::string name;
  std::string description;
  std::vector<TRITONSERVER_Metric*> metrics;  // live, in creation order
};

struct TRITONSERVER_MetricArgs {
  TRITONSERVER_MetricKind kind = TRITONSERVER_METRIC_KIND_COUNTER;
  std::vector<double> buckets;  // a histogram's upper bounds
  bool has_buckets = false;
};

struct TRITONSERVER_Metric {
  TRITONSERVER_MetricFamily* family;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;                     // a counter's or a gauge's
  std::vector<double> buckets;          // a histogram's upper bounds ...
  std::vector<uint64_t> bucket_counts;  // ... what fell in each (the last: above all)
  double sum = 0;
  uint64_t count = 0;
};

namespace pyserver::triton {

// One metric of a family, as /metrics shows it.
struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;  // a counter's or a gauge's; a histogram's sum
  std::vector<double> buckets;
  std::vector<uint64_t> bucket_counts;
};

struct MetricFamilySnapshot {
  std::string name;
  std::string description;
  TRITONSERVER_MetricKind kind;
  std::vector<MetricSample> samples;
};

// Every live custom metric family backends made, with its metrics' values.
std::vector<MetricFamilySnapshot> SnapshotMetrics();

// A batch's times as a backend reports them (all zero: none reported).
struct BatchTimes {
  uint64_t exec_start_ns = 0;
  uint64_t compute_start_ns = 0;
  uint64_t compute_end_ns = 0;
  uint64_t exec_end_ns = 0;
};

// The entry points one backend library exports (all but Execute optional).
struct EntryPoints {
  using BackendFn = TRITONSERVER_Error* (*)(TRITONBACKEND_Backend*);
  using ModelFn = TRITONSERVER_Error* (*)(TRITONBACKEND_Model*);
  using InstanceFn = TRITONSERVER_Error* (*)(TRITONBACKEND_ModelInstance*);
  using ExecuteFn = TRITONSERVER_Error* (*)(TRITONBACKEND_ModelInstance*,
                                            TRITONBACKEND_Request**, uint32_t);
  BackendFn initialize = nullptr;
  BackendFn finalize = nullptr;
  ModelFn model_initialize = nullptr;
  ModelFn model_finalize = nullptr;
  InstanceFn instance_initialize = nullptr;
  InstanceFn instance_finalize = nullptr;
  ExecuteFn execute = nullptr;
  InstanceFn instance_ready = nullptr;  // optional: TRITONBACKEND_ModelInstanceReady
};

}  // namespace pyserver::triton

struct TRITONBACKEND_Backend {
  std::string name;
  std::string location;  // the library's folder (TRITONBACKEND_BackendArtifacts)
  // {"cmdline":{...}} from --backend-config: TRITONBACKEND_BackendConfig
  // hands out this message, which stays the server's (Triton's rule: the
  // backend neither changes nor deletes it)
  TRITONSERVER_Message config;
  void* state = nullptr;
  TRITONBACKEND_ExecutionPolicy policy = TRITONBACKEND_EXECUTION_BLOCKING;
  pyserver::triton::EntryPoints entry;
};

namespace pyserver::triton {

// What a model or an instance last reported it holds
// (TRITONBACKEND_ModelReportMemoryUsage / ModelInstanceReportMemoryUsage):
// each report replaces the one before, as in Triton.
class MemoryUsage {
 public:
  struct Entry {
    TRITONSERVER_MemoryType type;
    int64_t id;
    uint64_t byte_size;
  };
  void Replace(TRITONSERVER_BufferAttributes** usage, uint32_t count) {
    std::map<std::pair<int, int64_t>, uint64_t> fresh;
    for (uint32_t i = 0; i < count; ++i) {
      if (usage[i] == nullptr) continue;
      fresh[{usage[i]->memory_type, usage[i]->memory_type_id}] = usage[i]->byte_size;
    }
    std::lock_guard<std::mutex> lock(mu_);
    by_device_.swap(fresh);
  }
  // By memory type, then id.
  std::vector<Entry> Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Entry> out;
    for (const auto& kv : by_device_) {
      out.push_back({static_cast<TRITONSERVER_MemoryType>(kv.first.first), kv.first.second,
                     kv.second});
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int, int64_t>, uint64_t> by_device_;
};

}  // namespace pyserver::triton

struct TRITONBACKEND_Model {
  TRITONBACKEND_Backend* backend = nullptr;
  std::string name;
  uint64_t version = 0;
  std::string repository;  // the model's folder
  std::string config_json;
  bool auto_complete = false;
  void* state = nullptr;
  // What TRITONBACKEND_ModelServer names (inference.h); null: no server.
  TRITONSERVER_Server* server = nullptr;
  pyserver::triton::MemoryUsage memory_usage;
};

struct TRITONBACKEND_ModelInstance {
  TRITONBACKEND_Model* model = nullptr;
  std::string name;
  TRITONSERVER_InstanceGroupKind kind = TRITONSERVER_INSTANCEGROUPKIND_CPU;
  int32_t device_id = 0;
  // Its host policy, {"<name>": {"<setting>": "<value>", ...}}: the
  // message ModelInstanceHostPolicy gives, which stays the server's.
  TRITONSERVER_Message host_policy;
  void* state = nullptr;
  // What the backend last reported with ModelInstanceReportBatchStatistics
  // (steady-clock ns, as pyserver's own stamps): the batch's times.
  std::mutex stats_mu;
  pyserver::triton::BatchTimes reported;
  // The model's statistics, for TRITONBACKEND_ModelInstanceReportResponseStatistics
  // (null until the server attaches them).
  std::shared_ptr<pyserver::ModelStats> stats;
  pyserver::triton::MemoryUsage memory_usage;
};

// A view of one input: its bytes belong to the batch's arrays, which the
// caller keeps alive until the request is released.
struct TRITONBACKEND_Input {
  std::string name;
  TRITONSERVER_DataType datatype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t byte_size = 0;
  TRITONSERVER_BufferAttributes attributes;  // TRITONBACKEND_InputBufferAttributes
};

// A state a backend made for a request (TRITONBACKEND_StateNew); the
// request owns it, as Triton's does. TRITONBACKEND_StateUpdate gives the
// request's sink a copy of its value.
struct TRITONBACKEND_State {
  std::shared_ptr<pyserver::triton::ResponseSink> sink;
  pyserver::triton::OutputTensor tensor;
};

namespace pyserver::triton {

// What a program asked of a trace it made (TRITONSERVER_InferenceTraceNew,
// _TensorNew): the levels to report and where to. A program's trace and
// every child the server traces under it report to the same callbacks.
struct ProgramTrace {
  uint32_t level = 0;  // TRITONSERVER_TRACE_LEVEL_* bits
  TRITONSERVER_InferenceTraceActivityFn_t activity_fn = nullptr;
  TRITONSERVER_InferenceTraceTensorActivityFn_t tensor_activity_fn = nullptr;
  TRITONSERVER_InferenceTraceReleaseFn_t release_fn = nullptr;
  void* userp = nullptr;
};

}  // namespace pyserver::triton

// A request's trace, as far as a backend sees it: the id the server's
// tracer gave it (TRITONBACKEND_RequestTrace), or a child spawned from one
// (TRITONSERVER_InferenceTraceSpawnChildTrace), which names its parent and
// gets an id of its own when the server starts the BLS request it is given
// with. Or a program's (`program_owned`): one it made for its own request,
// or one the server made for a request it spawned under such a trace and
// handed to the program's release callback; their activities go to
// `program`'s callbacks.
struct TRITONSERVER_InferenceTrace {
  uint64_t id = 0;
  uint64_t parent_id = 0;
  bool spawned = false;
  bool program_owned = false;
  pyserver::triton::ProgramTrace program;
  std::string context;  // TRITONSERVER_InferenceTraceSetContext's
  // A request's own trace names its request; a spawned child names nothing
  // until the server starts its request.
  std::string model_name;
  int64_t model_version = -1;
  std::string request_id;
  // Where TRITONSERVER_InferenceTraceReportActivity records a backend's own
  // activity in a request's trace (the server's tracer); null for a child.
  using ReportFn = void (*)(void* reporter, uint64_t id, uint64_t timestamp_ns, const char* name);
  ReportFn report = nullptr;
  void* reporter = nullptr;
};

struct TRITONBACKEND_Request {
  std::string id;
  TRITONSERVER_InferenceTrace trace;  // id 0: not traced
  uint64_t correlation_id = 0;
  std::string correlation_id_string;
  bool correlation_is_string = false;
  uint32_t flags = 0;  // TRITONSERVER_REQUEST_FLAG_SEQUENCE_START/END
  uint64_t timeout_us = 0;
  std::vector<pyserver::triton::Parameter> parameters;  // the client's, less the reserved
  // The model's implicit state outputs (sequence_batching.state), or null
  // when it has none; owned by the caller, alive while the request is.
  const std::vector<std::string>* state_names = nullptr;
  std::string model_name;  // for the texts of state errors
  std::vector<std::unique_ptr<TRITONBACKEND_State>> states;
  std::vector<TRITONBACKEND_Input> inputs;
  std::vector<std::string> requested_outputs;
  std::shared_ptr<pyserver::triton::ResponseSink> sink =
      std::make_shared<pyserver::triton::ResponseSink>();
  bool released = false;
  uint32_t release_flags = 0;
};

struct TRITONBACKEND_ResponseFactory {
  std::shared_ptr<pyserver::triton::ResponseSink> sink;
};

struct TRITONBACKEND_Response {
  std::shared_ptr<pyserver::triton::ResponseSink> sink;
  std::vector<std::unique_ptr<pyserver::triton::OutputTensor>> outputs;
  std::vector<pyserver::triton::Parameter> parameters;
};

// What TRITONBACKEND_ModelInstanceReportResponseStatistics is given: kept
// only long enough to be checked (pyserver times responses itself).
struct TRITONBACKEND_ModelInstanceResponseStatistics {
  TRITONBACKEND_ModelInstance* instance = nullptr;
  TRITONBACKEND_ResponseFactory* factory = nullptr;
  uint64_t response_start_ns = 0;
  uint64_t compute_output_start_ns = 0;  // 0: no output was computed
  uint64_t response_end_ns = 0;
  bool failed = false;
  TRITONSERVER_Error_Code error_code = TRITONSERVER_ERROR_INTERNAL;
};

struct TRITONBACKEND_Output {};  // an OutputTensor, seen through the C API
