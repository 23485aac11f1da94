#include "pyserver/block_allocator.h"

#include <cstdlib>
#include <string>

#include "pyserver/cuda_runtime.h"

namespace pyserver {

Status HostAllocator::Allocate(size_t bytes, void** ptr) {
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  *ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (*ptr == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
  return Status::Ok();
}

void HostAllocator::Free(void* ptr) { std::free(ptr); }

Status PinnedHostAllocator::Allocate(size_t bytes, void** ptr) {
  return runtime_.HostAlloc(ptr, bytes);
}

void PinnedHostAllocator::Free(void* ptr) {
  runtime_.FreeHost(ptr);  // nothing useful to do with a failure here
}

Status DeviceAllocator::Allocate(size_t bytes, void** ptr) {
  CudaDeviceScope scope(runtime_, device_);
  PYSERVER_RETURN_IF_ERROR(scope.status());
  Status status = runtime_.Malloc(ptr, bytes == 0 ? 1 : bytes);
  if (!status.ok()) {
    return Status(StatusCode::kUnavailable, "out of memory on GPU " + std::to_string(device_) +
                                                " allocating " + std::to_string(bytes) +
                                                " bytes: " + status.message());
  }
  return Status::Ok();
}

void DeviceAllocator::Free(void* ptr) {
  CudaDeviceScope scope(runtime_, device_);
  runtime_.Free(ptr);  // as for pinned memory: nothing to do on failure
}

}  // namespace pyserver
