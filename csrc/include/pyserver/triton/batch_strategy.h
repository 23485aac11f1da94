// A custom batching library built for Triton (batchstrategy.so, or the file
// a model's TRITON_BATCH_STRATEGY_PATH names) as a BatchStrategy: its
// TRITONBACKEND_ModelBatcherInitialize runs once at load with the model it
// batches for, TRITONBACKEND_ModelBatchInitialize / IncludeRequest /
// Finalize while the dynamic batcher forms each batch, and
// TRITONBACKEND_ModelBatcherFinalize when the strategy is freed. A queued
// request's view is a TRITONBACKEND_Request (engine/triton_c.pyx makes it).
// An error the library returns while a batch forms is logged, as Triton
// logs it, and the batch goes on with what the library answered.
#pragma once

#include <memory>
#include <string>

#include "pyserver/batch_strategy.h"
#include "pyserver/status.h"
#include "pyserver/triton/objects.h"

namespace pyserver::triton {

class LibraryBatchStrategy : public BatchStrategy {
 public:
  // Opens `path` (which must export all five entry points) and initializes
  // its batcher for the model named here (what TRITONBACKEND_ModelConfig
  // and its kin tell the library).
  static Status Create(const std::string& path, const std::string& model_name,
                       uint64_t model_version, const std::string& repository,
                       const std::string& config_json, std::shared_ptr<LibraryBatchStrategy>* out);
  ~LibraryBatchStrategy() override;  // TRITONBACKEND_ModelBatcherFinalize, dlclose

  void BeginBatch() override;
  bool Include(const QueuedRequest& request) override;
  void EndBatch() override;

 private:
  using BatcherInitFn = TRITONSERVER_Error* (*)(TRITONBACKEND_Batcher**, TRITONBACKEND_Model*);
  using BatcherFiniFn = TRITONSERVER_Error* (*)(TRITONBACKEND_Batcher*);
  using BatchInitFn = TRITONSERVER_Error* (*)(const TRITONBACKEND_Batcher*, void**);
  using BatchIncludeFn = TRITONSERVER_Error* (*)(TRITONBACKEND_Request*, void*, bool*);
  using BatchFiniFn = TRITONSERVER_Error* (*)(void*);

  LibraryBatchStrategy() = default;
  void LogFailure(const char* what, TRITONSERVER_Error* error) const;

  void* handle_ = nullptr;
  BatcherInitFn batcher_init_ = nullptr;
  BatcherFiniFn batcher_fini_ = nullptr;
  BatchInitFn batch_init_ = nullptr;
  BatchIncludeFn batch_include_ = nullptr;
  BatchFiniFn batch_fini_ = nullptr;
  bool initialized_ = false;
  TRITONBACKEND_Model model_;
  TRITONBACKEND_Batcher* batcher_ = nullptr;
  void* batch_ = nullptr;  // the record of the batch being formed (its userp)
};

}  // namespace pyserver::triton
