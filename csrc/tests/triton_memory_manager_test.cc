// The backend memory manager over a stand-in libcudart (fake_cudart.cc):
// pinned and device memory come from CUDA on the device asked for, the
// caller's current device is left as it was, and a free must name what was
// allocated. Without CUDA, Triton's UNSUPPORTED errors.
#include "pyserver/triton/memory_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>

#include "pyserver/cuda_memory_pool.h"
#include "pyserver/cuda_runtime.h"
#include "pyserver/pinned_memory_pool.h"
#include "test_util.h"

namespace pyserver {
namespace {

long FakeCounter(const char* name) {
  return testing::LibraryCounter<long>(FAKE_CUDART_PATH, name, -1000);
}

// The error's code and message, deleting it; {-1, ""} for success.
std::pair<int, std::string> Take(TRITONSERVER_Error* error) {
  if (error == nullptr) return {-1, ""};
  std::pair<int, std::string> out{TRITONSERVER_ErrorCode(error), TRITONSERVER_ErrorMessage(error)};
  TRITONSERVER_ErrorDelete(error);
  return out;
}

TEST(BackendMemoryManager, PinnedAndDeviceMemoryFromCuda) {
  setenv("FAKE_CUDART_DEVICES", "2", 1);
  {
    CudaRuntime cuda({FAKE_CUDART_PATH});
    ASSERT_TRUE(cuda.available()) << cuda.reason();
    TRITONBACKEND_MemoryManager manager(&cuda);
    const long host_before = FakeCounter("fake_cudart_host_blocks");
    const long device_before = FakeCounter("fake_cudart_device_blocks");

    void* pinned = nullptr;
    ASSERT_EQ(Take(manager.Allocate(&pinned, TRITONSERVER_MEMORY_CPU_PINNED, 0, 256)).first, -1);
    std::memset(pinned, 7, 256);
    EXPECT_EQ(FakeCounter("fake_cudart_host_blocks"), host_before + 1);

    void* gpu = nullptr;
    ASSERT_EQ(Take(manager.Allocate(&gpu, TRITONSERVER_MEMORY_GPU, 1, 1024)).first, -1);
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), device_before + 1);
    EXPECT_EQ(FakeCounter("fake_cudart_last_malloc_device"), 1);  // on the device asked for
    EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 0);      // and the caller's kept
    EXPECT_EQ(manager.outstanding(), 2u);

    // A GPU that is not there, and a free that names the wrong device or type.
    void* none = nullptr;
    auto missing = Take(manager.Allocate(&none, TRITONSERVER_MEMORY_GPU, 2, 64));
    EXPECT_EQ(missing.first, TRITONSERVER_ERROR_INVALID_ARG);
    EXPECT_EQ(missing.second, "unable to allocate GPU memory on device 2: 2 GPU(s) visible");
    auto wrong = Take(manager.Free(gpu, TRITONSERVER_MEMORY_GPU, 0));
    EXPECT_EQ(wrong.first, TRITONSERVER_ERROR_INVALID_ARG);
    EXPECT_EQ(wrong.second, "memory to free was not allocated by the memory manager as GPU "
                            "memory on device 0");
    EXPECT_EQ(Take(manager.Free(pinned, TRITONSERVER_MEMORY_GPU, 0)).first,
              TRITONSERVER_ERROR_INVALID_ARG);

    EXPECT_EQ(Take(manager.Free(gpu, TRITONSERVER_MEMORY_GPU, 1)).first, -1);
    EXPECT_EQ(Take(manager.Free(pinned, TRITONSERVER_MEMORY_CPU_PINNED, 0)).first, -1);
    EXPECT_EQ(manager.outstanding(), 0u);
    EXPECT_EQ(FakeCounter("fake_cudart_host_blocks"), host_before);
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), device_before);
    EXPECT_EQ(Take(manager.Free(gpu, TRITONSERVER_MEMORY_GPU, 1)).first,  // twice: refused
              TRITONSERVER_ERROR_INVALID_ARG);
  }
  unsetenv("FAKE_CUDART_DEVICES");
}

TEST(BackendMemoryManager, WithoutCudaOnlyCpuMemory) {
  CudaRuntime none({"/nonexistent/libcudart.so"});
  TRITONBACKEND_MemoryManager manager(&none);
  void* buffer = nullptr;
  ASSERT_EQ(Take(manager.Allocate(&buffer, TRITONSERVER_MEMORY_CPU, 0, 64)).first, -1);
  std::memset(buffer, 1, 64);
  EXPECT_EQ(Take(manager.Free(buffer, TRITONSERVER_MEMORY_CPU, 0)).first, -1);
  auto gpu = Take(manager.Allocate(&buffer, TRITONSERVER_MEMORY_GPU, 0, 64));
  EXPECT_EQ(gpu, std::make_pair(static_cast<int>(TRITONSERVER_ERROR_UNSUPPORTED),
                                std::string("GPU memory allocation not supported")));
  auto pinned = Take(manager.Allocate(&buffer, TRITONSERVER_MEMORY_CPU_PINNED, 0, 64));
  EXPECT_EQ(pinned, std::make_pair(static_cast<int>(TRITONSERVER_ERROR_UNSUPPORTED),
                                   std::string("Pinned memory allocation not supported")));
}

TEST(BackendMemoryManager, FromTheServersPools) {
  setenv("FAKE_CUDART_DEVICES", "2", 1);
  {
    CudaRuntime cuda({FAKE_CUDART_PATH});
    ASSERT_TRUE(cuda.available()) << cuda.reason();
    TRITONBACKEND_MemoryManager manager(&cuda);
    auto pinned_pool = std::make_shared<PinnedMemoryPool>(8192, &cuda);
    std::unique_ptr<CudaMemoryPool> made;
    ASSERT_TRUE(CudaMemoryPool::Create(cuda, 1, 1 << 20, &made).ok());
    std::shared_ptr<CudaMemoryPool> device_pool(std::move(made));
    manager.UsePinnedPool(pinned_pool);
    manager.UseDevicePool(1, device_pool);

    void* a = nullptr;
    void* b = nullptr;
    ASSERT_EQ(Take(manager.Allocate(&a, TRITONSERVER_MEMORY_CPU_PINNED, 0, 4096)).first, -1);
    EXPECT_EQ(pinned_pool->stats().in_use_bytes, 4096u);
    ASSERT_EQ(Take(manager.Free(a, TRITONSERVER_MEMORY_CPU_PINNED, 0)).first, -1);
    EXPECT_EQ(pinned_pool->stats().in_use_bytes, 0u);
    ASSERT_EQ(Take(manager.Allocate(&b, TRITONSERVER_MEMORY_CPU_PINNED, 0, 4096)).first, -1);
    EXPECT_EQ(b, a);  // the pool's cached block again
    EXPECT_EQ(pinned_pool->stats().reuses, 1u);
    // Past the pool's capacity its blocks would not be page-locked: refused,
    // as Triton refuses, so the backend falls back to CPU memory.
    void* big = nullptr;
    auto exhausted = Take(manager.Allocate(&big, TRITONSERVER_MEMORY_CPU_PINNED, 0, 1 << 16));
    EXPECT_EQ(exhausted.first, TRITONSERVER_ERROR_UNAVAILABLE);
    EXPECT_EQ(pinned_pool->stats().in_use_bytes, 4096u);
    ASSERT_EQ(Take(manager.Free(b, TRITONSERVER_MEMORY_CPU_PINNED, 0)).first, -1);

    const long device_before = FakeCounter("fake_cudart_device_blocks");
    void* pooled = nullptr;
    void* direct = nullptr;
    ASSERT_EQ(Take(manager.Allocate(&pooled, TRITONSERVER_MEMORY_GPU, 1, 1000)).first, -1);
    EXPECT_EQ(device_pool->stats().in_use_bytes, MemoryPool::ClassSize(1000));
    ASSERT_EQ(Take(manager.Allocate(&direct, TRITONSERVER_MEMORY_GPU, 0, 1000)).first, -1);
    EXPECT_EQ(FakeCounter("fake_cudart_last_malloc_device"), 0);  // GPU 0 has no pool
    EXPECT_EQ(Take(manager.Free(pooled, TRITONSERVER_MEMORY_GPU, 1)).first, -1);
    EXPECT_EQ(device_pool->stats().in_use_bytes, 0u);
    EXPECT_EQ(device_pool->stats().cached_bytes, MemoryPool::ClassSize(1000));  // kept for reuse
    EXPECT_EQ(Take(manager.Free(direct, TRITONSERVER_MEMORY_GPU, 0)).first, -1);
    EXPECT_EQ(manager.outstanding(), 0u);
    device_pool->Trim();
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), device_before);
  }
  unsetenv("FAKE_CUDART_DEVICES");
}

}  // namespace
}  // namespace pyserver
