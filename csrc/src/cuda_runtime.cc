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
  std::string load_error = "no library names given";
  for (const std::string& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* err = dlerror();
      load_error = err != nullptr ? err : name + ": cannot be opened";
      continue;
    }
    // A runtime that loads but cannot be used (a CUDA 13 runtime on the
    // library path with an older driver, next to the CUDA 12 runtime of a
    // wheel) gives way to the next candidate. It stays loaded, as the one
    // in use does (see ~CudaRuntime); the first one's reason is kept.
    std::string why;
    if (Bind(handle, name, &why)) {
      handle_ = handle;
      library_ = name;
      reason_.clear();
      available_ = true;
      return;
    }
    if (library_.empty()) {
      library_ = name;
      reason_ = why;
    }
  }
  if (library_.empty()) {
    reason_ = "the CUDA runtime library could not be loaded (" + load_error + ")";
  }
}

bool CudaRuntime::Bind(void* handle, const std::string& name, std::string* why) {
  std::string missing;
  bool ok = Resolve(handle, "cudaGetDeviceCount", &get_device_count_, &missing);
  ok &= Resolve(handle, "cudaSetDevice", &set_device_, &missing);
  ok &= Resolve(handle, "cudaGetDevice", &get_device_, &missing);
  ok &= Resolve(handle, "cudaDeviceGetPCIBusId", &pci_bus_id_, &missing);
  ok &= Resolve(handle, "cudaHostAlloc", &host_alloc_, &missing);
  ok &= Resolve(handle, "cudaFreeHost", &free_host_, &missing);
  ok &= Resolve(handle, "cudaStreamCreateWithFlags", &stream_create_, &missing);
  ok &= Resolve(handle, "cudaStreamDestroy", &stream_destroy_, &missing);
  ok &= Resolve(handle, "cudaStreamSynchronize", &stream_synchronize_, &missing);
  ok &= Resolve(handle, "cudaMalloc", &malloc_, &missing);
  ok &= Resolve(handle, "cudaFree", &free_, &missing);
  ok &= Resolve(handle, "cudaMemcpyAsync", &memcpy_async_, &missing);
  ok &= Resolve(handle, "cudaGetErrorString", &error_string_, &missing);
  if (!ok) {
    *why = name + " lacks " + missing;
    return false;
  }
  int count = 0;
  int err = get_device_count_(&count);
  if (err != 0) {
    *why = std::string("no usable CUDA device: ") + error_string_(err);
    return false;
  }
  if (count <= 0) {
    *why = "no CUDA device is visible";
    return false;
  }
  device_count_ = count;
  return true;
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

CudaDeviceScope::CudaDeviceScope(const CudaRuntime& runtime, int device) : runtime_(runtime) {
  status_ = runtime_.GetDevice(&previous_);
  if (status_.ok() && previous_ != device) {
    status_ = runtime_.SetDevice(device);
    switched_ = status_.ok();
  }
}

CudaDeviceScope::~CudaDeviceScope() {
  if (switched_) runtime_.SetDevice(previous_);  // a failure leaves nothing better to do
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
