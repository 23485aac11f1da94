// PinnedMemoryPool: host buffers for batch gathering and GPU staging.
//
// With a CUDA runtime, blocks are page-locked (cudaHostAlloc), so copies to
// and from the GPU run at full bus speed and can be asynchronous; without one
// they are plain page-aligned memory. Either way freed blocks are cached per
// power-of-two size class and reused, so a steady workload stops allocating
// (and stops faulting in fresh pages). As in Triton's pinned memory manager,
// `capacity` bounds the pooled bytes (in use plus cached); a request beyond
// it is served with unpooled plain memory rather than failing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pyserver/status.h"

namespace pyserver {

class CudaRuntime;

struct MemoryBlock {
  void* data = nullptr;
  size_t size = 0;        // what was asked for
  size_t capacity = 0;    // what the block holds (its size class)
  bool pinned = false;    // page-locked by CUDA
  bool pooled = false;    // returns to the pool's cache on Release
};

struct PinnedMemoryPoolStats {
  size_t capacity = 0;
  size_t in_use_bytes = 0;     // pooled blocks handed out
  size_t cached_bytes = 0;     // pooled blocks waiting for reuse
  uint64_t reuses = 0;         // allocations served from the cache
  uint64_t allocations = 0;    // pooled blocks newly allocated
  uint64_t unpooled = 0;       // allocations past capacity, plain memory
  bool pinned = false;         // pooled blocks are page-locked
};

class PinnedMemoryPool {
 public:
  static constexpr size_t kMinBlock = 4096;

  // runtime: CUDA to pin with, or nullptr (or an unavailable one) for plain
  // memory. The runtime must outlive the pool.
  PinnedMemoryPool(size_t capacity, const CudaRuntime* runtime);
  ~PinnedMemoryPool();
  PinnedMemoryPool(const PinnedMemoryPool&) = delete;
  PinnedMemoryPool& operator=(const PinnedMemoryPool&) = delete;

  Status Allocate(size_t bytes, MemoryBlock* block);
  void Release(const MemoryBlock& block);
  // Frees every cached block (memory pressure, shutdown).
  void Trim();
  PinnedMemoryPoolStats stats() const;
  bool pinned() const { return runtime_ != nullptr; }

  // The size class a request of `bytes` is served from.
  static size_t ClassSize(size_t bytes);

 private:
  static int ClassIndex(size_t class_size);
  Status RawAllocate(size_t bytes, bool pin, void** ptr) const;
  void RawFree(void* ptr, bool pin) const;
  // Frees cached blocks until `needed` more pooled bytes fit; lock held.
  void EvictFor(size_t needed);

  const size_t capacity_;
  const CudaRuntime* runtime_;  // nullptr: plain memory
  mutable std::mutex mu_;
  std::vector<std::vector<void*>> free_;  // by size-class index
  size_t in_use_ = 0;
  size_t cached_ = 0;
  uint64_t reuses_ = 0;
  uint64_t allocations_ = 0;
  uint64_t unpooled_ = 0;
};

}  // namespace pyserver
