# csrc/include/pyserver/response_cache.h
from libc.stdint cimport uint64_t
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string


cdef extern from "pyserver/response_cache.h" namespace "pyserver" nogil:
    cdef cppclass CacheKey:
        uint64_t low
        uint64_t high

    cdef cppclass RequestHasher:
        RequestHasher() except +
        void Update(const void* data, size_t n)
        void UpdateU64(uint64_t value)
        void UpdateField(const void* data, size_t n)
        CacheKey Digest()

    cdef cppclass ResponseCacheStats:
        size_t capacity
        size_t bytes
        size_t entries
        uint64_t hits
        uint64_t misses
        uint64_t insertions
        uint64_t evictions

    cdef cppclass CResponseCache "pyserver::ResponseCache":
        CResponseCache(size_t capacity)
        shared_ptr[const string] Lookup(const CacheKey& key)
        bint Insert(const CacheKey& key, string response)
        ResponseCacheStats stats()
        size_t capacity()


cdef class ResponseCache:
    cdef unique_ptr[CResponseCache] c
