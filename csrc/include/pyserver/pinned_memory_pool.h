// PinnedMemoryPool: host buffers for batch gathering and GPU staging
// (--pinned-memory-pool-byte-size). With a CUDA runtime the pooled blocks are
// page-locked (cudaHostAlloc), so copies to and from the GPU run at full bus
// speed and can be asynchronous; without one they are plain page-aligned
// memory. Past capacity, plain memory.
#pragma once

#include "pyserver/memory_pool.h"

namespace pyserver {

class CudaRuntime;

class PinnedMemoryPool final : public MemoryPool {
 public:
  // runtime: CUDA to pin with, or nullptr (or an unavailable one) for plain
  // memory. The runtime must outlive the pool.
  PinnedMemoryPool(size_t capacity, const CudaRuntime* runtime);

  bool pinned() const { return pooled_allocator().kind() == MemoryKind::kPinnedHost; }
};

}  // namespace pyserver
