// A stand-in for libcudart with the entry points CudaRuntime resolves: host
// memory instead of page-locked and device memory, integer handles for
// streams, a current device per thread, and counters the tests read to check
// that every block and stream is freed.
// FAKE_CUDART_DEVICES=<n> sets the device count (default 1); -1 makes
// cudaGetDeviceCount fail as it does on a machine without a driver. Built
// with FAKE_CUDART_OLD_DRIVER it always fails as a runtime newer than the
// driver does.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
std::atomic<long> g_host_blocks{0};
std::atomic<long> g_streams{0};
std::atomic<long> g_device_blocks{0};
std::atomic<int> g_last_malloc_device{-1};
std::atomic<long> g_next_stream{1};
thread_local int g_device = 0;
constexpr int kErrorInvalidValue = 1;
constexpr int kErrorNoDevice = 100;
constexpr int kErrorInsufficientDriver = 35;
}  // namespace

extern "C" {

int cudaGetDeviceCount(int* count) {
#ifdef FAKE_CUDART_OLD_DRIVER
  // built as a runtime newer than the machine's driver (cudaErrorInsufficientDriver)
  (void)count;
  return kErrorInsufficientDriver;
#endif
  const char* env = std::getenv("FAKE_CUDART_DEVICES");
  int n = env != nullptr ? std::atoi(env) : 1;
  if (n < 0) return kErrorNoDevice;
  *count = n;
  return 0;
}

int cudaSetDevice(int device) {
  g_device = device;
  return 0;
}

int cudaGetDevice(int* device) {
  *device = g_device;
  return 0;
}

// Device n sits at bus n + 1.
int cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (device < 0 || device >= count) return kErrorInvalidValue;
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:%02X:00.0", device + 1);
  return 0;
}

int cudaHostAlloc(void** ptr, size_t bytes, unsigned /*flags*/) {
  if (bytes == 0) return kErrorInvalidValue;
  *ptr = std::malloc(bytes);
  if (*ptr == nullptr) return 2;  // cudaErrorMemoryAllocation
  ++g_host_blocks;
  return 0;
}

int cudaFreeHost(void* ptr) {
  std::free(ptr);
  --g_host_blocks;
  return 0;
}

int cudaStreamCreateWithFlags(void** stream, unsigned /*flags*/) {
  *stream = reinterpret_cast<void*>(g_next_stream.fetch_add(1));
  ++g_streams;
  return 0;
}

int cudaStreamDestroy(void* /*stream*/) {
  --g_streams;
  return 0;
}

int cudaStreamSynchronize(void* stream) { return stream == nullptr ? kErrorInvalidValue : 0; }

int cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  if (*ptr == nullptr) return 2;
  ++g_device_blocks;
  g_last_malloc_device = g_device;
  return 0;
}

int cudaFree(void* ptr) {
  if (ptr == nullptr) return 0;
  std::free(ptr);
  --g_device_blocks;
  return 0;
}

// "Device" memory is host memory here, so both directions are a memcpy.
int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  if (stream == nullptr || (kind != 1 && kind != 2)) return kErrorInvalidValue;
  std::memcpy(dst, src, bytes);
  return 0;
}

// The synchronous copy a backend makes itself (tests/backends_c/gpu_roundtrip.c).
int cudaMemcpy(void* dst, const void* src, size_t bytes, int kind) {
  if (kind != 1 && kind != 2) return kErrorInvalidValue;
  std::memcpy(dst, src, bytes);
  return 0;
}

const char* cudaGetErrorString(int err) {
  switch (err) {
    case kErrorNoDevice: return "no CUDA-capable device is detected";
    case kErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case kErrorInvalidValue: return "invalid argument";
    default: return "unknown error";
  }
}

long fake_cudart_host_blocks() { return g_host_blocks.load(); }
long fake_cudart_streams() { return g_streams.load(); }
long fake_cudart_device_blocks() { return g_device_blocks.load(); }
// The device that was current at the last cudaMalloc, and the calling
// thread's current one (to check that a pool restores it).
long fake_cudart_last_malloc_device() { return g_last_malloc_device.load(); }
long fake_cudart_current_device() { return g_device; }

}  // extern "C"
