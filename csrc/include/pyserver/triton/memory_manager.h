// The backend memory manager (TRITONBACKEND_MemoryManagerAllocate / Free):
// CPU memory from malloc; page-locked host memory (CPU_PINNED) and device
// memory (GPU, on the id given) from the CUDA runtime when one is usable,
// else Triton's UNSUPPORTED errors, as a Triton built without GPU support
// answers. What it handed out of CUDA is tracked, so a free names the
// memory type and device it was allocated with, or is refused.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

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

 private:
  const pyserver::CudaRuntime& Runtime() const;

  const pyserver::CudaRuntime* runtime_;
  mutable std::mutex mu_;
  // CUDA blocks handed out: pointer -> (memory type, device)
  std::map<void*, std::pair<TRITONSERVER_MemoryType, int64_t>> cuda_blocks_;
};
