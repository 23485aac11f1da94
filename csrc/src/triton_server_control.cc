// TRITONSERVER_ServerOptions* and the in-process server's lifecycle and
// queries (TRITONSERVER_ServerNew, _ServerStop, _ServerIsReady, ...): a
// program's own calls, handed to the hooks the engine registers
// (pyserver/triton/server_control.h).
#include "pyserver/triton/server_control.h"

#include <mutex>
#include <string>
#include <vector>

#include "triton_api_internal.h"

using pyserver::triton::Err;
using pyserver::triton::RawEnum;
using pyserver::triton::ServerControlHooks;
using pyserver::triton::ServerQuery;

namespace {

std::mutex g_hooks_mu;
ServerControlHooks g_hooks;
bool g_hooks_set = false;

// Records one option: `set` writes it into the options object.
template <typename Set>
TRITONSERVER_Error* SetOption(TRITONSERVER_ServerOptions* options, Set set) {
  CHECK_ARG(options);
  set(options);
  return nullptr;
}

// `call(hooks)` with the registered hooks (Python started first if need be).
template <typename Call>
TRITONSERVER_Error* WithHooks(Call call) {
  ServerControlHooks hooks;
  if (TRITONSERVER_Error* err = pyserver::triton::ServerControl(&hooks)) return err;
  return call(hooks);
}

// The answer of a query, as text.
TRITONSERVER_Error* Ask(TRITONSERVER_Server* server, ServerQuery query, const char* model_name,
                        int64_t model_version, uint32_t flags, std::string* answer) {
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.query(server, query, model_name, model_version, flags, answer);
  });
}

TRITONSERVER_Error* Query(TRITONSERVER_Server* server, ServerQuery query, const char* model_name,
                          int64_t model_version, uint32_t flags, TRITONSERVER_Message** out) {
  CHECK_ARG(server);
  CHECK_ARG(out);
  std::string json;
  if (TRITONSERVER_Error* err = Ask(server, query, model_name, model_version, flags, &json)) {
    return err;
  }
  *out = new TRITONSERVER_Message{std::move(json)};
  return nullptr;
}

}  // namespace

namespace pyserver::triton {

void SetServerControlHooks(const ServerControlHooks& hooks) {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  g_hooks = hooks;
  g_hooks_set = true;
}

TRITONSERVER_Error* ServerControl(ServerControlHooks* hooks) {
  {
    std::lock_guard<std::mutex> lock(g_hooks_mu);
    if (g_hooks_set) {
      *hooks = g_hooks;
      return nullptr;
    }
  }
  // Not under the lock: importing the engine registers the hooks.
  if (TRITONSERVER_Error* err = BootPython()) return err;
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  if (!g_hooks_set) {
    return Err(TRITONSERVER_ERROR_UNAVAILABLE,
               "pyserver's engine did not register the server API (is libtritonserver.so the "
               "one in pyserver/engine/?)");
  }
  *hooks = g_hooks;
  return nullptr;
}

}  // namespace pyserver::triton

// ---- TRITONSERVER_ServerOptions ------------------------------------------

API TRITONSERVER_ServerOptionsNew(TRITONSERVER_ServerOptions** options) {
  CHECK_ARG(options);
  *options = new TRITONSERVER_ServerOptions();
  return nullptr;
}

API TRITONSERVER_ServerOptionsDelete(TRITONSERVER_ServerOptions* options) {
  delete options;
  return nullptr;
}

API TRITONSERVER_ServerOptionsSetServerId(TRITONSERVER_ServerOptions* options,
                                          const char* server_id) {
  CHECK_ARG(server_id);
  return SetOption(options, [&](auto* o) { o->server_id = server_id; });
}

API TRITONSERVER_ServerOptionsSetModelRepositoryPath(TRITONSERVER_ServerOptions* options,
                                                     const char* model_repository_path) {
  CHECK_ARG(model_repository_path);
  return SetOption(options,
                   [&](auto* o) { o->model_repositories.push_back(model_repository_path); });
}

API TRITONSERVER_ServerOptionsSetModelControlMode(TRITONSERVER_ServerOptions* options,
                                                  TRITONSERVER_ModelControlMode mode) {
  const int value = RawEnum(mode);
  if (value < TRITONSERVER_MODEL_CONTROL_NONE || value > TRITONSERVER_MODEL_CONTROL_EXPLICIT) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "unknown model control mode " + std::to_string(value));
  }
  return SetOption(options, [&](auto* o) { o->model_control_mode = value; });
}

API TRITONSERVER_ServerOptionsSetStartupModel(TRITONSERVER_ServerOptions* options,
                                              const char* model_name) {
  CHECK_ARG(model_name);
  return SetOption(options, [&](auto* o) { o->startup_models.push_back(model_name); });
}

API TRITONSERVER_ServerOptionsSetStrictModelConfig(TRITONSERVER_ServerOptions* options,
                                                   bool strict) {
  return SetOption(options, [&](auto* o) { o->strict_model_config = strict; });
}

API TRITONSERVER_ServerOptionsSetModelConfigName(TRITONSERVER_ServerOptions* options,
                                                 const char* model_config_name) {
  CHECK_ARG(model_config_name);
  return SetOption(options, [&](auto* o) { o->model_config_name = model_config_name; });
}

API TRITONSERVER_ServerOptionsAddRateLimiterResource(TRITONSERVER_ServerOptions* options,
                                                     const char* resource_name,
                                                     const size_t resource_count,
                                                     const int device) {
  CHECK_ARG(resource_name);
  return SetOption(options, [&](auto* o) {
    o->rate_limiter_resources.push_back({resource_name, resource_count, device});
  });
}

API TRITONSERVER_ServerOptionsSetCudaVirtualAddressSize(TRITONSERVER_ServerOptions* options,
                                                        int gpu_device,
                                                        size_t cuda_virtual_address_size) {
  return SetOption(options, [&](auto* o) {
    o->cuda_virtual_address_size[gpu_device] = cuda_virtual_address_size;
  });
}

API TRITONSERVER_ServerOptionsSetCacheConfig(TRITONSERVER_ServerOptions* options,
                                             const char* cache_name, const char* config_json) {
  CHECK_ARG(cache_name);
  CHECK_ARG(config_json);
  return SetOption(options, [&](auto* o) { o->cache_config[cache_name] = config_json; });
}

API TRITONSERVER_ServerOptionsSetCacheDirectory(TRITONSERVER_ServerOptions* options,
                                                const char* cache_dir) {
  CHECK_ARG(cache_dir);
  return SetOption(options, [&](auto* o) { o->cache_directory = cache_dir; });
}

API TRITONSERVER_ServerOptionsSetModelLoadRetryCount(TRITONSERVER_ServerOptions* options,
                                                     unsigned int retry_count) {
  return SetOption(options, [&](auto* o) { o->model_load_retry_count = retry_count; });
}

API TRITONSERVER_ServerOptionsSetModelNamespacing(TRITONSERVER_ServerOptions* options,
                                                  bool enable_namespace) {
  return SetOption(options, [&](auto* o) { o->model_namespacing = enable_namespace; });
}

API TRITONSERVER_ServerOptionsSetEnablePeerAccess(TRITONSERVER_ServerOptions* options,
                                                  bool enable_peer_access) {
  return SetOption(options, [&](auto* o) { o->enable_peer_access = enable_peer_access; });
}

API TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit(TRITONSERVER_ServerOptions* options,
                                                      const TRITONSERVER_InstanceGroupKind kind,
                                                      const int device_id,
                                                      const double fraction) {
  const int value = RawEnum(kind);
  if (value < TRITONSERVER_INSTANCEGROUPKIND_AUTO || value > TRITONSERVER_INSTANCEGROUPKIND_MODEL) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "unknown instance group kind " + std::to_string(value));
  }
  if (value != TRITONSERVER_INSTANCEGROUPKIND_GPU) {
    // As Triton: only GPU loads are limited.
    return Err(TRITONSERVER_ERROR_UNSUPPORTED,
               std::string("model load device limit is not supported for ") +
                   TRITONSERVER_InstanceGroupKindString(kind));
  }
  return SetOption(options, [&](auto* o) {
    o->model_load_device_limits.push_back({value, device_id, fraction});
  });
}

API TRITONSERVER_ServerOptionsSetMetricsConfig(TRITONSERVER_ServerOptions* options,
                                               const char* name, const char* setting,
                                               const char* value) {
  CHECK_ARG(name);
  CHECK_ARG(setting);
  CHECK_ARG(value);
  return SetOption(options,
                   [&](auto* o) { o->metrics_config[name].emplace_back(setting, value); });
}

API TRITONSERVER_ServerOptionsSetRateLimiterMode(TRITONSERVER_ServerOptions* options,
                                                 TRITONSERVER_RateLimitMode mode) {
  const int value = RawEnum(mode);
  if (value != TRITONSERVER_RATE_LIMIT_OFF && value != TRITONSERVER_RATE_LIMIT_EXEC_COUNT) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "unknown rate limit mode " + std::to_string(value));
  }
  return SetOption(options, [&](auto* o) { o->rate_limit_mode = value; });
}

API TRITONSERVER_ServerOptionsSetPinnedMemoryPoolByteSize(TRITONSERVER_ServerOptions* options,
                                                          uint64_t size) {
  return SetOption(options, [&](auto* o) { o->pinned_memory_pool_byte_size = size; });
}

API TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize(TRITONSERVER_ServerOptions* options,
                                                        int gpu_device, uint64_t size) {
  return SetOption(options, [&](auto* o) { o->cuda_memory_pool_byte_size[gpu_device] = size; });
}

API TRITONSERVER_ServerOptionsSetResponseCacheByteSize(TRITONSERVER_ServerOptions* options,
                                                       uint64_t size) {
  return SetOption(options, [&](auto* o) { o->response_cache_byte_size = size; });
}

API TRITONSERVER_ServerOptionsSetMinSupportedComputeCapability(
    TRITONSERVER_ServerOptions* options, double cc) {
  return SetOption(options, [&](auto* o) { o->min_supported_compute_capability = cc; });
}

API TRITONSERVER_ServerOptionsSetExitOnError(TRITONSERVER_ServerOptions* options, bool exit) {
  return SetOption(options, [&](auto* o) { o->exit_on_error = exit; });
}

API TRITONSERVER_ServerOptionsSetStrictReadiness(TRITONSERVER_ServerOptions* options,
                                                 bool strict) {
  return SetOption(options, [&](auto* o) { o->strict_readiness = strict; });
}

API TRITONSERVER_ServerOptionsSetExitTimeout(TRITONSERVER_ServerOptions* options,
                                             unsigned int timeout) {
  return SetOption(options, [&](auto* o) { o->exit_timeout_s = timeout; });
}

API TRITONSERVER_ServerOptionsSetBufferManagerThreadCount(TRITONSERVER_ServerOptions* options,
                                                          unsigned int thread_count) {
  return SetOption(options, [&](auto* o) { o->buffer_manager_thread_count = thread_count; });
}

API TRITONSERVER_ServerOptionsSetModelLoadThreadCount(TRITONSERVER_ServerOptions* options,
                                                      unsigned int thread_count) {
  return SetOption(options, [&](auto* o) { o->model_load_thread_count = thread_count; });
}

API TRITONSERVER_ServerOptionsSetLogFile(TRITONSERVER_ServerOptions* options, const char* file) {
  return SetOption(options, [&](auto* o) { o->log_file = file == nullptr ? "" : file; });
}

API TRITONSERVER_ServerOptionsSetLogInfo(TRITONSERVER_ServerOptions* options, bool log) {
  return SetOption(options, [&](auto* o) { o->log_info = log; });
}

API TRITONSERVER_ServerOptionsSetLogWarn(TRITONSERVER_ServerOptions* options, bool log) {
  return SetOption(options, [&](auto* o) { o->log_warn = log; });
}

API TRITONSERVER_ServerOptionsSetLogError(TRITONSERVER_ServerOptions* options, bool log) {
  return SetOption(options, [&](auto* o) { o->log_error = log; });
}

API TRITONSERVER_ServerOptionsSetLogFormat(TRITONSERVER_ServerOptions* options,
                                           const TRITONSERVER_LogFormat format) {
  const int value = RawEnum(format);
  if (value != TRITONSERVER_LOG_DEFAULT && value != TRITONSERVER_LOG_ISO8601) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG, "unknown log format " + std::to_string(value));
  }
  return SetOption(options, [&](auto* o) { o->log_format = value; });
}

API TRITONSERVER_ServerOptionsSetLogVerbose(TRITONSERVER_ServerOptions* options, int level) {
  return SetOption(options, [&](auto* o) { o->log_verbose = level; });
}

API TRITONSERVER_ServerOptionsSetMetrics(TRITONSERVER_ServerOptions* options, bool metrics) {
  return SetOption(options, [&](auto* o) { o->metrics = metrics; });
}

API TRITONSERVER_ServerOptionsSetGpuMetrics(TRITONSERVER_ServerOptions* options,
                                            bool gpu_metrics) {
  return SetOption(options, [&](auto* o) { o->gpu_metrics = gpu_metrics; });
}

API TRITONSERVER_ServerOptionsSetCpuMetrics(TRITONSERVER_ServerOptions* options,
                                            bool cpu_metrics) {
  return SetOption(options, [&](auto* o) { o->cpu_metrics = cpu_metrics; });
}

API TRITONSERVER_ServerOptionsSetMetricsInterval(TRITONSERVER_ServerOptions* options,
                                                 uint64_t metrics_interval_ms) {
  return SetOption(options, [&](auto* o) { o->metrics_interval_ms = metrics_interval_ms; });
}

API TRITONSERVER_ServerOptionsSetBackendDirectory(TRITONSERVER_ServerOptions* options,
                                                  const char* backend_dir) {
  CHECK_ARG(backend_dir);
  return SetOption(options, [&](auto* o) { o->backend_directory = backend_dir; });
}

API TRITONSERVER_ServerOptionsSetRepoAgentDirectory(TRITONSERVER_ServerOptions* options,
                                                    const char* repoagent_dir) {
  CHECK_ARG(repoagent_dir);
  return SetOption(options, [&](auto* o) { o->repoagent_directory = repoagent_dir; });
}

API TRITONSERVER_ServerOptionsSetBackendConfig(TRITONSERVER_ServerOptions* options,
                                               const char* backend_name, const char* setting,
                                               const char* value) {
  CHECK_ARG(backend_name);
  CHECK_ARG(setting);
  CHECK_ARG(value);
  return SetOption(options,
                   [&](auto* o) { o->backend_config[backend_name].emplace_back(setting, value); });
}

API TRITONSERVER_ServerOptionsSetHostPolicy(TRITONSERVER_ServerOptions* options,
                                            const char* policy_name, const char* setting,
                                            const char* value) {
  CHECK_ARG(policy_name);
  CHECK_ARG(setting);
  CHECK_ARG(value);
  return SetOption(options,
                   [&](auto* o) { o->host_policies[policy_name].emplace_back(setting, value); });
}

// ---- TRITONSERVER_Server --------------------------------------------------

API TRITONSERVER_ServerNew(TRITONSERVER_Server** server, TRITONSERVER_ServerOptions* options) {
  CHECK_ARG(server);
  CHECK_ARG(options);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.create(options, server);
  });
}

API TRITONSERVER_ServerDelete(TRITONSERVER_Server* server) {
  CHECK_ARG(server);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.stop(server, true);
  });
}

API TRITONSERVER_ServerStop(TRITONSERVER_Server* server) {
  CHECK_ARG(server);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.stop(server, false);
  });
}

API TRITONSERVER_ServerSetExitTimeout(TRITONSERVER_Server* server, unsigned int timeout) {
  CHECK_ARG(server);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.set_exit_timeout(server, timeout);
  });
}

API TRITONSERVER_ServerRegisterModelRepository(TRITONSERVER_Server* server,
                                               const char* repository_path,
                                               const TRITONSERVER_Parameter** name_mapping,
                                               const uint32_t mapping_count) {
  CHECK_ARG(server);
  CHECK_ARG(repository_path);
  if (name_mapping == nullptr && mapping_count != 0) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "name mapping is not provided while mapping count is non-zero");
  }
  std::vector<const pyserver::triton::Parameter*> mapping;
  for (uint32_t i = 0; i < mapping_count; ++i) mapping.push_back(&name_mapping[i]->parameter);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.repository(server, repository_path, true, mapping);
  });
}

API TRITONSERVER_ServerUnregisterModelRepository(TRITONSERVER_Server* server,
                                                 const char* repository_path) {
  CHECK_ARG(server);
  CHECK_ARG(repository_path);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.repository(server, repository_path, false, {});
  });
}

API TRITONSERVER_ServerPollModelRepository(TRITONSERVER_Server* server) {
  CHECK_ARG(server);
  return WithHooks([&](const ServerControlHooks& hooks) {
    return hooks.poll(server);
  });
}

API TRITONSERVER_ServerIsLive(TRITONSERVER_Server* server, bool* live) {
  CHECK_ARG(server);
  CHECK_ARG(live);
  bool ready = false;
  return WithHooks(
      [&](const ServerControlHooks& hooks) { return hooks.state(server, live, &ready); });
}

API TRITONSERVER_ServerIsReady(TRITONSERVER_Server* server, bool* ready) {
  CHECK_ARG(server);
  CHECK_ARG(ready);
  bool live = false;
  return WithHooks(
      [&](const ServerControlHooks& hooks) { return hooks.state(server, &live, ready); });
}

API TRITONSERVER_ServerMetadata(TRITONSERVER_Server* server,
                                TRITONSERVER_Message** server_metadata) {
  return Query(server, ServerQuery::kMetadata, "", -1, 0, server_metadata);
}

API TRITONSERVER_ServerModelMetadata(TRITONSERVER_Server* server, const char* model_name,
                                     const int64_t model_version,
                                     TRITONSERVER_Message** model_metadata) {
  CHECK_ARG(model_name);
  return Query(server, ServerQuery::kModelMetadata, model_name, model_version, 0,
               model_metadata);
}

API TRITONSERVER_ServerModelStatistics(TRITONSERVER_Server* server, const char* model_name,
                                       const int64_t model_version,
                                       TRITONSERVER_Message** model_stats) {
  CHECK_ARG(model_name);
  return Query(server, ServerQuery::kModelStatistics, model_name, model_version, 0, model_stats);
}

API TRITONSERVER_ServerModelConfig(TRITONSERVER_Server* server, const char* model_name,
                                   const int64_t model_version, const uint32_t config_version,
                                   TRITONSERVER_Message** model_config) {
  CHECK_ARG(model_name);
  if (config_version != 1) {
    // Triton's only version of the model config's JSON form.
    return Err(TRITONSERVER_ERROR_UNSUPPORTED,
               "model configuration version " + std::to_string(config_version) +
                   " not supported, supported versions are: 1");
  }
  return Query(server, ServerQuery::kModelConfig, model_name, model_version, 0, model_config);
}

API TRITONSERVER_ServerModelIndex(TRITONSERVER_Server* server, uint32_t flags,
                                  TRITONSERVER_Message** model_index) {
  return Query(server, ServerQuery::kModelIndex, "", -1, flags, model_index);
}

API TRITONSERVER_ServerLoadModel(TRITONSERVER_Server* server, const char* model_name) {
  return TRITONSERVER_ServerLoadModelWithParameters(server, model_name, nullptr, 0);
}

API TRITONSERVER_ServerModelBatchProperties(TRITONSERVER_Server* server, const char* model_name,
                                            const int64_t model_version, uint32_t* flags,
                                            void** voidp) {
  CHECK_ARG(server);
  CHECK_ARG(model_name);
  CHECK_ARG(flags);
  std::string answer;
  if (TRITONSERVER_Error* err =
          Ask(server, ServerQuery::kModelBatchProperties, model_name, model_version, 0, &answer)) {
    return err;
  }
  *flags = static_cast<uint32_t>(std::stoul(answer));
  if (voidp != nullptr) *voidp = nullptr;
  return nullptr;
}

API TRITONSERVER_ServerMetrics(TRITONSERVER_Server* server, TRITONSERVER_Metrics** metrics) {
  CHECK_ARG(server);
  CHECK_ARG(metrics);
  std::string text;
  if (TRITONSERVER_Error* err = Ask(server, ServerQuery::kMetrics, "", -1, 0, &text)) {
    return err;
  }
  *metrics = new TRITONSERVER_Metrics{std::move(text)};
  return nullptr;
}

API TRITONSERVER_MetricsFormatted(TRITONSERVER_Metrics* metrics, TRITONSERVER_MetricFormat format,
                                  const char** base, size_t* byte_size) {
  CHECK_ARG(metrics);
  CHECK_ARG(base);
  CHECK_ARG(byte_size);
  const int value = RawEnum(format);
  if (value != TRITONSERVER_METRIC_PROMETHEUS) {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "unknown metrics format '" + std::to_string(value) + "'");
  }
  *base = metrics->text.c_str();
  *byte_size = metrics->text.size();
  return nullptr;
}

API TRITONSERVER_MetricsDelete(TRITONSERVER_Metrics* metrics) {
  delete metrics;
  return nullptr;
}
