// MemoryPool: blocks of one kind of memory (see block_allocator.h), cached
// per power-of-two size class and reused, so a steady workload stops
// allocating (and stops faulting in fresh pages or synchronizing the GPU in
// cudaMalloc). `capacity` bounds the pooled bytes (in use plus cached), as
// Triton bounds its pinned and CUDA memory pools; a request beyond it is
// served unpooled by the overflow allocator rather than failing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pyserver/block_allocator.h"
#include "pyserver/status.h"

namespace pyserver {

struct MemoryBlock {
  void* data = nullptr;
  size_t size = 0;        // what was asked for
  size_t capacity = 0;    // what the block holds (its size class)
  bool pinned = false;    // host memory page-locked by CUDA
  bool pooled = false;    // returns to the pool's cache on Release
  int device = -1;        // the GPU holding it; -1: host memory
};

struct MemoryPoolStats {
  size_t capacity = 0;
  size_t in_use_bytes = 0;     // pooled blocks handed out
  size_t cached_bytes = 0;     // pooled blocks waiting for reuse
  uint64_t reuses = 0;         // allocations served from the cache
  uint64_t allocations = 0;    // pooled blocks newly allocated
  uint64_t unpooled = 0;       // allocations past capacity, from the overflow allocator
  bool pinned = false;         // pooled blocks are page-locked host memory
  int device = -1;             // pooled blocks are on this GPU; -1: host
};

class MemoryPool {
 public:
  static constexpr size_t kMinBlock = 4096;

  MemoryPool(size_t capacity, std::unique_ptr<BlockAllocator> pooled,
             std::unique_ptr<BlockAllocator> overflow);
  virtual ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  Status Allocate(size_t bytes, MemoryBlock* block);
  void Release(const MemoryBlock& block);
  // Frees every cached block (memory pressure, shutdown).
  void Trim();
  MemoryPoolStats stats() const;

  // The size class a request of `bytes` is served from.
  static size_t ClassSize(size_t bytes);

 protected:
  const BlockAllocator& pooled_allocator() const { return *pooled_; }

 private:
  static int ClassIndex(size_t class_size);
  void Describe(const BlockAllocator& allocator, MemoryBlock* block) const;
  // Frees cached blocks until `needed` more pooled bytes fit; lock held.
  void EvictFor(size_t needed);

  const size_t capacity_;
  const std::unique_ptr<BlockAllocator> pooled_;
  const std::unique_ptr<BlockAllocator> overflow_;
  mutable std::mutex mu_;
  std::vector<std::vector<void*>> free_;  // by size-class index
  size_t in_use_ = 0;
  size_t cached_ = 0;
  uint64_t reuses_ = 0;
  uint64_t allocations_ = 0;
  uint64_t unpooled_ = 0;
};

}  // namespace pyserver
