#include "pyserver/triton/memory_manager.h"

#include <cstdlib>
#include <string>

#include "pyserver/cuda_runtime.h"
#include "triton_api_internal.h"

using pyserver::triton::Err;
using pyserver::triton::ToError;

namespace {

// Runs fn on `device`, then puts the thread's current device back.
template <typename Fn>
pyserver::Status OnDevice(const pyserver::CudaRuntime& cuda, int64_t device, Fn&& fn) {
  pyserver::CudaDeviceScope scope(cuda, static_cast<int>(device));
  PYSERVER_RETURN_IF_ERROR(scope.status());
  return fn();
}

}  // namespace

const pyserver::CudaRuntime& TRITONBACKEND_MemoryManager::Runtime() const {
  return runtime_ != nullptr ? *runtime_ : pyserver::CudaRuntime::Get();
}

void TRITONBACKEND_MemoryManager::UsePinnedPool(std::shared_ptr<pyserver::MemoryPool> pool) {
  std::lock_guard<std::mutex> lock(mu_);
  pinned_pool_ = std::move(pool);
}

void TRITONBACKEND_MemoryManager::UseDevicePool(int64_t device,
                                                std::shared_ptr<pyserver::MemoryPool> pool) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool == nullptr) {
    device_pools_.erase(device);
  } else {
    device_pools_[device] = std::move(pool);
  }
}

TRITONSERVER_Error* TRITONBACKEND_MemoryManager::FromPool(
    const std::shared_ptr<pyserver::MemoryPool>& pool, TRITONSERVER_MemoryType type, size_t bytes,
    Block* out) {
  if (TRITONSERVER_Error* err = ToError(pool->Allocate(bytes, &out->block))) return err;
  if (type == TRITONSERVER_MEMORY_CPU_PINNED && !out->block.pinned) {
    // past the pool's capacity its overflow is plain memory: not what was asked
    pool->Release(out->block);
    return Err(TRITONSERVER_ERROR_UNAVAILABLE,
               "failed to allocate pinned system memory: the pinned memory pool is exhausted");
  }
  out->pool = pool;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_MemoryManager::Allocate(void** buffer,
                                                          TRITONSERVER_MemoryType type,
                                                          int64_t device, uint64_t byte_size) {
  const size_t bytes = byte_size == 0 ? 1 : byte_size;
  if (type == TRITONSERVER_MEMORY_CPU) {
    *buffer = std::malloc(bytes);
    if (*buffer == nullptr) {
      return Err(TRITONSERVER_ERROR_UNAVAILABLE, "CPU memory allocation failed");
    }
    return nullptr;
  }
  const pyserver::CudaRuntime& cuda = Runtime();
  Block block{type, type == TRITONSERVER_MEMORY_GPU ? device : 0, nullptr, {}};
  std::shared_ptr<pyserver::MemoryPool> pool;
  if (type == TRITONSERVER_MEMORY_CPU_PINNED) {
    if (!cuda.available()) {
      return Err(TRITONSERVER_ERROR_UNSUPPORTED, "Pinned memory allocation not supported");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pool = pinned_pool_;
    }
    if (pool != nullptr) {
      if (TRITONSERVER_Error* err = FromPool(pool, type, bytes, &block)) return err;
      *buffer = block.block.data;
    } else if (TRITONSERVER_Error* err = ToError(cuda.HostAlloc(buffer, bytes))) {
      return err;
    }
  } else if (type == TRITONSERVER_MEMORY_GPU) {
    if (!cuda.available()) {
      return Err(TRITONSERVER_ERROR_UNSUPPORTED, "GPU memory allocation not supported");
    }
    if (device < 0 || device >= cuda.device_count()) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                 "unable to allocate GPU memory on device " + std::to_string(device) + ": " +
                     std::to_string(cuda.device_count()) + " GPU(s) visible");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = device_pools_.find(device);
      if (it != device_pools_.end()) pool = it->second;
    }
    if (pool != nullptr) {
      if (TRITONSERVER_Error* err = FromPool(pool, type, bytes, &block)) return err;
      *buffer = block.block.data;
    } else {
      pyserver::Status status =
          OnDevice(cuda, device, [&] { return cuda.Malloc(buffer, bytes); });
      if (TRITONSERVER_Error* err = ToError(status)) return err;
    }
  } else {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "unknown memory type " + std::to_string(static_cast<int>(type)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  cuda_blocks_[*buffer] = std::move(block);
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_MemoryManager::Free(void* buffer, TRITONSERVER_MemoryType type,
                                                      int64_t device) {
  if (type == TRITONSERVER_MEMORY_CPU) {
    std::free(buffer);
    return nullptr;
  }
  if (buffer == nullptr) return nullptr;
  Block block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cuda_blocks_.find(buffer);
    const int64_t expected_device = type == TRITONSERVER_MEMORY_GPU ? device : 0;
    if (it == cuda_blocks_.end() || it->second.type != type ||
        it->second.device != expected_device) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                 std::string("memory to free was not allocated by the memory manager as ") +
                     TRITONSERVER_MemoryTypeString(type) + " memory on device " +
                     std::to_string(device));
    }
    block = std::move(it->second);
    cuda_blocks_.erase(it);
  }
  if (block.pool != nullptr) {
    block.pool->Release(block.block);
    return nullptr;
  }
  const pyserver::CudaRuntime& cuda = Runtime();
  if (type == TRITONSERVER_MEMORY_CPU_PINNED) return ToError(cuda.FreeHost(buffer));
  return ToError(OnDevice(cuda, device, [&] { return cuda.Free(buffer); }));
}

size_t TRITONBACKEND_MemoryManager::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cuda_blocks_.size();
}

namespace pyserver::triton {

TRITONBACKEND_MemoryManager& ServerMemoryManager() {
  // One per process, as Triton's; never destroyed, so no pool it holds is
  // freed during exit, after CUDA may have gone.
  static auto* manager = new TRITONBACKEND_MemoryManager();
  return *manager;
}

}  // namespace pyserver::triton

API TRITONBACKEND_BackendMemoryManager(TRITONBACKEND_Backend* backend,
                                       TRITONBACKEND_MemoryManager** manager) {
  CHECK_ARG(backend);
  CHECK_ARG(manager);
  *manager = &pyserver::triton::ServerMemoryManager();
  return nullptr;
}

API TRITONBACKEND_MemoryManagerAllocate(TRITONBACKEND_MemoryManager* manager, void** buffer,
                                        const TRITONSERVER_MemoryType memory_type,
                                        const int64_t memory_type_id, const uint64_t byte_size) {
  CHECK_ARG(manager);
  CHECK_ARG(buffer);
  return manager->Allocate(buffer, memory_type, memory_type_id, byte_size);
}

API TRITONBACKEND_MemoryManagerFree(TRITONBACKEND_MemoryManager* manager, void* buffer,
                                    const TRITONSERVER_MemoryType memory_type,
                                    const int64_t memory_type_id) {
  CHECK_ARG(manager);
  return manager->Free(buffer, memory_type, memory_type_id);
}
