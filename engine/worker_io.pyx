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
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy
from libcpp.string cimport string

cimport numpy as cnp

from pyserver.engine.ndarray cimport (
    NDARRAY_MAX_DIMS,
    PyArray_NewFromDescr,
    PyArray_SetBaseObject,
    PyArray_Type,
)
from pyserver.engine.pb_objects cimport (
    InferenceResponse, RequestBase, Tensor, new_request, new_tensor,
)
from pyserver.engine.worker_wire cimport (
    WireReader,
    WireTensor,
    get_str,
    get_str_seen,
    get_tensor,
    get_u32,
    get_u64,
    put_tensor,
    put_u32,
    wire_reader,
)
import numpy as np

cnp.import_array()


cdef enum:
    ALIGN = 64  # as region_io: each tensor starts on its own cache line


cdef class _InputRegion:
    """The input region's bytes while a batch's requests are built: a view
    of the mmap, taken once per message, which keeps the mapping alive for
    every array made over it."""
    cdef object owner
    cdef char* base
    cdef Py_ssize_t length
    cdef object mm

    def __cinit__(self, mm):
        self.mm = mm

    cdef object view(self, cnp.dtype dtype, int nd, const int64_t* shape, Py_ssize_t offset,
                     Py_ssize_t count):
        """An array of ``count`` elements at ``offset``, viewed in place."""
        cdef cnp.npy_intp dims[NDARRAY_MAX_DIMS]
        cdef Py_buffer region
        cdef Py_ssize_t i, elements = 1
        if self.owner is None:
            self.owner = memoryview(self.mm)  # keeps the region's bytes where they are
            PyObject_GetBuffer(self.owner, &region, PyBUF_SIMPLE)
            self.base = <char*>region.buf
            self.length = region.len
            PyBuffer_Release(&region)
        if nd > NDARRAY_MAX_DIMS:
            raise ValueError(f"an input has {nd} dimensions, more than {NDARRAY_MAX_DIMS}")
        for i in range(nd):
            dims[i] = shape[i]
            elements *= dims[i]
        if elements != count or offset < 0 or offset + count * dtype.itemsize > self.length:
            raise ValueError(f"input of shape {tuple([shape[i] for i in range(nd)])} and "
                             f"{count} elements at offset {offset} does not fit the "
                             f"{self.length}-byte region")
        if count == 0:
            return np.empty(tuple([shape[i] for i in range(nd)]), dtype)
        Py_INCREF(dtype)
        array = PyArray_NewFromDescr(&PyArray_Type, dtype, nd, dims, NULL, self.base + offset,
                                     cnp.NPY_ARRAY_CARRAY, NULL)
        Py_INCREF(self.owner)
        PyArray_SetBaseObject(array, self.owner)
        return array


def requests_in(items, object mm, dict dtypes, bint copy, type request_class,
                object make_trace, object model_name, object model_version):
    """The requests of one batch (an ``exec`` message's group: bytes in
    worker_wire's layout, or a list of item tuples), their inputs viewed in
    the input region ``mm`` (an mmap), or copied out of it where ``copy`` (a
    decoupled model may answer after the next batch reuses the region).
    BYTES inputs arrive as arrays already. ``dtypes``: type code -> numpy
    dtype; the requests are of ``request_class`` (pb_utils.InferenceRequest),
    their inputs pb_utils.Tensor, a traced request's trace
    ``make_trace(trace_id)``."""
    cdef _InputRegion region = _InputRegion(mm)
    if type(items) is bytes:
        return _requests_from_wire(items, region, dtypes, copy, request_class, make_trace,
                                   model_name, model_version)
    cdef list requests = []
    cdef list tensors
    cdef Py_ssize_t index = 0, nd, i
    cdef int64_t dims[NDARRAY_MAX_DIMS]
    for rid, corr, flags, timeout, params, wanted, inputs, key, trace in items:
        tensors = []
        for name, code, shape, offset, count, data in inputs:
            if data is None:
                nd = len(shape)
                if nd > NDARRAY_MAX_DIMS:
                    raise ValueError(f"an input has {nd} dimensions, more than "
                                     f"{NDARRAY_MAX_DIMS}")
                for i in range(nd):
                    dims[i] = shape[i]
                data = region.view(dtypes[code], <int>nd, dims, offset, count)
                if copy:
                    data = data.copy()
            tensors.append(new_tensor(name, data, code))
        requests.append(new_request(request_class, index, rid, corr, flags, timeout, params,
                                    wanted, tensors, model_name, model_version, key,
                                    make_trace(trace) if trace else None))
        index += 1
    return requests


cdef list _requests_from_wire(bytes items, _InputRegion region, dict dtypes, bint copy,
                              type request_class, object make_trace, object model_name,
                              object model_version):
    cdef WireReader r = wire_reader(items)
    cdef list requests = []
    cdef list tensors
    cdef list wanted
    cdef list names = []  # the previous request's input names (get_str_seen)
    cdef list asked = []  # and the names of the outputs it asked for
    cdef WireTensor t
    cdef uint32_t count = get_u32(&r), index, n, j
    for index in range(count):
        key = get_u64(&r)
        trace = get_u64(&r)
        corr = get_u64(&r)
        flags = get_u32(&r)
        timeout = get_u64(&r)
        rid = get_str(&r)
        params = get_str(&r)
        n = get_u32(&r)
        wanted = [get_str_seen(&r, asked, j) for j in range(n)]
        n = get_u32(&r)
        tensors = []
        for j in range(n):
            name = get_tensor(&r, &t, names, j)
            data = region.view(dtypes[t.code], t.nd, t.dims, t.offset, t.count)
            if copy:
                data = data.copy()
            tensors.append(new_tensor(name, data, t.code))
        requests.append(new_request(request_class, index, rid, corr, flags, timeout, params,
                                    wanted, tensors, model_name, model_version, key,
                                    make_trace(trace) if trace else None))
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


cdef inline object _answer_of(RequestBase request, object response):
    """execute()'s response for ``request``, or the one it sent through its
    response sender instead (None: neither)."""
    if response is None and request._sender is not None:
        return request._sender._response
    return response


cdef Py_ssize_t _write_output(_Writable out, cnp.ndarray array, Py_ssize_t* offset) except -1:
    """Copies ``array`` (row-major) into the output region at the next
    aligned offset from ``offset[0]``, which moves past it; its start."""
    cdef Py_ssize_t size = cnp.PyArray_NBYTES(array)
    cdef Py_ssize_t start = (offset[0] + ALIGN - 1) & ~(ALIGN - 1)
    cdef char* dst
    if size:
        dst = out.room(start + size)
        memcpy(dst + start, cnp.PyArray_DATA(array), size)
        offset[0] = start + size
    return start


def answers_fit(responses, list requests, int reschedule_flags):
    """Whether execute()'s answer is plainly right: a list with one
    InferenceResponse per request, none released to run again and none
    sent through a response sender. False leaves the verdict, and every
    error text, to runner.check_responses."""
    if type(responses) is not list or len(<list>responses) != len(requests):
        return False
    cdef Py_ssize_t i
    cdef RequestBase request
    for i in range(len(requests)):
        request = <RequestBase?>requests[i]
        if request._sender is not None or request._release_flags == reschedule_flags \
                or not isinstance((<list>responses)[i], InferenceResponse):
            return False
    return True


cdef bint _all_plain(list responses, list requests, int bytes_code, int reschedule_flags):
    """Whether every answer is outputs only (numpy arrays, none BYTES; no
    error, no parameters, not released to run again): worker_wire's
    layout."""
    cdef Py_ssize_t i
    cdef RequestBase request
    cdef InferenceResponse response
    cdef Tensor t
    for i in range(len(requests)):
        request = <RequestBase?>requests[i]
        if request._release_flags == reschedule_flags:
            return False
        answer = _answer_of(request, responses[i])
        if answer is None:
            return False
        response = <InferenceResponse?>answer
        if response._error is not None or response._parameters_dict:
            return False
        for tensor in response._output_tensors:
            t = <Tensor?>tensor
            if t._dtype == bytes_code or not cnp.PyArray_Check(t._array):
                return False
    return True


def responses_out(list responses, list requests, object region, Py_ssize_t offset,
                  int bytes_code, int reschedule_flags, tuple again, str missing,
                  object bytes_array):
    """execute()'s answers (checked: one per request) as the server reads
    them (region_io.read_results), their tensors copied into ``region`` (a
    channel.Region, grown as needed) from ``offset`` on, each aligned.
    Returns (the end of what was written, the answers). Where every answer
    is outputs only, the answers are bytes in worker_wire's layout; else
    per request ``again`` (released to run again: its flags are
    ``reschedule_flags``), ``("err", code name, message)`` (``missing`` when
    there is no response at all), or ``("ok", [(name, code, shape, start,
    size, None)...], parameters)``, where a BYTES output, pickled with the
    answer, is ``(name, bytes_code, shape, -1, 0, bytes_array(array))``.
    Outputs the request did not ask for are left out, as Triton prunes
    them."""
    cdef _Writable out = _Writable(region)
    try:
        if _all_plain(responses, requests, bytes_code, reschedule_flags):
            return _responses_wire(responses, requests, out, offset)
        return _responses_tuples(responses, requests, out, offset, bytes_code,
                                 reschedule_flags, again, missing, bytes_array)
    finally:
        out.release()


cdef tuple _responses_wire(list responses, list requests, _Writable out, Py_ssize_t offset):
    cdef string wire
    cdef Py_ssize_t i, start
    cdef uint32_t count
    cdef size_t count_at
    cdef cnp.ndarray array
    cdef RequestBase request
    cdef InferenceResponse response
    cdef Tensor t
    put_u32(wire, <uint32_t>len(requests))
    for i in range(len(requests)):
        request = <RequestBase>requests[i]
        response = <InferenceResponse>_answer_of(request, responses[i])
        wanted = request._requested_output_names
        count_at = wire.size()
        put_u32(wire, 0)  # the output count, set below
        count = 0
        for tensor in response._output_tensors:
            t = <Tensor>tensor
            name = t._name
            if name not in wanted:
                continue
            array = t._array
            if not cnp.PyArray_IS_C_CONTIGUOUS(array):
                array = np.ascontiguousarray(array)
            start = _write_output(out, array, &offset)
            put_tensor(wire, name, t._dtype, cnp.PyArray_NDIM(array),
                       <const Py_ssize_t*>cnp.PyArray_DIMS(array), start,
                       cnp.PyArray_NBYTES(array))
            count += 1
        memcpy(&wire[count_at], &count, sizeof(count))
    return offset, PyBytes_FromStringAndSize(wire.data(), <Py_ssize_t>wire.size())


cdef tuple _responses_tuples(list responses, list requests, _Writable out, Py_ssize_t offset,
                             int bytes_code, int reschedule_flags, tuple again, str missing,
                             object bytes_array):
    cdef list encoded = []
    cdef list outputs
    cdef Py_ssize_t i, start
    cdef cnp.ndarray array
    for i in range(len(requests)):
        request = requests[i]
        if request._release_flags == reschedule_flags:
            encoded.append(again)
            continue
        response = _answer_of(request, responses[i])
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
            start = _write_output(out, array, &offset)
            outputs.append((name, code, (<object>array).shape, start,
                            cnp.PyArray_NBYTES(array), None))
        encoded.append(("ok", outputs, response._parameters_dict))
    return offset, encoded
