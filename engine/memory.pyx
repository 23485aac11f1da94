# cython: language_level=3
"""Batch gathering: many request tensors into one contiguous batch tensor."""
from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libcpp.vector cimport vector


cdef extern from "pyserver/gather.h" namespace "pyserver" nogil:
    size_t GatherCopy(const void* const* sources, const size_t* sizes, size_t n, void* dst)


def gather(list sources, out):
    """Copies each contiguous buffer in ``sources`` back to back into ``out``
    (a writable contiguous buffer, e.g. a numpy array) with the GIL released.
    Returns the number of bytes written."""
    cdef Py_buffer dst
    cdef vector[Py_buffer] bufs
    cdef vector[const void*] ptrs
    cdef vector[size_t] sizes
    cdef Py_buffer b
    cdef size_t total = 0, written
    cdef Py_ssize_t i, n = len(sources)
    PyObject_GetBuffer(out, &dst, PyBUF_WRITABLE | PyBUF_ANY_CONTIGUOUS)
    bufs.reserve(n)
    try:
        for i in range(n):
            PyObject_GetBuffer(sources[i], &b, PyBUF_ANY_CONTIGUOUS)
            bufs.push_back(b)
            ptrs.push_back(b.buf)
            sizes.push_back(<size_t>b.len)
            total += <size_t>b.len
        if total > <size_t>dst.len:
            raise ValueError(f"gather needs {total} bytes, destination has {dst.len}")
        # Safe without the GIL: every buffer is pinned by its Py_buffer export.
        with nogil:
            written = GatherCopy(ptrs.data(), sizes.data(), <size_t>n, dst.buf)
        return written
    finally:
        for i in range(<Py_ssize_t>bufs.size()):
            PyBuffer_Release(&bufs[i])
        PyBuffer_Release(&dst)
