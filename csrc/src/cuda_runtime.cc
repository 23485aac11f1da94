#include "pyserver/cuda_runtime.h"

#include <dlfcn.h>

namespace pyserver {

namespace {

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
  return *fn != nullptr;
}

}  // namespace

namespace {

std::mutex g_search_mu;
std::vector<std::string>& SearchPaths() {
  static std::vector<std::string> paths;
  return paths;
}

}  // namespace

void CudaRuntime::AddSearchPaths(const std::vector<std::string>& paths) {
  std::lock_guard<std::mutex> lock(g_search_mu);
  SearchPaths().insert(SearchPaths().end(), paths.begin(), paths.end());
}

CudaRuntime& CudaRuntime::Get() {
  static CudaRuntime* runtime = [] {
    // Newest first; a driver newer than the runtime accepts it.
    std::vector<std::string> names = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                      "libcudart.so.11.0"};
    std::lock_guard<std::mutex> lock(g_search_mu);
    names.insert(names.end(), SearchPaths().begin(), SearchPaths().end());
    return new CudaRuntime(names);  // lives as long as the process
  }();
  return *runtime;
}

CudaRuntime::CudaRuntime(const std::vector<std::string>& candidates) {
  std::string last_error = "no library names given";
  for (const std::string& name : candidates) {
    handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      library_ = name;
      break;
    }
    const char* err = dlerror();
    last_error = err != nullptr ? err : name + ": cannot be opened";
  }
  if (handle_ == nullptr) {
    reason_ = "the CUDA runtime library could not be loaded (" + last_error + ")";
    return;
  }
  std::string missing;
  bool ok = Resolve(handle_, "cudaGetDeviceCount", &get_device_count_, &missing);
  ok &= Resolve(handle_, "cudaSetDevice", &set_device_, &missing);
  ok &= Resolve(handle_, "cudaGetDevice", &get_device_, &missing);
  ok &= Resolve(handle_, "cudaDeviceGetPCIBusId", &pci_bus_id_, &missing);
  ok &= Resolve(handle_, "cudaHostAlloc", &host_alloc_, &missing);
  ok &= Resolve(handle_, "cudaFreeHost", &free_host_, &missing);
  ok &= Resolve(handle_, "cudaStreamCreateWithFlags", &stream_create_, &missing);
  ok &= Resolve(handle_, "cudaStreamDestroy", &stream_destroy_, &missing);
  ok &= Resolve(handle_, "cudaStreamSynchronize", &stream_synchronize_, &missing);
  ok &= Resolve(handle_, "cudaMalloc", &malloc_, &missing);
  ok &= Resolve(handle_, "cudaFree", &free_, &missing);
  ok &= Resolve(handle_, "cudaMemcpyAsync", &memcpy_async_, &missing);
  ok &= Resolve(handle_, "cudaGetErrorString", &error_string_, &missing);
  if (!ok) {
    reason_ = library_ + " lacks " + missing;
    return;
  }
  int count = 0;
  int err = get_device_count_(&count);
  if (err != 0) {
    reason_ = std::string("no usable CUDA device: ") + error_string_(err);
    return;
  }
  if (count <= 0) {
    reason_ = "no CUDA device is visible";
    return;
  }
  device_count_ = count;
  available_ = true;
}

CudaRuntime::~CudaRuntime() {
  // The library stays loaded: CUDA's own teardown at exit needs it, and
  // pinned blocks may still be freed by late destructors.
}

Status CudaRuntime::Check(int err, const char* what) const {
  if (err == 0) return Status::Ok();
  return Status(StatusCode::kInternal, std::string(what) + " failed: " + error_string_(err));
}

Status CudaRuntime::HostAlloc(void** ptr, size_t bytes) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(host_alloc_(ptr, bytes, kHostAllocPortable), "cudaHostAlloc");
}

Status CudaRuntime::FreeHost(void* ptr) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(free_host_(ptr), "cudaFreeHost");
}

Status CudaRuntime::SetDevice(int device) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  if (device < 0 || device >= device_count_) {
    return Status(StatusCode::kInvalidArg, "CUDA device " + std::to_string(device) +
                                               " does not exist (" +
                                               std::to_string(device_count_) + " visible)");
  }
  return Check(set_device_(device), "cudaSetDevice");
}

Status CudaRuntime::GetDevice(int* device) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(get_device_(device), "cudaGetDevice");
}

Status CudaRuntime::PciBusId(int device, std::string* bus_id) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  char buffer[64] = {};
  PYSERVER_RETURN_IF_ERROR(
      Check(pci_bus_id_(buffer, sizeof(buffer) - 1, device), "cudaDeviceGetPCIBusId"));
  *bus_id = buffer;
  return Status::Ok();
}

Status CudaRuntime::StreamCreate(void** stream) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(stream_create_(stream, kStreamNonBlocking), "cudaStreamCreateWithFlags");
}

Status CudaRuntime::StreamDestroy(void* stream) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(stream_destroy_(stream), "cudaStreamDestroy");
}

Status CudaRuntime::StreamSynchronize(void* stream) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(stream_synchronize_(stream), "cudaStreamSynchronize");
}

Status CudaRuntime::Malloc(void** ptr, size_t bytes) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(malloc_(ptr, bytes), "cudaMalloc");
}

Status CudaRuntime::Free(void* ptr) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(free_(ptr), "cudaFree");
}

Status CudaRuntime::MemcpyAsync(void* dst, const void* src, size_t bytes, int kind,
                                void* stream) const {
  if (!available_) return Status(StatusCode::kUnavailable, reason_);
  return Check(memcpy_async_(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
}

}  // namespace pyserver
