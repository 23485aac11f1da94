// Triton's in-process server API as csrc/src/triton_server_control.cc
// implements it: the options a program sets, and each server call handed to
// the hooks the engine registers (here the test's own, which record them).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "pyserver/triton/inference.h"  // TRITONSERVER_Server
#include "pyserver/triton/server_control.h"

namespace pyserver::triton {
namespace {

std::string MessageText(TRITONSERVER_Message* message) {
  const char* base = nullptr;
  size_t size = 0;
  EXPECT_EQ(TRITONSERVER_MessageSerializeToJson(message, &base, &size), nullptr);
  std::string text(base, size);
  TRITONSERVER_MessageDelete(message);
  return text;
}

std::string TakeMessage(TRITONSERVER_Error* err) {
  if (err == nullptr) return "";
  std::string text = std::string(TRITONSERVER_ErrorCodeString(err)) + ": " +
                     TRITONSERVER_ErrorMessage(err);
  TRITONSERVER_ErrorDelete(err);
  return text;
}

TEST(TritonServerControl, OptionsStartAtTheCApisDefaultsAndRecordEachSetting) {
  TRITONSERVER_ServerOptions* options = nullptr;
  ASSERT_EQ(TRITONSERVER_ServerOptionsNew(&options), nullptr);
  EXPECT_EQ(options->server_id, "triton");
  EXPECT_EQ(options->model_control_mode, TRITONSERVER_MODEL_CONTROL_POLL);
  EXPECT_TRUE(options->strict_model_config);
  EXPECT_TRUE(options->exit_on_error);
  EXPECT_EQ(options->exit_timeout_s, 30u);
  EXPECT_EQ(options->pinned_memory_pool_byte_size, 1ULL << 28);
  EXPECT_EQ(options->backend_directory, "/opt/tritonserver/backends");

  EXPECT_EQ(TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, "/a"), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, "/b"), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetModelControlMode(options,
                                                         TRITONSERVER_MODEL_CONTROL_EXPLICIT),
            nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetStartupModel(options, "m"), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetBackendConfig(options, "python", "shm", "1"), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetBackendConfig(options, "python", "x", "2"), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetCudaMemoryPoolByteSize(options, 1, 64), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetLogFormat(options, TRITONSERVER_LOG_ISO8601), nullptr);
  EXPECT_EQ(options->model_repositories, (std::vector<std::string>{"/a", "/b"}));
  EXPECT_EQ(options->model_control_mode, TRITONSERVER_MODEL_CONTROL_EXPLICIT);
  EXPECT_EQ(options->startup_models, std::vector<std::string>{"m"});
  ASSERT_EQ(options->backend_config["python"].size(), 2u);
  EXPECT_EQ(options->backend_config["python"][1].second, "2");
  EXPECT_EQ(options->cuda_memory_pool_byte_size[1], 64u);
  EXPECT_EQ(options->log_format, TRITONSERVER_LOG_ISO8601);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetCacheConfig(options, "local", "{\"size\":8}"), nullptr);
  EXPECT_EQ(options->cache_config["local"], "{\"size\":8}");
  EXPECT_EQ(TRITONSERVER_ServerOptionsAddRateLimiterResource(options, "R", 3, 0), nullptr);
  ASSERT_EQ(options->rate_limiter_resources.size(), 1u);
  EXPECT_EQ(options->rate_limiter_resources[0].count, 3u);
  EXPECT_EQ(TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit(
                options, TRITONSERVER_INSTANCEGROUPKIND_GPU, 0, 0.5),
            nullptr);
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerOptionsSetModelLoadDeviceLimit(
                options, TRITONSERVER_INSTANCEGROUPKIND_CPU, 0, 0.5)),
            "Unsupported: model load device limit is not supported for CPU");
  EXPECT_EQ(options->model_load_device_limits.size(), 1u);

  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerOptionsSetModelControlMode(
                options, static_cast<TRITONSERVER_ModelControlMode>(7))),
            "Invalid argument: unknown model control mode 7");
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerOptionsSetServerId(nullptr, "x")),
            "Invalid argument: options is null");
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerOptionsSetBackendConfig(options, "b", nullptr, "v")),
            "Invalid argument: setting is null");
  EXPECT_EQ(TRITONSERVER_ServerOptionsDelete(options), nullptr);
}

// The engine's part, played by the test: one server, its calls recorded.
TRITONSERVER_Server g_server;
std::string g_calls;

TRITONSERVER_Error* FakeCreate(const TRITONSERVER_ServerOptions* options,
                               TRITONSERVER_Server** server) {
  if (options->model_repositories.empty()) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INVALID_ARG, "no repository");
  }
  g_calls += "create " + options->model_repositories[0] + ";";
  *server = &g_server;
  return nullptr;
}

TRITONSERVER_Error* FakeStop(TRITONSERVER_Server* server, bool forget) {
  EXPECT_EQ(server, &g_server);
  g_calls += forget ? "delete;" : "stop;";
  return nullptr;
}

TRITONSERVER_Error* FakeState(TRITONSERVER_Server*, bool* live, bool* ready) {
  *live = true;
  *ready = false;
  return nullptr;
}

TRITONSERVER_Error* FakeQuery(TRITONSERVER_Server*, ServerQuery query, const char* model_name,
                              int64_t model_version, uint32_t flags, std::string* json) {
  if (query == ServerQuery::kModelBatchProperties) {
    *json = "2";
    return nullptr;
  }
  if (query == ServerQuery::kMetrics) {
    *json = "nv_inference_count 1\n";
    return nullptr;
  }
  *json = "{\"query\":" + std::to_string(static_cast<int>(query)) + ",\"model\":\"" +
          model_name + "\",\"version\":" + std::to_string(model_version) +
          ",\"flags\":" + std::to_string(flags) + "}";
  return nullptr;
}

TRITONSERVER_Error* FakePoll(TRITONSERVER_Server*) {
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "polling is disabled");
}

TEST(TritonServerControl, WithoutAnEngineServerNewSaysWhyPythonCouldNotStart) {
  // This test binary has no Python and was built with no default runtime:
  // the boot names the variable that would give it one.
  unsetenv("PYSERVER_LIBPYTHON");
  TRITONSERVER_ServerOptions* options = nullptr;
  ASSERT_EQ(TRITONSERVER_ServerOptionsNew(&options), nullptr);
  TRITONSERVER_Server* server = nullptr;
  const std::string text = TakeMessage(TRITONSERVER_ServerNew(&server, options));
  EXPECT_EQ(text.rfind("Unavailable: ", 0), 0u) << text;
  EXPECT_NE(text.find("PYSERVER_LIBPYTHON"), std::string::npos) << text;
  EXPECT_EQ(server, nullptr);
  TRITONSERVER_ServerOptionsDelete(options);
}

TEST(TritonServerControl, EachServerCallReachesTheRegisteredHooks) {
  ServerControlHooks hooks;
  hooks.create = FakeCreate;
  hooks.stop = FakeStop;
  hooks.state = FakeState;
  hooks.query = FakeQuery;
  hooks.poll = FakePoll;
  SetServerControlHooks(hooks);

  TRITONSERVER_ServerOptions* options = nullptr;
  ASSERT_EQ(TRITONSERVER_ServerOptionsNew(&options), nullptr);
  TRITONSERVER_Server* server = nullptr;
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerNew(&server, options)),
            "Invalid argument: no repository");
  TRITONSERVER_ServerOptionsSetModelRepositoryPath(options, "/models");
  ASSERT_EQ(TRITONSERVER_ServerNew(&server, options), nullptr);
  EXPECT_EQ(server, &g_server);
  TRITONSERVER_ServerOptionsDelete(options);

  bool live = false, ready = true;
  EXPECT_EQ(TRITONSERVER_ServerIsLive(server, &live), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerIsReady(server, &ready), nullptr);
  EXPECT_TRUE(live);
  EXPECT_FALSE(ready);

  TRITONSERVER_Message* message = nullptr;
  ASSERT_EQ(TRITONSERVER_ServerModelMetadata(server, "m", 3, &message), nullptr);
  EXPECT_EQ(MessageText(message), "{\"query\":1,\"model\":\"m\",\"version\":3,\"flags\":0}");
  ASSERT_EQ(TRITONSERVER_ServerModelIndex(server, TRITONSERVER_INDEX_FLAG_READY, &message),
            nullptr);
  EXPECT_EQ(MessageText(message), "{\"query\":4,\"model\":\"\",\"version\":-1,\"flags\":1}");
  ASSERT_EQ(TRITONSERVER_ServerModelConfig(server, "m", -1, 1, &message), nullptr);
  EXPECT_EQ(MessageText(message), "{\"query\":2,\"model\":\"m\",\"version\":-1,\"flags\":0}");
  // Only version 1 of the config's JSON exists: refused before any hook.
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerModelConfig(server, "m", -1, 2, &message)),
            "Unsupported: model configuration version 2 not supported, supported versions "
            "are: 1");
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerModelMetadata(server, nullptr, 1, &message)),
            "Invalid argument: model_name is null");
  EXPECT_EQ(TakeMessage(TRITONSERVER_ServerPollModelRepository(server)),
            "Unavailable: polling is disabled");
  uint32_t batch_flags = 0;
  void* voidp = &batch_flags;
  EXPECT_EQ(TRITONSERVER_ServerModelBatchProperties(server, "m", -1, &batch_flags, &voidp),
            nullptr);
  EXPECT_EQ(batch_flags, static_cast<uint32_t>(TRITONSERVER_BATCH_FIRST_DIM));
  EXPECT_EQ(voidp, nullptr);
  TRITONSERVER_Metrics* metrics = nullptr;
  ASSERT_EQ(TRITONSERVER_ServerMetrics(server, &metrics), nullptr);
  const char* text = nullptr;
  size_t size = 0;
  EXPECT_EQ(TRITONSERVER_MetricsFormatted(metrics, TRITONSERVER_METRIC_PROMETHEUS, &text, &size),
            nullptr);
  EXPECT_EQ(std::string(text, size), "nv_inference_count 1\n");
  EXPECT_EQ(TakeMessage(TRITONSERVER_MetricsFormatted(
                metrics, static_cast<TRITONSERVER_MetricFormat>(3), &text, &size)),
            "Invalid argument: unknown metrics format '3'");
  TRITONSERVER_MetricsDelete(metrics);

  EXPECT_EQ(TRITONSERVER_ServerStop(server), nullptr);
  EXPECT_EQ(TRITONSERVER_ServerDelete(server), nullptr);
  EXPECT_EQ(g_calls, "create /models;stop;delete;");
}

}  // namespace
}  // namespace pyserver::triton
