# cython: language_level=3
"""A Python-model worker's side of region_io: the requests an ``exec``
message names, built over the input region, and the answers of execute()
written into the output region (pyserver/backends/python/stub.py).

The worker runs this per request. Written in Python (``np.frombuffer`` and
``reshape`` per input, a slice of the mmap assigned per output) it was
about 10 µs of the worker per request beside add_sub's own 7 µs
(bench/README.md); here an input is a view made in C and an output one
``memcpy``.

The worker loads this file alone, as it loads ipc (channel._engine): it
imports nothing of pyserver.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.ref cimport Py_INCREF, PyObject
from libc.string cimport memcpy

cimport numpy as cnp
import numpy as np

cnp.import_array()


cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyTypeObject:
        pass
    PyTypeObject PyArray_Type
    # Steals a reference to ``descr``.
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.dtype descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, PyObject* obj)
    # Steals a reference to ``base``.
    int PyArray_SetBaseObject(cnp.ndarray arr, object base) except -1


cdef enum:
    ALIGN = 64  # as region_io: each tensor starts on its own cache line
    MAX_DIMS = 32  # numpy's own limit (NPY_MAXDIMS in 1.x)


cdef object _view(object owner, char* base, Py_ssize_t length, cnp.dtype dtype,
                  tuple shape, Py_ssize_t offset, Py_ssize_t count):
    """An array of ``count`` elements at ``offset`` of a region, viewed in
    place; ``owner`` (a memoryview of it) keeps the mapping alive."""
    cdef cnp.npy_intp dims[MAX_DIMS]
    cdef Py_ssize_t nd = len(shape), i, elements = 1
    if nd > MAX_DIMS:
        raise ValueError(f"an input has {nd} dimensions, more than {MAX_DIMS}")
    for i in range(nd):
        dims[i] = shape[i]
        elements *= dims[i]
    if elements != count or offset < 0 or offset + count * dtype.itemsize > length:
        raise ValueError(f"input of shape {shape} and {count} elements at offset {offset} "
                         f"does not fit the {length}-byte region")
    if count == 0:
        return np.empty(shape, dtype)
    Py_INCREF(dtype)
    array = PyArray_NewFromDescr(&PyArray_Type, dtype, <int>nd, dims, NULL, base + offset,
                                 cnp.NPY_ARRAY_CARRAY, NULL)
    Py_INCREF(owner)
    PyArray_SetBaseObject(array, owner)
    return array


def requests_in(list items, object mm, dict dtypes, bint copy, object wrap_tensor,
                object new_request, object model_name, object model_version):
    """The requests of one batch (an ``exec`` message's items), their inputs
    viewed in the input region ``mm`` (an mmap), or copied out of it where
    ``copy`` (a decoupled model may answer after the next batch reuses the
    region). BYTES inputs arrive as arrays already. ``dtypes``: type code
    -> numpy dtype; ``wrap_tensor(name, array, code)`` and
    ``new_request(index, id, correlation_id, flags, timeout, parameters,
    requested_outputs, tensors, model_name, model_version, key, trace)``
    make pb_utils' objects (Tensor._wrap, InferenceRequest._incoming)."""
    cdef list requests = []
    cdef list tensors
    cdef Py_ssize_t index = 0
    cdef Py_buffer region
    cdef char* base = NULL
    cdef Py_ssize_t length = 0
    owner = None
    for rid, corr, flags, timeout, params, wanted, inputs, key, trace in items:
        tensors = []
        for name, code, shape, offset, count, data in inputs:
            if data is None:
                if owner is None:  # once per message: a view of the region,
                    owner = memoryview(mm)  # which keeps its bytes where they are
                    PyObject_GetBuffer(owner, &region, PyBUF_SIMPLE)
                    base = <char*>region.buf
                    length = region.len
                    PyBuffer_Release(&region)
                data = _view(owner, base, length, dtypes[code], shape, offset, count)
                if copy:
                    data = data.copy()
            tensors.append(wrap_tensor(name, data, code))
        requests.append(new_request(index, rid, corr, flags, timeout, params, wanted, tensors,
                                    model_name, model_version, key, trace))
        index += 1
    return requests


cdef class _Writable:
    """The output region's bytes while answers are written; re-taken after
    the region grows (Region.ensure maps it anew)."""
    cdef object region
    cdef Py_buffer buf
    cdef bint held

    def __cinit__(self, region):
        self.region = region
        self.held = False

    cdef char* room(self, Py_ssize_t end) except NULL:
        """The region's first byte, with at least ``end`` bytes in it."""
        if self.held and end <= self.buf.len:
            return <char*>self.buf.buf
        self.release()
        self.region.ensure(end)
        PyObject_GetBuffer(self.region.mm, &self.buf, PyBUF_WRITABLE)
        self.held = True
        return <char*>self.buf.buf

    cdef void release(self) noexcept:
        if self.held:
            PyBuffer_Release(&self.buf)
            self.held = False

    def __dealloc__(self):
        self.release()


def responses_out(list responses, list requests, object region, Py_ssize_t offset,
                  int bytes_code, int reschedule_flags, tuple again, str missing,
                  object bytes_array):
    """execute()'s answers (checked: one per request) as the server reads
    them (region_io.read_results), their tensors copied into ``region`` (a
    channel.Region, grown as needed) from ``offset`` on, each aligned.
    Returns (the end of what was written, the answers): per request
    ``again`` (released to run again: its flags are ``reschedule_flags``),
    ``("err", code name, message)`` (``missing`` when there is no response
    at all), or ``("ok", [(name, code, shape, start, size, None)...],
    parameters)``; a BYTES output, pickled with the answer, is
    ``(name, bytes_code, shape, -1, 0, bytes_array(array))``. Outputs the
    request did not ask for are left out, as Triton prunes them."""
    cdef list encoded = []
    cdef list outputs
    cdef Py_ssize_t i, size, start
    cdef cnp.ndarray array
    cdef char* dst
    cdef _Writable out = _Writable(region)
    try:
        for i in range(len(requests)):
            request = requests[i]
            response = responses[i]
            if request._release_flags == reschedule_flags:
                encoded.append(again)
                continue
            if response is None and request._sender is not None:
                response = request._sender._response  # sent through the sender instead
            if response is None:
                encoded.append(("err", "INTERNAL", missing))
                continue
            error = response._error
            if error is not None:
                encoded.append(("err", error.code().name, error.message()))
                continue
            wanted = request._requested_output_names
            outputs = []
            for t in response._output_tensors:
                name = t._name
                if name not in wanted:
                    continue
                code = t._dtype
                value = t._array
                if code == bytes_code:
                    outputs.append((name, bytes_code, value.shape, -1, 0, bytes_array(value)))
                    continue
                array = value
                if not cnp.PyArray_IS_C_CONTIGUOUS(array):
                    array = np.ascontiguousarray(array)
                size = cnp.PyArray_NBYTES(array)
                start = (offset + ALIGN - 1) & ~(ALIGN - 1)
                if size:
                    dst = out.room(start + size)
                    memcpy(dst + start, cnp.PyArray_DATA(array), size)
                    offset = start + size
                outputs.append((name, code, (<object>array).shape, start, size, None))
            encoded.append(("ok", outputs, response._parameters_dict))
    finally:
        out.release()
    return offset, encoded
