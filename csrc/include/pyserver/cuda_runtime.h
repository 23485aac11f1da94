// CudaRuntime: the CUDA runtime library (libcudart), opened with dlopen at
// run time so that a CPU-only install builds and runs without CUDA. Only the
// few entry points the engine needs are resolved; the declarations below
// mirror the runtime API's C signatures, with handles as void*.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "pyserver/status.h"

namespace pyserver {

class CudaRuntime {
 public:
  // cudaHostAllocPortable: pinned memory usable from every CUDA context.
  static constexpr unsigned kHostAllocPortable = 1;
  // cudaStreamNonBlocking: no implicit sync with the legacy default stream.
  static constexpr unsigned kStreamNonBlocking = 1;
  // cudaMemcpyKind values.
  static constexpr int kHostToDevice = 1;
  static constexpr int kDeviceToHost = 2;

  // The process-wide runtime, loaded on first use from the default library
  // names (libcudart.so, then versioned names), then the extra paths given
  // to AddSearchPaths before that first use; never unloaded.
  static CudaRuntime& Get();
  // Library files to try after the default names (e.g. the libcudart an
  // NVIDIA wheel installs). Only has an effect before the first Get().
  static void AddSearchPaths(const std::vector<std::string>& paths);

  // A runtime loaded from the first of `candidates` that dlopen accepts and
  // that sees a device (for tests, and for a libcudart found inside a Python
  // wheel); when none does, reason() is the first loaded one's.
  explicit CudaRuntime(const std::vector<std::string>& candidates);
  ~CudaRuntime();
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  // True when the library loaded, every symbol resolved and at least one
  // device is visible; otherwise reason() says why not.
  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }
  const std::string& library() const { return library_; }
  int device_count() const { return device_count_; }

  Status HostAlloc(void** ptr, size_t bytes) const;
  Status FreeHost(void* ptr) const;
  Status SetDevice(int device) const;
  // The calling thread's current device.
  Status GetDevice(int* device) const;
  // The device's PCI bus ID, "domain:bus:device.function" (how NVML finds
  // the same GPU).
  Status PciBusId(int device, std::string* bus_id) const;
  Status StreamCreate(void** stream) const;
  Status StreamDestroy(void* stream) const;
  Status StreamSynchronize(void* stream) const;
  Status Malloc(void** ptr, size_t bytes) const;
  Status Free(void* ptr) const;
  // kind: kHostToDevice or kDeviceToHost; returns before the copy is done.
  Status MemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) const;

 private:
  Status Check(int err, const char* what) const;
  // Resolves the entry points from `handle` (the library `name`) and counts
  // its devices: true when it is usable, else `why` says why not.
  bool Bind(void* handle, const std::string& name, std::string* why);

  void* handle_ = nullptr;
  bool available_ = false;
  int device_count_ = 0;
  std::string reason_;
  std::string library_;

  int (*get_device_count_)(int*) = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*get_device_)(int*) = nullptr;
  int (*pci_bus_id_)(char*, int, int) = nullptr;
  int (*host_alloc_)(void**, size_t, unsigned) = nullptr;
  int (*free_host_)(void*) = nullptr;
  int (*stream_create_)(void**, unsigned) = nullptr;
  int (*stream_destroy_)(void*) = nullptr;
  int (*stream_synchronize_)(void*) = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_async_)(void*, const void*, size_t, int, void*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

// Makes `device` the calling thread's current device for its scope, then
// gives the thread back the device it had: the current device is per
// thread, and a loader or request thread must not be left switched.
class CudaDeviceScope {
 public:
  CudaDeviceScope(const CudaRuntime& runtime, int device);
  ~CudaDeviceScope();
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;
  // Why the switch failed (then nothing is restored).
  const Status& status() const { return status_; }

 private:
  const CudaRuntime& runtime_;
  Status status_;
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace pyserver
