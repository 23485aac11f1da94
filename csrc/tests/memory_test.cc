// CudaRuntime (the dlopen loader), the memory pools and CudaStreamPool, run
// against a stand-in libcudart (fake_cudart.cc) and without CUDA at all.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "pyserver/cuda_memory_pool.h"
#include "pyserver/cuda_runtime.h"
#include "pyserver/cuda_stream_pool.h"
#include "pyserver/pinned_memory_pool.h"
#include "test_util.h"

namespace pyserver {
namespace {

long FakeCounter(const char* name) {
  return testing::LibraryCounter<long>(FAKE_CUDART_PATH, name, -1000);
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(CudaRuntime, MissingLibraryIsUnavailableWithTheReason) {
  CudaRuntime runtime({"/nonexistent/libcudart.so"});
  EXPECT_FALSE(runtime.available());
  EXPECT_NE(runtime.reason().find("could not be loaded"), std::string::npos) << runtime.reason();
  EXPECT_NE(runtime.reason().find("/nonexistent/libcudart.so"), std::string::npos);
  void* p = nullptr;
  Status s = runtime.HostAlloc(&p, 64);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), runtime.reason());
}

TEST(CudaRuntime, LibraryWithoutTheSymbolsIsUnavailable) {
  CudaRuntime runtime({"libm.so.6"});
  EXPECT_FALSE(runtime.available());
  EXPECT_NE(runtime.reason().find("lacks cudaGetDeviceCount"), std::string::npos)
      << runtime.reason();
}

TEST(CudaRuntime, NoDeviceIsUnavailableWithCudasText) {
  ScopedEnv env("FAKE_CUDART_DEVICES", "-1");
  CudaRuntime runtime({"/nonexistent.so", FAKE_CUDART_PATH});
  EXPECT_EQ(runtime.library(), FAKE_CUDART_PATH);
  EXPECT_FALSE(runtime.available());
  EXPECT_EQ(runtime.reason(), "no usable CUDA device: no CUDA-capable device is detected");
  ScopedEnv none("FAKE_CUDART_DEVICES", "0");
  CudaRuntime zero({FAKE_CUDART_PATH});
  EXPECT_EQ(zero.reason(), "no CUDA device is visible");
}

TEST(CudaRuntime, ARuntimeTheDriverRefusesGivesWayToTheNext) {
  // e.g. the system's CUDA 13 runtime found first on an older driver, a
  // wheel's CUDA 12 runtime after it
  CudaRuntime runtime({FAKE_CUDART_OLD_DRIVER_PATH, FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available()) << runtime.reason();
  EXPECT_EQ(runtime.library(), FAKE_CUDART_PATH);
  EXPECT_EQ(runtime.reason(), "");
  void* p = nullptr;
  ASSERT_TRUE(runtime.HostAlloc(&p, 64).ok());
  EXPECT_TRUE(runtime.FreeHost(p).ok());
  // none usable: the first one's reason, and its name
  CudaRuntime none({"/nonexistent.so", FAKE_CUDART_OLD_DRIVER_PATH, "libm.so.6"});
  EXPECT_FALSE(none.available());
  EXPECT_EQ(none.library(), FAKE_CUDART_OLD_DRIVER_PATH);
  EXPECT_EQ(none.reason(),
            "no usable CUDA device: CUDA driver version is insufficient for CUDA runtime version");
}

TEST(CudaRuntime, LoadsAndChecksDevices) {
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available()) << runtime.reason();
  EXPECT_EQ(runtime.device_count(), 1);
  EXPECT_TRUE(runtime.SetDevice(0).ok());
  Status bad = runtime.SetDevice(3);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArg);
  EXPECT_EQ(bad.message(), "CUDA device 3 does not exist (1 visible)");
  Status err = runtime.StreamSynchronize(nullptr);
  EXPECT_EQ(err.message(), "cudaStreamSynchronize failed: invalid argument");
}

TEST(PinnedMemoryPool, SizeClasses) {
  EXPECT_EQ(PinnedMemoryPool::ClassSize(0), 4096u);
  EXPECT_EQ(PinnedMemoryPool::ClassSize(1), 4096u);
  EXPECT_EQ(PinnedMemoryPool::ClassSize(4096), 4096u);
  EXPECT_EQ(PinnedMemoryPool::ClassSize(4097), 8192u);
  EXPECT_EQ(PinnedMemoryPool::ClassSize((1u << 20) + 1), 2u << 20);
}

TEST(PinnedMemoryPool, PlainMemoryIsReusedAndAligned) {
  PinnedMemoryPool pool(1 << 20, nullptr);
  EXPECT_FALSE(pool.pinned());
  MemoryBlock a;
  ASSERT_TRUE(pool.Allocate(5000, &a).ok());
  EXPECT_EQ(a.size, 5000u);
  EXPECT_EQ(a.capacity, 8192u);
  EXPECT_TRUE(a.pooled);
  EXPECT_FALSE(a.pinned);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 4096, 0u);
  std::memset(a.data, 0xAB, a.capacity);  // all of it is ours (ASan checks)
  EXPECT_EQ(pool.stats().in_use_bytes, 8192u);
  pool.Release(a);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  EXPECT_EQ(pool.stats().cached_bytes, 8192u);
  MemoryBlock b;
  ASSERT_TRUE(pool.Allocate(8000, &b).ok());
  EXPECT_EQ(b.data, a.data);  // same class: the cached block
  MemoryPoolStats s = pool.stats();
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.cached_bytes, 0u);
  pool.Release(b);
}

TEST(PinnedMemoryPool, PastCapacityIsServedUnpooled) {
  PinnedMemoryPool pool(16384, nullptr);
  MemoryBlock a, b, big;
  ASSERT_TRUE(pool.Allocate(16384, &a).ok());
  EXPECT_TRUE(a.pooled);
  ASSERT_TRUE(pool.Allocate(100, &b).ok());  // the pool is full
  EXPECT_FALSE(b.pooled);
  ASSERT_TRUE(pool.Allocate(1 << 20, &big).ok());  // larger than the whole pool
  EXPECT_FALSE(big.pooled);
  std::memset(big.data, 1, 1 << 20);
  EXPECT_EQ(pool.stats().unpooled, 2u);
  pool.Release(b);
  pool.Release(big);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);  // unpooled blocks are freed at once
  pool.Release(a);
  EXPECT_EQ(pool.stats().cached_bytes, 16384u);
}

TEST(PinnedMemoryPool, EvictsCachedBlocksToMakeRoom) {
  PinnedMemoryPool pool(16384, nullptr);
  MemoryBlock small;
  ASSERT_TRUE(pool.Allocate(4096, &small).ok());
  pool.Release(small);  // 4 KiB cached
  MemoryBlock whole;
  ASSERT_TRUE(pool.Allocate(16384, &whole).ok());
  EXPECT_TRUE(whole.pooled);  // the cached 4 KiB was freed to fit it
  MemoryPoolStats s = pool.stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.in_use_bytes, 16384u);
  pool.Release(whole);
  pool.Trim();
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

TEST(PinnedMemoryPool, PinsWithCudaAndFreesEveryBlock) {
  {
    CudaRuntime runtime({FAKE_CUDART_PATH});
    ASSERT_TRUE(runtime.available());
    long before = FakeCounter("fake_cudart_host_blocks");
    {
      PinnedMemoryPool pool(1 << 20, &runtime);
      EXPECT_TRUE(pool.pinned());
      MemoryBlock a, b, over;
      ASSERT_TRUE(pool.Allocate(100, &a).ok());
      ASSERT_TRUE(pool.Allocate(70000, &b).ok());
      EXPECT_TRUE(a.pinned && b.pinned);
      EXPECT_EQ(FakeCounter("fake_cudart_host_blocks"), before + 2);
      ASSERT_TRUE(pool.Allocate(2 << 20, &over).ok());
      EXPECT_FALSE(over.pinned);  // past capacity: plain memory, not cudaHostAlloc
      EXPECT_EQ(FakeCounter("fake_cudart_host_blocks"), before + 2);
      pool.Release(a);
      pool.Release(b);
      pool.Release(over);
      EXPECT_TRUE(pool.stats().pinned);
    }
    EXPECT_EQ(FakeCounter("fake_cudart_host_blocks"), before);  // cached ones freed
  }
}

TEST(PinnedMemoryPool, ConcurrentAllocateAndRelease) {
  PinnedMemoryPool pool(1 << 20, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        MemoryBlock block;
        size_t bytes = 512u << ((i + t) % 6);
        ASSERT_TRUE(pool.Allocate(bytes, &block).ok());
        static_cast<char*>(block.data)[bytes - 1] = static_cast<char>(i);
        pool.Release(block);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  MemoryPoolStats s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.reuses + s.allocations + s.unpooled, 8000u);
  EXPECT_LE(s.cached_bytes, s.capacity);
}

TEST(CudaStreamPool, RoundRobinAndDestroysItsStreams) {
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available());
  long before = FakeCounter("fake_cudart_streams");
  {
    std::unique_ptr<CudaStreamPool> pool;
    ASSERT_TRUE(CudaStreamPool::Create(runtime, 0, 3, &pool).ok());
    EXPECT_EQ(pool->size(), 3u);
    EXPECT_EQ(FakeCounter("fake_cudart_streams"), before + 3);
    std::set<void*> seen;
    for (int i = 0; i < 6; ++i) seen.insert(pool->Next());
    EXPECT_EQ(seen.size(), 3u);
    EXPECT_TRUE(pool->Synchronize().ok());
  }
  EXPECT_EQ(FakeCounter("fake_cudart_streams"), before);
  std::unique_ptr<CudaStreamPool> pool;
  EXPECT_EQ(CudaStreamPool::Create(runtime, 5, 2, &pool).code(), StatusCode::kInvalidArg);
  EXPECT_EQ(CudaStreamPool::Create(runtime, 0, 0, &pool).code(), StatusCode::kInvalidArg);
  CudaRuntime missing({"/nonexistent.so"});
  EXPECT_EQ(CudaStreamPool::Create(missing, 0, 2, &pool).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pool, nullptr);
}

TEST(CudaStreamPool, LeavesTheCallersDevice) {
  ScopedEnv two_devices("FAKE_CUDART_DEVICES", "2");
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available());
  ASSERT_TRUE(runtime.SetDevice(0).ok());
  {
    std::unique_ptr<CudaStreamPool> pool;
    ASSERT_TRUE(CudaStreamPool::Create(runtime, 1, 2, &pool).ok());
    EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 0);
  }
  EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 0);  // its destructor too
  {
    CudaDeviceScope scope(runtime, 1);
    ASSERT_TRUE(scope.status().ok());
    EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 1);
    CudaDeviceScope bad(runtime, 7);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArg);
  }
  EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 0);
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

TEST(CudaRuntime, DeviceMemoryAndAsyncCopies) {
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available());
  void* device = nullptr;
  ASSERT_TRUE(runtime.Malloc(&device, 64).ok());
  void* stream = nullptr;
  ASSERT_TRUE(runtime.StreamCreate(&stream).ok());
  const char src[] = "sixteen bytes!!";
  char back[16] = {};
  ASSERT_TRUE(runtime.MemcpyAsync(device, src, 16, CudaRuntime::kHostToDevice, stream).ok());
  ASSERT_TRUE(runtime.MemcpyAsync(back, device, 16, CudaRuntime::kDeviceToHost, stream).ok());
  ASSERT_TRUE(runtime.StreamSynchronize(stream).ok());
  EXPECT_STREQ(back, src);
  Status bad = runtime.MemcpyAsync(back, device, 16, 7, stream);
  EXPECT_EQ(bad.message(), "cudaMemcpyAsync failed: invalid argument");
  EXPECT_TRUE(runtime.Free(device).ok());
  EXPECT_TRUE(runtime.StreamDestroy(stream).ok());
  CudaRuntime missing({"/nonexistent.so"});
  EXPECT_EQ(missing.Malloc(&device, 8).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

TEST(CudaMemoryPool, ReusesBlocksOnItsDeviceAndLeavesTheCallersDevice) {
  ScopedEnv two_devices("FAKE_CUDART_DEVICES", "2");
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available());
  ASSERT_EQ(runtime.device_count(), 2);
  ASSERT_TRUE(runtime.SetDevice(0).ok());
  long before = FakeCounter("fake_cudart_device_blocks");
  {
    std::unique_ptr<CudaMemoryPool> pool;
    ASSERT_TRUE(CudaMemoryPool::Create(runtime, 1, 1 << 20, &pool).ok());
    EXPECT_EQ(pool->device(), 1);
    MemoryBlock a;
    ASSERT_TRUE(pool->Allocate(1000, &a).ok());
    EXPECT_TRUE(a.pooled);
    EXPECT_FALSE(a.pinned);
    EXPECT_EQ(a.device, 1);
    EXPECT_EQ(a.capacity, MemoryPool::kMinBlock);
    EXPECT_EQ(FakeCounter("fake_cudart_last_malloc_device"), 1);  // allocated on the pool's GPU
    EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 0);      // and the caller's is back
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), before + 1);
    void* first = a.data;
    pool->Release(a);
    MemoryBlock again;
    ASSERT_TRUE(pool->Allocate(900, &again).ok());
    EXPECT_EQ(again.data, first);  // same class: no second cudaMalloc
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), before + 1);
    MemoryBlock over;
    ASSERT_TRUE(pool->Allocate(2 << 20, &over).ok());
    EXPECT_FALSE(over.pooled);  // past capacity: still device memory, not cached
    EXPECT_EQ(over.device, 1);
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), before + 2);
    pool->Release(over);
    EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), before + 1);
    MemoryPoolStats s = pool->stats();
    EXPECT_EQ(s.device, 1);
    EXPECT_FALSE(s.pinned);
    EXPECT_EQ(s.reuses, 1u);
    EXPECT_EQ(s.allocations, 1u);
    EXPECT_EQ(s.unpooled, 1u);
    EXPECT_EQ(s.in_use_bytes, MemoryPool::kMinBlock);
    pool->Release(again);
  }
  EXPECT_EQ(FakeCounter("fake_cudart_device_blocks"), before);  // cached blocks freed
  EXPECT_EQ(FakeCounter("fake_cudart_current_device"), 0);
}

TEST(CudaRuntime, PciBusIdOfADevice) {
  ScopedEnv two_devices("FAKE_CUDART_DEVICES", "2");
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available());
  std::string bus_id;
  ASSERT_TRUE(runtime.PciBusId(1, &bus_id).ok());
  EXPECT_EQ(bus_id, "0000:02:00.0");
  EXPECT_EQ(runtime.PciBusId(7, &bus_id).message(), "cudaDeviceGetPCIBusId failed: invalid argument");
}

TEST(CudaMemoryPool, NeedsCudaAndAnExistingDevice) {
  CudaRuntime runtime({FAKE_CUDART_PATH});
  ASSERT_TRUE(runtime.available());
  std::unique_ptr<CudaMemoryPool> pool;
  Status bad = CudaMemoryPool::Create(runtime, 3, 1 << 20, &pool);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArg);
  EXPECT_EQ(bad.message(), "CUDA device 3 does not exist (1 visible)");
  CudaRuntime missing({"/nonexistent.so"});
  EXPECT_EQ(CudaMemoryPool::Create(missing, 0, 1 << 20, &pool).code(), StatusCode::kUnavailable);
  EXPECT_EQ(pool, nullptr);
}

}  // namespace
}  // namespace pyserver
