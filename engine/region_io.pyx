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
from libc.string cimport memcpy
from libcpp.vector cimport vector

from pyserver.engine.types cimport InferRequest, PendingRequest, request_properties

import json

import numpy as np

cdef enum:
    ALIGN = 64  # each tensor starts on its own cache line


cdef inline Py_ssize_t _aligned(Py_ssize_t n) noexcept:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def pack_inputs(region, list arrays_per_request, dict codes, object code_of, int bytes_code):
    """Copies each request's input arrays (``arrays_per_request``: one dict
    name -> ndarray per request) into ``region`` (a channel.Region, grown
    as needed), back to back from offset 0, each 64-byte aligned. Returns,
    per request, the list of what the worker reads them by: ``(name, code,
    shape, offset, element count, None)``, or for BYTES (object arrays,
    which travel pickled) ``(name, bytes_code, shape, -1, 0, array)``.
    ``codes``: name -> type code; ``code_of(array)`` for an input not in it
    (a sequence control input)."""
    cdef vector[Py_buffer] bufs
    cdef vector[Py_ssize_t] starts
    cdef Py_buffer b
    cdef Py_buffer dst
    cdef Py_ssize_t end = 0, start, i
    cdef list out = []
    cdef list inputs
    cdef dict arrays
    try:
        for arrays in arrays_per_request:
            inputs = []
            for name, array in arrays.items():
                code = codes.get(name)
                if code is None:
                    code = code_of(array)
                if array.dtype.hasobject:
                    inputs.append((name, bytes_code, array.shape, -1, 0, array))
                    continue
                try:
                    PyObject_GetBuffer(array, &b, PyBUF_C_CONTIGUOUS)
                except (BufferError, ValueError):  # not in row-major order
                    PyObject_GetBuffer(np.ascontiguousarray(array), &b, PyBUF_C_CONTIGUOUS)
                bufs.push_back(b)
                start = _aligned(end)
                starts.push_back(start)
                end = start + b.len
                inputs.append((name, code, array.shape, start, array.size, None))
            out.append(inputs)
        region.ensure(end)
        if bufs.size():
            PyObject_GetBuffer(region.mm, &dst, PyBUF_WRITABLE)
            try:
                with nogil:
                    for i in range(<Py_ssize_t>bufs.size()):
                        if bufs[i].len:
                            memcpy(<char*>dst.buf + starts[i], bufs[i].buf, bufs[i].len)
            finally:
                PyBuffer_Release(&dst)
        return out
    finally:
        for i in range(<Py_ssize_t>bufs.size()):
            PyBuffer_Release(&bufs[i])


cpdef tuple request_item(PendingRequest pending, object all_outputs, object inputs, object key,
                         object state_outputs=()):
    """What a worker needs of a pending request to build the
    InferenceRequest execute() gets (its tensors are ``inputs``, as
    pack_inputs described them): (id, correlation ID, flags, timeout,
    parameters as JSON, the outputs it wants, inputs, ``key``, trace id (0:
    not traced), which request.trace() carries to BLS calls)."""
    cdef InferRequest req = <InferRequest?>pending.request
    correlation_id, flags, user = request_properties(req.parameters)
    params_json = json.dumps(user, separators=(",", ":")) if user else "{}"
    wanted = [o.name for o in req.outputs] if req.outputs else all_outputs
    if state_outputs:
        wanted = [*wanted, *state_outputs]
    trace = pending.trace
    return (req.id, correlation_id, flags, req.timeout_us, params_json, wanted, inputs, key,
            trace["id"] if trace is not None else 0)


def pack_batches(region, list batches, dict codes, object code_of, int bytes_code,
                 object all_outputs, object state_outputs):
    """The "exec" message's groups for ``batches`` (lists of pending
    requests): their inputs packed into ``region`` (pack_inputs) and one
    request_item per request, keyed by its queue id."""
    cdef list requests = [p for pending in batches for p in pending]
    cdef list packed = pack_inputs(region, [(<PendingRequest>p).arrays for p in requests],
                                   codes, code_of, bytes_code)
    cdef list groups = []
    cdef list group
    cdef Py_ssize_t i = 0
    cdef PendingRequest p
    for pending in batches:
        group = []
        for p in pending:
            group.append(request_item(p, all_outputs, packed[i], p.id, state_outputs))
            i += 1
        groups.append(group)
    return groups


def read_copies(mm, list tensors, dict dtypes):
    """name -> a fresh array for each ``(name, code, shape, offset, nbytes,
    data)`` of ``tensors`` that lies in ``mm`` (``data`` None; its dtype is
    ``dtypes[code]``); an entry that carries its ``data`` (BYTES) gives it
    as is."""
    cdef Py_buffer src
    cdef Py_buffer b
    cdef dict out = {}
    cdef Py_ssize_t offset, nbytes
    PyObject_GetBuffer(mm, &src, 0)
    try:
        for name, code, shape, offset, nbytes, data in tensors:
            if data is None:
                data = np.empty(shape, dtypes[code])
                PyObject_GetBuffer(data, &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)
                try:
                    if b.len != nbytes or offset < 0 or offset + nbytes > src.len:
                        raise ValueError(f"output '{name}': {nbytes} bytes at {offset} do not "
                                         f"fit its shape {tuple(shape)} or the region")
                    if nbytes:
                        memcpy(b.buf, <char*>src.buf + offset, nbytes)
                finally:
                    PyBuffer_Release(&b)
            out[name] = data
        return out
    finally:
        PyBuffer_Release(&src)


def read_results(mm, list encoded, dict dtypes, object error_of, object again=None):
    """Each request's result from a worker's answer to one batch (``encoded``:
    per request ``("ok", tensors, parameters)``, ``("err", code name,
    message)``, ``("again",)`` or None): the dict of its outputs, copied out
    of ``mm`` (see read_copies), or ``(outputs, parameters)`` when it set
    parameters, ``error_of(code name, message)``, ``again`` (released to run
    again), or None (answered through its stream)."""
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
