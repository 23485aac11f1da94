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
  int previous = 0;
  PYSERVER_RETURN_IF_ERROR(cuda.GetDevice(&previous));
  PYSERVER_RETURN_IF_ERROR(cuda.SetDevice(static_cast<int>(device)));
  pyserver::Status status = fn();
  pyserver::Status restored = cuda.SetDevice(previous);
  return status.ok() ? restored : status;
}

}  // namespace

const pyserver::CudaRuntime& TRITONBACKEND_MemoryManager::Runtime() const {
  return runtime_ != nullptr ? *runtime_ : pyserver::CudaRuntime::Get();
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
  if (type == TRITONSERVER_MEMORY_CPU_PINNED) {
    if (!cuda.available()) {
      return Err(TRITONSERVER_ERROR_UNSUPPORTED, "Pinned memory allocation not supported");
    }
    if (TRITONSERVER_Error* err = ToError(cuda.HostAlloc(buffer, bytes))) return err;
  } else if (type == TRITONSERVER_MEMORY_GPU) {
    if (!cuda.available()) {
      return Err(TRITONSERVER_ERROR_UNSUPPORTED, "GPU memory allocation not supported");
    }
    if (device < 0 || device >= cuda.device_count()) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                 "unable to allocate GPU memory on device " + std::to_string(device) + ": " +
                     std::to_string(cuda.device_count()) + " GPU(s) visible");
    }
    pyserver::Status status = OnDevice(cuda, device, [&] { return cuda.Malloc(buffer, bytes); });
    if (TRITONSERVER_Error* err = ToError(status)) return err;
  } else {
    return Err(TRITONSERVER_ERROR_INVALID_ARG,
               "unknown memory type " + std::to_string(static_cast<int>(type)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  cuda_blocks_[*buffer] = {type, type == TRITONSERVER_MEMORY_GPU ? device : 0};
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_MemoryManager::Free(void* buffer, TRITONSERVER_MemoryType type,
                                                      int64_t device) {
  if (type == TRITONSERVER_MEMORY_CPU) {
    std::free(buffer);
    return nullptr;
  }
  if (buffer == nullptr) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cuda_blocks_.find(buffer);
    const int64_t expected_device = type == TRITONSERVER_MEMORY_GPU ? device : 0;
    if (it == cuda_blocks_.end() || it->second.first != type ||
        it->second.second != expected_device) {
      return Err(TRITONSERVER_ERROR_INVALID_ARG,
                 std::string("memory to free was not allocated by the memory manager as ") +
                     TRITONSERVER_MemoryTypeString(type) + " memory on device " +
                     std::to_string(device));
    }
    cuda_blocks_.erase(it);
  }
  const pyserver::CudaRuntime& cuda = Runtime();
  if (type == TRITONSERVER_MEMORY_CPU_PINNED) return ToError(cuda.FreeHost(buffer));
  return ToError(OnDevice(cuda, device, [&] { return cuda.Free(buffer); }));
}

size_t TRITONBACKEND_MemoryManager::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cuda_blocks_.size();
}

namespace {
TRITONBACKEND_MemoryManager g_memory_manager;  // the server's: one per process, as Triton's
}  // namespace

API TRITONBACKEND_BackendMemoryManager(TRITONBACKEND_Backend* backend,
                                       TRITONBACKEND_MemoryManager** manager) {
  CHECK_ARG(backend);
  CHECK_ARG(manager);
  *manager = &g_memory_manager;
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
