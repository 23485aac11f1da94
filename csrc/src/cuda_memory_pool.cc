#include "pyserver/cuda_memory_pool.h"

#include <string>

#include "pyserver/cuda_runtime.h"

namespace pyserver {

Status CudaMemoryPool::Create(const CudaRuntime& runtime, int device, size_t capacity,
                              std::unique_ptr<CudaMemoryPool>* pool) {
  if (!runtime.available()) return Status(StatusCode::kUnavailable, runtime.reason());
  if (device < 0 || device >= runtime.device_count()) {
    return Status(StatusCode::kInvalidArg,
                  "CUDA device " + std::to_string(device) + " does not exist (" +
                      std::to_string(runtime.device_count()) + " visible)");
  }
  pool->reset(new CudaMemoryPool(runtime, device, capacity));
  return Status::Ok();
}

CudaMemoryPool::CudaMemoryPool(const CudaRuntime& runtime, int device, size_t capacity)
    : MemoryPool(capacity, std::make_unique<DeviceAllocator>(runtime, device),
                 std::make_unique<DeviceAllocator>(runtime, device)) {}

}  // namespace pyserver
