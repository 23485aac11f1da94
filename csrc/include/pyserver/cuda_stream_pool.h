// CudaStreamPool: a fixed set of non-blocking CUDA streams on one device,
// handed out round-robin, so model instances sharing a GPU overlap their
// copies and kernels instead of serialising on the default stream.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "pyserver/status.h"

namespace pyserver {

class CudaRuntime;

class CudaStreamPool {
 public:
  // Creates `count` streams on `device`; fails (UNAVAILABLE) without CUDA.
  static Status Create(const CudaRuntime& runtime, int device, int count,
                       std::unique_ptr<CudaStreamPool>* pool);
  ~CudaStreamPool();
  CudaStreamPool(const CudaStreamPool&) = delete;
  CudaStreamPool& operator=(const CudaStreamPool&) = delete;

  // The next stream (a cudaStream_t), round-robin; safe from any thread.
  void* Next();
  int device() const { return device_; }
  size_t size() const { return streams_.size(); }
  Status Synchronize() const;

 private:
  CudaStreamPool(const CudaRuntime& runtime, int device) : runtime_(runtime), device_(device) {}

  const CudaRuntime& runtime_;
  const int device_;
  std::vector<void*> streams_;
  std::atomic<size_t> next_{0};
};

}  // namespace pyserver
