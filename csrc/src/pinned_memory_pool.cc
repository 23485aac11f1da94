#include "pyserver/pinned_memory_pool.h"

#include "pyserver/cuda_runtime.h"

namespace pyserver {

namespace {

std::unique_ptr<BlockAllocator> HostBlocks(const CudaRuntime* runtime) {
  if (runtime != nullptr && runtime->available()) {
    return std::make_unique<PinnedHostAllocator>(*runtime);
  }
  return std::make_unique<HostAllocator>();
}

}  // namespace

PinnedMemoryPool::PinnedMemoryPool(size_t capacity, const CudaRuntime* runtime)
    : MemoryPool(capacity, HostBlocks(runtime), std::make_unique<HostAllocator>()) {}

}  // namespace pyserver
