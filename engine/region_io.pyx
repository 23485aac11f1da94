# cython: language_level=3
"""A batch's tensors into, and a worker's answers out of, the shared-memory
regions of a Python-backend worker (pyserver/backends/python), in C.

The event loop relays every request of a Python model this way, and the
same steps written in Python (an offset computed, a slice assigned, a view
made, reshaped and copied, per tensor) cost ~20-30 µs of its thread per
request on 2 cores: more than the worker took to run add_sub.
"""
from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy
from libcpp.string cimport string
from libcpp.vector cimport vector

cimport numpy as cnp

from pyserver.engine.ndarray cimport NDARRAY_MAX_DIMS, new_array
from pyserver.engine.types cimport InferRequest, PendingRequest, PlainPending, request_properties
from pyserver.engine.worker_wire cimport (
    WIRE_MAX_DIMS,
    WireReader,
    WireTensor,
    get_tensor,
    get_u32,
    put_str,
    put_tensor,
    put_u32,
    put_u64,
    wire_reader,
)

import json

import numpy as np

cnp.import_array()

cdef enum:
    ALIGN = 64  # each tensor starts on its own cache line


_U64_MAX = 0xFFFFFFFFFFFFFFFF


cdef inline Py_ssize_t _aligned(Py_ssize_t n) noexcept:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


cdef class _Placement:
    """Where each input array goes in a region (back to back from offset 0,
    each aligned), the arrays held until ``copy_into`` copies them all."""
    cdef list arrays  # keeps what ``sources`` point into
    cdef vector[const char*] sources
    cdef vector[Py_ssize_t] sizes
    cdef vector[Py_ssize_t] starts
    cdef Py_ssize_t end

    def __cinit__(self):
        self.arrays = []

    cdef Py_ssize_t place(self, object array) except -1:
        if not (cnp.PyArray_Check(array) and cnp.PyArray_IS_C_CONTIGUOUS(array)):
            array = np.ascontiguousarray(array)
        self.arrays.append(array)
        cdef Py_ssize_t size = cnp.PyArray_NBYTES(array)
        cdef Py_ssize_t start = _aligned(self.end)
        self.sources.push_back(<const char*>cnp.PyArray_DATA(array))
        self.sizes.push_back(size)
        self.starts.push_back(start)
        self.end = start + size
        return start

    cdef int copy_into(self, object region) except -1:
        cdef Py_buffer dst
        cdef Py_ssize_t i
        region.ensure(self.end)
        if not self.sources.size():
            return 0
        PyObject_GetBuffer(region.mm, &dst, PyBUF_WRITABLE)
        try:
            with nogil:
                for i in range(<Py_ssize_t>self.sources.size()):
                    if self.sizes[i]:
                        memcpy(<char*>dst.buf + self.starts[i], self.sources[i], self.sizes[i])
        finally:
            PyBuffer_Release(&dst)
        return 0


def pack_inputs(region, list arrays_per_request, dict codes, object code_of, int bytes_code):
    """Copies each request's input arrays (``arrays_per_request``: one dict
    name -> ndarray per request) into ``region`` (a channel.Region, grown
    as needed), back to back from offset 0, each 64-byte aligned. Returns,
    per request, the list of what the worker reads them by: ``(name, code,
    shape, offset, element count, None)``, or for BYTES (object arrays,
    which travel pickled) ``(name, bytes_code, shape, -1, 0, array)``.
    ``codes``: name -> type code; ``code_of(array)`` for an input not in it
    (a sequence control input)."""
    cdef _Placement placement = _Placement()
    cdef list out = []
    cdef list inputs
    cdef dict arrays
    for arrays in arrays_per_request:
        inputs = []
        for name, array in arrays.items():
            code = codes.get(name)
            if code is None:
                code = code_of(array)
            if array.dtype.hasobject:
                inputs.append((name, bytes_code, array.shape, -1, 0, array))
                continue
            inputs.append((name, code, array.shape, placement.place(array), array.size, None))
        out.append(inputs)
    placement.copy_into(region)
    return out


cdef tuple _item_fields(PendingRequest pending, object all_outputs, object state_outputs):
    """(id, correlation ID, flags, timeout, parameters as JSON, the outputs
    it wants, trace id (0: not traced)) of a request, for its worker."""
    cdef PlainPending plain
    if isinstance(pending, PlainPending):  # read straight into its entry: no InferRequest
        plain = <PlainPending>pending
        wanted = plain.wanted if plain.wanted is not None else all_outputs
        if state_outputs:
            wanted = [*wanted, *state_outputs]
        return (plain.request_id, 0, 0, 0, "{}", wanted, 0)
    cdef InferRequest req = <InferRequest?>pending.request
    correlation_id, flags, user = request_properties(req.parameters)
    params_json = json.dumps(user, separators=(",", ":")) if user else "{}"
    wanted = [o.name for o in req.outputs] if req.outputs else all_outputs
    if state_outputs:
        wanted = [*wanted, *state_outputs]
    trace = pending.trace
    return (req.id, correlation_id, flags, req.timeout_us, params_json, wanted,
            trace["id"] if trace is not None else 0)


cpdef tuple request_item(PendingRequest pending, object all_outputs, object inputs, object key,
                         object state_outputs=()):
    """What a worker needs of a pending request to build the
    InferenceRequest execute() gets (its tensors are ``inputs``, as
    pack_inputs described them): (id, correlation ID, flags, timeout,
    parameters as JSON, the outputs it wants, inputs, ``key``, trace id (0:
    not traced), which request.trace() carries to BLS calls)."""
    rid, corr, flags, timeout, params_json, wanted, trace = _item_fields(
        pending, all_outputs, state_outputs)
    return (rid, corr, flags, timeout, params_json, wanted, inputs, key, trace)


cdef bint _wire_fits(list requests, list fields):
    """Whether every request can travel in worker_wire's layout: numpy
    arrays for inputs, none of them BYTES, integer IDs and timeout, at most
    WIRE_MAX_DIMS dimensions."""
    cdef PendingRequest p
    cdef Py_ssize_t i
    for i in range(len(requests)):
        item = <tuple>fields[i]
        corr = item[1]
        timeout = item[3]
        if type(corr) is not int or not 0 <= corr <= _U64_MAX \
                or type(timeout) is not int or not 0 <= timeout <= _U64_MAX:
            return False
        p = <PendingRequest>requests[i]
        if type(p.id) is not int or type(item[6]) is not int:  # its queue id, its trace id
            return False
        for array in (<dict>p.arrays).values():
            if not cnp.PyArray_Check(array) or cnp.PyArray_ISOBJECT(array) \
                    or cnp.PyArray_NDIM(array) > WIRE_MAX_DIMS:
                return False
    return True


def pack_batches(region, list batches, dict codes, object code_of, int bytes_code,
                 object all_outputs, object state_outputs):
    """The "exec" message's groups for ``batches`` (lists of pending
    requests), their inputs packed into ``region``: per batch one bytes
    object in worker_wire's layout, or where a request cannot travel so, a
    list of request_item tuples (pack_inputs), keyed by queue id."""
    cdef list requests = [p for pending in batches for p in pending]
    cdef list fields = [_item_fields(p, all_outputs, state_outputs) for p in requests]
    cdef list groups = []
    cdef list group
    cdef Py_ssize_t i = 0
    cdef PendingRequest p
    if _wire_fits(requests, fields):
        return _pack_wire(region, batches, fields, codes, code_of)
    cdef list packed = pack_inputs(region, [(<PendingRequest>p).arrays for p in requests],
                                   codes, code_of, bytes_code)
    for pending in batches:
        group = []
        for p in pending:
            rid, corr, flags, timeout, params_json, wanted, trace = fields[i]
            group.append((rid, corr, flags, timeout, params_json, wanted, packed[i], p.id,
                          trace))
            i += 1
        groups.append(group)
    return groups


cdef list _pack_wire(region, list batches, list fields, dict codes, object code_of):
    cdef _Placement placement = _Placement()
    cdef string out
    cdef list groups = []
    cdef Py_ssize_t i = 0
    cdef PendingRequest p
    cdef dict arrays
    for pending in batches:
        out.clear()
        put_u32(out, <uint32_t>len(pending))
        for p in pending:
            rid, corr, flags, timeout, params_json, wanted, trace = fields[i]
            i += 1
            put_u64(out, p.id)
            put_u64(out, trace)
            put_u64(out, corr)
            put_u32(out, flags)
            put_u64(out, timeout)
            put_str(out, rid)
            put_str(out, params_json)
            put_u32(out, <uint32_t>len(wanted))
            for name in wanted:
                put_str(out, name)
            arrays = p.arrays
            put_u32(out, <uint32_t>len(arrays))
            for name, array in arrays.items():
                code = codes.get(name)
                if code is None:
                    code = code_of(array)
                put_tensor(out, name, code, cnp.PyArray_NDIM(array),
                           <const Py_ssize_t*>cnp.PyArray_DIMS(array), placement.place(array),
                           cnp.PyArray_SIZE(array))
        groups.append(PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size()))
    placement.copy_into(region)
    return groups


cdef object _copy_out(const char* base, Py_ssize_t length, object name, object dtype, int nd,
                      const int64_t* shape, Py_ssize_t offset, Py_ssize_t nbytes):
    """A fresh array of ``shape`` holding the ``nbytes`` at ``offset`` of a
    region (``length`` bytes at ``base``)."""
    if not cnp.PyArray_DescrCheck(dtype):
        dtype = np.dtype(dtype)
    cdef cnp.ndarray array = new_array(<cnp.dtype>dtype, nd, shape)
    if cnp.PyArray_NBYTES(array) != nbytes or offset < 0 or offset + nbytes > length:
        raise ValueError(f"output '{name}': {nbytes} bytes at {offset} do not fit its shape "
                         f"{tuple([shape[i] for i in range(nd)])} or the region")
    if nbytes:
        memcpy(cnp.PyArray_DATA(array), base + offset, nbytes)
    return array


def read_copies(mm, list tensors, dict dtypes):
    """name -> a fresh array for each ``(name, code, shape, offset, nbytes,
    data)`` of ``tensors`` that lies in ``mm`` (``data`` None; its dtype is
    ``dtypes[code]``); an entry that carries its ``data`` (BYTES) gives it
    as is."""
    cdef Py_buffer src
    cdef dict out = {}
    cdef int64_t dims[NDARRAY_MAX_DIMS]
    cdef Py_ssize_t nd, i
    PyObject_GetBuffer(mm, &src, 0)
    try:
        for name, code, shape, offset, nbytes, data in tensors:
            if data is None:
                nd = len(shape)
                if nd > NDARRAY_MAX_DIMS:
                    raise ValueError(f"output '{name}' has {nd} dimensions")
                for i in range(nd):
                    dims[i] = shape[i]
                data = _copy_out(<const char*>src.buf, src.len, name, dtypes[code], <int>nd,
                                 dims, offset, nbytes)
            out[name] = data
        return out
    finally:
        PyBuffer_Release(&src)


cpdef list read_results(mm, encoded, dict dtypes, object error_of, object again=None):
    """Each request's result from a worker's answer to one batch: the dict
    of its outputs, copied out of ``mm`` (see read_copies), or ``(outputs,
    parameters)`` when it set parameters, ``error_of(code name, message)``,
    ``again`` (released to run again), or None (answered through its
    stream). ``encoded``: bytes in worker_wire's layout (outputs only), or
    per request ``("ok", tensors, parameters)``, ``("err", code name,
    message)``, ``("again",)`` or None."""
    if type(encoded) is bytes:
        return _read_wire(mm, <bytes>encoded, dtypes)
    cdef list results = []
    for entry in encoded:
        if entry is None:
            results.append(None)
        elif entry[0] == "err":
            results.append(error_of(entry[1], entry[2]))
        elif entry[0] == "again":
            results.append(again)
        else:
            outputs = read_copies(mm, entry[1], dtypes)
            params = entry[2]
            results.append((outputs, params) if params else outputs)
    return results


cdef list _read_wire(mm, bytes encoded, dict dtypes):
    cdef WireReader r = wire_reader(encoded)
    cdef WireTensor t
    cdef Py_buffer src
    cdef list results = []
    cdef dict outputs
    cdef list names = []  # the previous request's output names (get_str_seen)
    cdef uint32_t count, noutputs, i, j
    PyObject_GetBuffer(mm, &src, 0)
    try:
        count = get_u32(&r)
        for i in range(count):
            noutputs = get_u32(&r)
            outputs = {}
            for j in range(noutputs):
                name = get_tensor(&r, &t, names, j)
                outputs[name] = _copy_out(<const char*>src.buf, src.len, name, dtypes[t.code],
                                          t.nd, t.dims, t.offset, t.count)
            results.append(outputs)
    finally:
        PyBuffer_Release(&src)
    return results
