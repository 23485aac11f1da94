// The backend memory manager (TRITONBACKEND_MemoryManagerAllocate / Free):
// CPU memory from malloc; page-locked host memory (CPU_PINNED) and device
// memory (GPU, on the id given) when a CUDA runtime is usable, else
// Triton's UNSUPPORTED errors, as a Triton built without GPU support
// answers. As in Triton, CUDA memory comes from the server's pools when it
// gave them (--pinned-memory-pool-byte-size, --cuda-memory-pool-byte-size):
// a pinned request the pool cannot serve page-locked fails, so the backend
// falls back to CPU memory as Triton's backends do; a GPU without a pool
// gets cudaMalloc. What it handed out of CUDA is tracked, so a free names
// the memory type and device it was allocated with, or is refused.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "pyserver/memory_pool.h"
#include "pyserver/status.h"
#include "triton/core/tritonbackend.h"

namespace pyserver {
class CudaRuntime;
}

struct TRITONBACKEND_MemoryManager {
 public:
  // runtime: where CUDA memory comes from, null for the process-wide one
  // (opened on first use); it must outlive the manager.
  explicit TRITONBACKEND_MemoryManager(const pyserver::CudaRuntime* runtime = nullptr)
      : runtime_(runtime) {}
  TRITONSERVER_Error* Allocate(void** buffer, TRITONSERVER_MemoryType type, int64_t device,
                               uint64_t byte_size);
  TRITONSERVER_Error* Free(void* buffer, TRITONSERVER_MemoryType type, int64_t device);
  // Blocks of CUDA memory handed out and not yet freed.
  size_t outstanding() const;

  // The server's pools (null: none). A pool given here stays alive while
  // a block of it is out; it must allocate through this manager's runtime.
  void UsePinnedPool(std::shared_ptr<pyserver::MemoryPool> pool);
  void UseDevicePool(int64_t device, std::shared_ptr<pyserver::MemoryPool> pool);

 private:
  struct Block {
    TRITONSERVER_MemoryType type;
    int64_t device;
    std::shared_ptr<pyserver::MemoryPool> pool;  // null: straight from CUDA
    pyserver::MemoryBlock block;                 // the pool's, when pooled
  };
  const pyserver::CudaRuntime& Runtime() const;
  // A block from `pool`, or an error; a pinned request must get page-locked memory.
  TRITONSERVER_Error* FromPool(const std::shared_ptr<pyserver::MemoryPool>& pool,
                               TRITONSERVER_MemoryType type, size_t bytes, Block* out);

  const pyserver::CudaRuntime* runtime_;
  mutable std::mutex mu_;
  std::shared_ptr<pyserver::MemoryPool> pinned_pool_;
  std::map<int64_t, std::shared_ptr<pyserver::MemoryPool>> device_pools_;
  std::map<void*, Block> cuda_blocks_;  // handed out, by address
};

namespace pyserver::triton {
// The manager TRITONBACKEND_BackendMemoryManager gives every backend.
TRITONBACKEND_MemoryManager& ServerMemoryManager();
}  // namespace pyserver::triton
