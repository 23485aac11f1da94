# cython: language_level=3
"""The response cache (csrc's ResponseCache) and its request hash.

``request_key`` hashes a request's identity with XXH3-128, reading every
input buffer with the GIL released; the 16-byte key indexes the cache, whose
values are serialized responses (bytes), opaque at this level.
"""
from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint64_t
from libc.string cimport memcpy
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

cdef enum:
    COPY_WITHOUT_GIL_BYTES = 1 << 16  # copies this large release the GIL


cdef inline void _field(RequestHasher* h, bytes value):
    h.UpdateField(PyBytes_AS_STRING(value), <size_t>PyBytes_GET_SIZE(value))


cdef bytes _key_bytes(CacheKey key):
    cdef char raw[16]
    memcpy(raw, &key.low, 8)
    memcpy(raw + 8, &key.high, 8)
    return PyBytes_FromStringAndSize(raw, 16)


cdef CacheKey _key_of(bytes key) except *:
    cdef CacheKey k
    if PyBytes_GET_SIZE(key) != 16:
        raise ValueError("a response cache key is 16 bytes")
    memcpy(&k.low, PyBytes_AS_STRING(key), 8)
    memcpy(&k.high, PyBytes_AS_STRING(key) + 8, 8)
    return k


def request_key(bytes model, bytes version, list outputs, list inputs):
    """The cache key of a request: 16 bytes.

    ``outputs``: requested output names (bytes; empty for all), in request
    order. ``inputs``: ``(name, datatype, shape, data)`` per input, sorted by
    name by the caller, with ``data`` a C-contiguous buffer (numeric tensors)
    or bytes (serialized BYTES tensors)."""
    cdef RequestHasher h
    cdef vector[Py_buffer] bufs
    cdef Py_buffer b
    cdef size_t i
    _field(&h, model)
    _field(&h, version)
    h.UpdateU64(len(outputs))
    for name in outputs:
        _field(&h, name)
    h.UpdateU64(len(inputs))
    bufs.reserve(len(inputs))
    try:
        for name, datatype, shape, data in inputs:
            _field(&h, name)
            _field(&h, datatype)
            h.UpdateU64(len(shape))
            for d in shape:
                h.UpdateU64(<uint64_t>d)
            PyObject_GetBuffer(data, &b, PyBUF_ANY_CONTIGUOUS)
            bufs.push_back(b)
        # Safe without the GIL: each buffer is pinned by its Py_buffer export.
        with nogil:
            for i in range(bufs.size()):
                h.UpdateField(bufs[i].buf, <size_t>bufs[i].len)
        return _key_bytes(h.Digest())
    finally:
        for i in range(bufs.size()):
            PyBuffer_Release(&bufs[i])


cdef class ResponseCache:
    """An LRU cache of serialized responses bounded to ``capacity`` bytes."""

    def __cinit__(self, size_t capacity):
        self.c.reset(new CResponseCache(capacity))

    @property
    def capacity(self):
        return self.c.get().capacity()

    def lookup(self, bytes key):
        """The cached response bytes, or None."""
        cdef CacheKey k = _key_of(key)
        cdef shared_ptr[const string] value
        cdef bytes out
        cdef size_t n
        cdef char* dst
        value = self.c.get().Lookup(k)
        if not value:
            return None
        n = value.get().size()
        out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>n)
        dst = PyBytes_AS_STRING(out)
        if n >= COPY_WITHOUT_GIL_BYTES:
            with nogil:  # out is ours alone until returned; value is pinned by value
                memcpy(dst, value.get().data(), n)
        else:
            memcpy(dst, value.get().data(), n)
        return out

    def insert(self, bytes key, bytes response):
        """Stores response; False when it is larger than the whole cache."""
        cdef CacheKey k = _key_of(key)
        cdef string value
        cdef bint stored
        cdef size_t n = <size_t>PyBytes_GET_SIZE(response)
        cdef const char* src = PyBytes_AS_STRING(response)
        with nogil:  # response is immutable and referenced by the caller
            value.assign(src, n)
            stored = self.c.get().Insert(k, value)
        return stored

    def stats(self):
        cdef ResponseCacheStats s = self.c.get().stats()
        return {"capacity": s.capacity, "bytes": s.bytes, "entries": s.entries,
                "hits": s.hits, "misses": s.misses, "insertions": s.insertions,
                "evictions": s.evictions}
