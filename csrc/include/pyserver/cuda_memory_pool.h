// CudaMemoryPool: device memory on one GPU for the buffers the server itself
// keeps there (a TensorRT instance's I/O bindings), bounded per GPU by
// --cuda-memory-pool-byte-size as in Triton (64 MiB by default). Blocks are
// reused by size class, so a steady workload stops calling cudaMalloc, which
// may synchronize the device; past capacity, plain cudaMalloc.
#pragma once

#include <memory>

#include "pyserver/memory_pool.h"

namespace pyserver {

class CudaRuntime;

class CudaMemoryPool final : public MemoryPool {
 public:
  // Fails (UNAVAILABLE) without a CUDA runtime, INVALID_ARG for a device
  // that does not exist. The runtime must outlive the pool.
  static Status Create(const CudaRuntime& runtime, int device, size_t capacity,
                       std::unique_ptr<CudaMemoryPool>* pool);

  int device() const { return pooled_allocator().device(); }

 private:
  CudaMemoryPool(const CudaRuntime& runtime, int device, size_t capacity);
};

}  // namespace pyserver
