// Shared helpers for the csrc tests.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "pyserver/completion_queue.h"
#include "pyserver/model_stats.h"
#include "pyserver/scheduler.h"

namespace pyserver {
namespace testing {

struct Harness {
  std::shared_ptr<ModelStats> stats = std::make_shared<ModelStats>();
  std::shared_ptr<CompletionQueue> completions;
  Harness() {
    std::unique_ptr<CompletionQueue> q;
    EXPECT_TRUE(CompletionQueue::Create(&q).ok());
    completions = std::move(q);
  }
  std::vector<Completion> Drain() {
    std::vector<Completion> out;
    completions->Drain(&out);
    return out;
  }
};

inline RequestInfo Req(Token token, uint32_t batch_size = 1, uint32_t priority = 0,
                       uint64_t timeout_us = 0, uint64_t shape_key = 0) {
  RequestInfo info;
  info.token = token;
  info.batch_size = batch_size;
  info.priority = priority;
  info.timeout_us = timeout_us;
  info.shape_key = shape_key;
  return info;
}

inline std::vector<Token> Tokens(const Batch& batch) {
  std::vector<Token> out;
  for (const auto& r : batch.requests) out.push_back(r.token);
  return out;
}

inline void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// What `symbol`, a counter a test library exports (long or int name()),
// says now; `missing` when the library is not loaded or lacks it.
template <typename T>
T LibraryCounter(const char* library, const char* symbol, T missing) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return missing;
  auto fn = reinterpret_cast<T (*)()>(dlsym(handle, symbol));
  T value = fn != nullptr ? fn() : missing;
  dlclose(handle);
  return value;
}

}  // namespace testing
}  // namespace pyserver
