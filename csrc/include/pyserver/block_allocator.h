// BlockAllocator: where a MemoryPool gets its raw blocks, one implementation
// per kind of memory: plain page-aligned host memory, page-locked host memory
// (cudaHostAlloc) and device memory on one GPU (cudaMalloc).
#pragma once

#include <cstddef>

#include "pyserver/status.h"

namespace pyserver {

class CudaRuntime;

enum class MemoryKind { kHost, kPinnedHost, kDevice };

class BlockAllocator {
 public:
  virtual ~BlockAllocator() = default;
  virtual Status Allocate(size_t bytes, void** ptr) = 0;
  virtual void Free(void* ptr) = 0;
  virtual MemoryKind kind() const = 0;
  // The GPU the blocks live on; -1 for host memory.
  virtual int device() const { return -1; }
};

class HostAllocator final : public BlockAllocator {
 public:
  // Page alignment: what cudaHostRegister would need, and what DMA likes.
  static constexpr size_t kAlignment = 4096;
  Status Allocate(size_t bytes, void** ptr) override;
  void Free(void* ptr) override;
  MemoryKind kind() const override { return MemoryKind::kHost; }
};

// The runtime must be available and outlive the allocator.
class PinnedHostAllocator final : public BlockAllocator {
 public:
  explicit PinnedHostAllocator(const CudaRuntime& runtime) : runtime_(runtime) {}
  Status Allocate(size_t bytes, void** ptr) override;
  void Free(void* ptr) override;
  MemoryKind kind() const override { return MemoryKind::kPinnedHost; }

 private:
  const CudaRuntime& runtime_;
};

// cudaMalloc on `device`, from whichever thread asks: the calling thread's
// current device is switched for the call and restored after it, so a pool
// shared by instances never changes the device a caller works on.
class DeviceAllocator final : public BlockAllocator {
 public:
  DeviceAllocator(const CudaRuntime& runtime, int device) : runtime_(runtime), device_(device) {}
  Status Allocate(size_t bytes, void** ptr) override;
  void Free(void* ptr) override;
  MemoryKind kind() const override { return MemoryKind::kDevice; }
  int device() const override { return device_; }

 private:
  const CudaRuntime& runtime_;
  const int device_;
};

}  // namespace pyserver
