# csrc's host-memory and CUDA helpers: pyserver/gather.h, cuda_runtime.h,
# memory_pool.h (pinned_memory_pool.h, cuda_memory_pool.h), cuda_stream_pool.h.
from libc.stdint cimport uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.status cimport Status


cdef extern from "pyserver/gather.h" namespace "pyserver" nogil:
    size_t GatherCopy(const void* const* sources, const size_t* sizes, size_t n, void* dst)


cdef extern from "pyserver/cuda_runtime.h" namespace "pyserver" nogil:
    cdef cppclass CudaRuntime:
        CudaRuntime(const vector[string]& candidates)
        @staticmethod
        CudaRuntime& Get()
        @staticmethod
        void AddSearchPaths(const vector[string]& paths)
        cbool available()
        const string& reason()
        const string& library()
        int device_count()
        Status SetDevice(int device)
        Status PciBusId(int device, string* bus_id)
        Status StreamSynchronize(void* stream)
        Status Malloc(void** ptr, size_t bytes)
        Status Free(void* ptr)
        Status MemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream)


cdef extern from "pyserver/memory_pool.h" namespace "pyserver" nogil:
    cdef cppclass MemoryBlock:
        void* data
        size_t size
        size_t capacity
        cbool pinned
        cbool pooled
        int device

    cdef cppclass MemoryPoolStats:
        size_t capacity
        size_t in_use_bytes
        size_t cached_bytes
        uint64_t reuses
        uint64_t allocations
        uint64_t unpooled
        cbool pinned
        int device

    cdef cppclass CMemoryPool "pyserver::MemoryPool":
        Status Allocate(size_t bytes, MemoryBlock* block)
        void Release(const MemoryBlock& block)
        void Trim()
        MemoryPoolStats stats()


cdef extern from "pyserver/pinned_memory_pool.h" namespace "pyserver" nogil:
    cdef cppclass CPinnedMemoryPool "pyserver::PinnedMemoryPool"(CMemoryPool):
        CPinnedMemoryPool(size_t capacity, const CudaRuntime* runtime)
        cbool pinned()


cdef extern from "pyserver/cuda_memory_pool.h" namespace "pyserver" nogil:
    cdef cppclass CCudaMemoryPool "pyserver::CudaMemoryPool"(CMemoryPool):
        @staticmethod
        Status Create(const CudaRuntime& runtime, int device, size_t capacity,
                      unique_ptr[CCudaMemoryPool]* pool)
        int device()


cdef extern from "pyserver/cuda_stream_pool.h" namespace "pyserver" nogil:
    cdef cppclass CCudaStreamPool "pyserver::CudaStreamPool":
        @staticmethod
        Status Create(const CudaRuntime& runtime, int device, int count,
                      unique_ptr[CCudaStreamPool]* pool)
        void* Next()
        int device()
        size_t size()
        Status Synchronize()


cdef class _Pool:
    cdef CMemoryPool* pool  # the subclass's pool, which owns it


cdef class PinnedMemoryPool(_Pool):
    cdef shared_ptr[CPinnedMemoryPool] c  # shared: the backend memory manager may use it
    cdef unique_ptr[CudaRuntime] own_runtime  # when loaded from an explicit path


cdef class HostBuffer:
    cdef PinnedMemoryPool pool  # keeps the pool alive while the block is out
    cdef MemoryBlock block
    cdef Py_ssize_t shape[1]


cdef class CudaMemoryPool(_Pool):
    cdef shared_ptr[CCudaMemoryPool] c  # shared: the backend memory manager may use it
    cdef unique_ptr[CudaRuntime] own_runtime  # when loaded from an explicit path


cdef class DeviceBlock:
    cdef CudaMemoryPool pool  # keeps the pool alive while the block is out
    cdef MemoryBlock block
