# cython: language_level=3
"""The binary layout of a Python-model worker's common messages, shared by
the server's side (region_io.pyx) and the worker's (worker_io.pyx).

An ``exec`` message's batches and a ``result`` message's answers were
pickled tuples: per request about 20 objects built, pickled, unpickled and
taken apart again on the two busiest threads. Where every request of a
message is plain (no BYTES tensors, an integer correlation ID; for answers:
outputs only, no parameters, no error), they travel as one bytes object in
this layout instead, written and read in C; anything else keeps the tuples.

Numbers are native-endian (both processes run on one machine); a string is
its UTF-8 length (u32) and bytes. An ``exec`` message's group (one bytes
object per batch): u32 request count, then per request: u64 key, u64 trace
id, u64 correlation ID, u32 flags, u64 timeout, str id, str parameters
(JSON), u32 count and a str per requested output, u32 count and per input:
str name, u32 type code, u32 ndim, i64 per dim, i64 region offset, i64
element count. A ``result`` message's answers: u32 request count, then per
request u32 output count and per output: str name, u32 type code, u32
ndim, i64 per dim, i64 region offset, i64 byte size. The readers make a
str once per batch for a name every request repeats (get_str_seen).
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from libcpp.string cimport string


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL


cdef enum:
    WIRE_MAX_DIMS = 64  # numpy's own limit since 2.0


# -- writing ---------------------------------------------------------------------------

cdef inline void put_u32(string& out, uint32_t v) noexcept:
    out.append(<const char*>&v, sizeof(v))


cdef inline void put_u64(string& out, uint64_t v) noexcept:
    out.append(<const char*>&v, sizeof(v))


cdef inline void put_i64(string& out, int64_t v) noexcept:
    out.append(<const char*>&v, sizeof(v))


cdef inline int put_str(string& out, str s) except -1:
    cdef Py_ssize_t size
    cdef const char* data = PyUnicode_AsUTF8AndSize(s, &size)
    put_u32(out, <uint32_t>size)
    out.append(data, <size_t>size)
    return 0


cdef inline int put_bytes(string& out, bytes data) except -1:
    put_u32(out, <uint32_t>PyBytes_GET_SIZE(data))
    out.append(PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    return 0


# -- reading ---------------------------------------------------------------------------

cdef struct WireReader:
    const char* at
    const char* end


cdef inline WireReader wire_reader(bytes data) noexcept:
    cdef WireReader r
    r.at = PyBytes_AS_STRING(data)
    r.end = r.at + PyBytes_GET_SIZE(data)
    return r


cdef inline int _need(WireReader* r, size_t n) except -1:
    if <size_t>(r.end - r.at) < n:
        raise ValueError("a worker message ends early")
    return 0


cdef inline int _take(WireReader* r, void* out, size_t n) except -1:
    _need(r, n)
    memcpy(out, r.at, n)
    r.at += n
    return 0


cdef inline uint32_t get_u32(WireReader* r) except? 0xFFFFFFFF:
    cdef uint32_t v
    _take(r, &v, sizeof(v))
    return v


cdef inline uint64_t get_u64(WireReader* r) except? 0xFFFFFFFFFFFFFFFF:
    cdef uint64_t v
    _take(r, &v, sizeof(v))
    return v


cdef inline str get_str(WireReader* r, object same=None):
    """The next string; ``same`` itself where it is a str of those bytes (a
    batch's requests name the same inputs and outputs: no new object per
    request for a name the previous one had)."""
    cdef uint32_t size = get_u32(r)
    _need(r, size)
    cdef Py_ssize_t known
    cdef const char* utf8
    if type(same) is str:
        utf8 = PyUnicode_AsUTF8AndSize(same, &known)
        if known == size and memcmp(utf8, r.at, size) == 0:
            r.at += size
            return <str>same
    s = PyUnicode_DecodeUTF8(r.at, size, NULL)
    r.at += size
    return s


cdef inline str get_str_seen(WireReader* r, list seen, Py_ssize_t j):
    """get_str for a request's ``j``-th string of one kind (its inputs'
    names, say): ``seen`` holds the previous request's strings of that kind
    (its ``j``-th is offered as ``same``) and takes this one's in its place."""
    if seen is None:
        return get_str(r)
    s = get_str(r, seen[j] if j < len(seen) else None)
    if j < len(seen):
        seen[j] = s
    else:
        seen.append(s)
    return s


cdef inline bytes get_bytes(WireReader* r):
    cdef uint32_t size = get_u32(r)
    _need(r, size)
    data = PyBytes_FromStringAndSize(r.at, size)
    r.at += size
    return data


cdef struct WireTensor:
    uint32_t code
    int nd
    int64_t dims[WIRE_MAX_DIMS]
    int64_t offset  # in the region
    int64_t count   # elements (exec) or bytes (result)


cdef inline str get_tensor(WireReader* r, WireTensor* t, list seen=None, Py_ssize_t j=0):
    """A request's ``j``-th tensor's description into ``t``; its name
    (get_str_seen: ``seen``, the names of the previous request's tensors)."""
    name = get_str_seen(r, seen, j)
    t.code = get_u32(r)
    cdef uint32_t nd = get_u32(r)
    if nd > WIRE_MAX_DIMS:
        raise ValueError(f"a worker message names a tensor of {nd} dimensions")
    t.nd = <int>nd
    _take(r, t.dims, t.nd * sizeof(int64_t))
    _take(r, &t.offset, sizeof(int64_t))
    _take(r, &t.count, sizeof(int64_t))
    return name


cdef inline int put_tensor(string& out, str name, uint32_t code, int nd,
                           const Py_ssize_t* dims, int64_t offset, int64_t count) except -1:
    cdef int i
    put_str(out, name)
    put_u32(out, code)
    put_u32(out, <uint32_t>nd)
    for i in range(nd):
        put_i64(out, <int64_t>dims[i])
    put_i64(out, offset)
    put_i64(out, count)
    return 0
