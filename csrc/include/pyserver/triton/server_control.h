// Triton's in-process server API for a program that embeds pyserver through
// libtritonserver.so: the objects behind TRITONSERVER_ServerOptions and the
// hooks TRITONSERVER_ServerNew and the server's queries reach
// (csrc/src/triton_server_control.cc).
//
// Plain C++ (no Python). The server itself is Python, so the engine
// (engine/triton_server.pyx) registers ServerControlHooks when it is
// imported; each hook takes the GIL itself. A program with no Python in it
// gets one started by the first TRITONSERVER_ServerNew
// (csrc/src/triton_python_boot.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pyserver/triton/objects.h"

namespace pyserver::triton {

// TRITONSERVER_ServerOptionsAddRateLimiterResource's arguments.
struct RateLimiterResource {
  std::string name;
  size_t count = 0;
  int device = -1;
};

// TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit's arguments.
struct ModelLoadDeviceLimit {
  int kind = 0;  // TRITONSERVER_InstanceGroupKind
  int device = 0;
  double fraction = 1.0;
};

}  // namespace pyserver::triton

// What TRITONSERVER_ServerOptionsSet* record, with the defaults of Triton's
// C API (which differ from its command line: strict model config, polling).
struct TRITONSERVER_ServerOptions {
  std::string server_id = "triton";
  std::vector<std::string> model_repositories;
  int model_control_mode = 1;  // TRITONSERVER_MODEL_CONTROL_POLL
  std::vector<std::string> startup_models;
  bool strict_model_config = true;
  std::string model_config_name;
  int rate_limit_mode = 0;  // TRITONSERVER_RATE_LIMIT_OFF
  std::vector<pyserver::triton::RateLimiterResource> rate_limiter_resources;
  uint64_t pinned_memory_pool_byte_size = 1ULL << 28;
  std::map<int, uint64_t> cuda_memory_pool_byte_size;
  std::map<int, size_t> cuda_virtual_address_size;
  uint64_t response_cache_byte_size = 0;
  std::map<std::string, std::string> cache_config;  // cache name -> its JSON
  std::string cache_directory = "/opt/tritonserver/caches";
  double min_supported_compute_capability = 6.0;
  bool exit_on_error = true;
  bool strict_readiness = true;
  unsigned int exit_timeout_s = 30;
  unsigned int buffer_manager_thread_count = 0;
  unsigned int model_load_thread_count = 4;
  unsigned int model_load_retry_count = 0;
  bool model_namespacing = false;
  bool enable_peer_access = true;
  std::vector<pyserver::triton::ModelLoadDeviceLimit> model_load_device_limits;
  std::string log_file;
  bool log_info = true;
  bool log_warn = true;
  bool log_error = true;
  int log_format = 0;  // TRITONSERVER_LOG_DEFAULT
  int log_verbose = 0;
  bool metrics = true;
  bool gpu_metrics = true;
  bool cpu_metrics = true;
  uint64_t metrics_interval_ms = 2000;
  std::string backend_directory = "/opt/tritonserver/backends";
  std::string repoagent_directory = "/opt/tritonserver/repoagents";
  // backend -> setting -> value, and policy -> setting -> value, in order set
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> backend_config;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> host_policies;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> metrics_config;
};

// TRITONSERVER_ServerMetrics's answer: the Prometheus text.
struct TRITONSERVER_Metrics {
  std::string text;
};

namespace pyserver::triton {

// What a server's query asks for; the answer is a JSON document, except
// where said.
enum class ServerQuery {
  kMetadata,         // TRITONSERVER_ServerMetadata
  kModelMetadata,    // TRITONSERVER_ServerModelMetadata
  kModelConfig,      // TRITONSERVER_ServerModelConfig
  kModelStatistics,  // TRITONSERVER_ServerModelStatistics
  kModelIndex,       // TRITONSERVER_ServerModelIndex (flags: TRITONSERVER_INDEX_FLAG_*)
  kModelBatchProperties,  // the TRITONSERVER_BATCH_* flag, in decimal
  kMetrics,               // TRITONSERVER_ServerMetrics: Prometheus' text format
};

// What the engine registers. Each may be called from any thread, takes the
// GIL itself, and returns a new error (the caller's) or nullptr. `server` is
// one that `create` made; the others refuse any other.
struct ServerControlHooks {
  // Starts a server and loads its models; returns when it is up.
  TRITONSERVER_Error* (*create)(const TRITONSERVER_ServerOptions* options,
                                TRITONSERVER_Server** server) = nullptr;
  // Stops it (requests in flight finish within the exit timeout) and, when
  // `forget`, lets go of it: the pointer is dangling afterwards.
  TRITONSERVER_Error* (*stop)(TRITONSERVER_Server* server, bool forget) = nullptr;
  TRITONSERVER_Error* (*state)(TRITONSERVER_Server* server, bool* live, bool* ready) = nullptr;
  TRITONSERVER_Error* (*query)(TRITONSERVER_Server* server, ServerQuery query,
                               const char* model_name, int64_t model_version, uint32_t flags,
                               std::string* json) = nullptr;
  TRITONSERVER_Error* (*poll)(TRITONSERVER_Server* server) = nullptr;
  TRITONSERVER_Error* (*set_exit_timeout)(TRITONSERVER_Server* server,
                                          unsigned int timeout_s) = nullptr;
  // Registers a repository (with its name mapping: parameters of string
  // values) or, `add` false, unregisters it.
  TRITONSERVER_Error* (*repository)(TRITONSERVER_Server* server, const char* path, bool add,
                                    const std::vector<const Parameter*>& name_mapping) = nullptr;
};
void SetServerControlHooks(const ServerControlHooks& hooks);

// The hooks, starting Python in this process first where no engine has
// registered them yet (triton_python_boot.cc); an UNAVAILABLE error says why
// that failed.
TRITONSERVER_Error* ServerControl(ServerControlHooks* hooks);

// Starts a Python interpreter in this process (or uses the one running) and
// imports the module that registers the hooks.
TRITONSERVER_Error* BootPython();

}  // namespace pyserver::triton
