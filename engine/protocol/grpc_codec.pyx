# cython: language_level=3, boundscheck=False, wraparound=False
"""gRPC inference messages <-> core objects, over csrc's wire codec.

``decode_infer_request`` parses a serialized ``inference.ModelInferRequest``
in C++ (views, no copies) and builds the protocol-neutral ``InferRequest``:
tensors sent in ``raw_input_contents`` become read-only numpy arrays over the
message bytes. ``encode_infer_response`` writes a ``ModelInferResponse`` (or
a ``ModelStreamInferResponse``) straight from the output arrays' buffers into
one bytes object, gRPC's 5-byte message prefix included. Error texts follow
Triton's gRPC frontend (grpc/infer_handler.cc) and core.
"""
import functools

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport INT64_MAX, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from pyserver.engine.admission cimport Admission, Route
from pyserver.engine.batch_execution cimport DirectRoute
from pyserver.engine.plain_spec cimport PlainModel
from pyserver.engine.protocol.http2 cimport Stream
from pyserver.engine.protocol.plain_request cimport (
    PlainRequest,
    PlainRequestInput,
    PlainRequestOutput,
    ReadPlainRequest,
    wanted_names,
)
from pyserver.engine.status cimport check_status
from pyserver.engine.types cimport (
    DoneCallback,
    InferResponse,
    InferTensor,
    PlainPending,
    init_plain,
    new_output,
    new_request,
    new_tensor,
)

from pyserver.kernel.dtypes import serialize_bytes_tensor
from pyserver.engine.types import ImmediateFuture
from pyserver.kernel.errors import Code, ServerError, shape_too_large


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)


cdef extern from "numpy/arrayobject.h":
    ctypedef Py_ssize_t npy_intp
    ctypedef struct PyArray_Descr:
        pass
    ctypedef struct PyArrayObject:
        pass
    PyTypeObject PyArray_Type
    PyArray_Descr* PyArray_DescrFromType(int typenum)
    # Steals the reference to descr; returns a new reference.
    object PyArray_NewFromDescr(PyTypeObject* subtype, PyArray_Descr* descr, int nd,
                                npy_intp* dims, npy_intp* strides, void* data, int flags,
                                PyObject* obj)
    int PyArray_SetBaseObject(PyArrayObject* arr, PyObject* base) except -1
    int _import_array() except -1
    enum:
        NPY_BOOL
        NPY_INT8
        NPY_INT16
        NPY_INT32
        NPY_INT64
        NPY_UINT8
        NPY_UINT16
        NPY_UINT32
        NPY_UINT64
        NPY_FLOAT16
        NPY_FLOAT32
        NPY_FLOAT64
        NPY_ARRAY_ALIGNED


_import_array()

# wire datatype -> (numpy type number, element size); BYTES is handled apart.
cdef bint _raw_type(string_view dt, int* typenum, int* itemsize) noexcept:
    cdef const char* p = dt.data()
    cdef size_t n = dt.size()
    if n == 4 and memcmp(p, "FP32", 4) == 0:
        typenum[0] = NPY_FLOAT32; itemsize[0] = 4
    elif n == 5 and memcmp(p, "INT64", 5) == 0:
        typenum[0] = NPY_INT64; itemsize[0] = 8
    elif n == 5 and memcmp(p, "INT32", 5) == 0:
        typenum[0] = NPY_INT32; itemsize[0] = 4
    elif n == 4 and memcmp(p, "FP16", 4) == 0:
        typenum[0] = NPY_FLOAT16; itemsize[0] = 2
    elif n == 4 and memcmp(p, "FP64", 4) == 0:
        typenum[0] = NPY_FLOAT64; itemsize[0] = 8
    elif n == 5 and memcmp(p, "UINT8", 5) == 0:
        typenum[0] = NPY_UINT8; itemsize[0] = 1
    elif n == 4 and memcmp(p, "INT8", 4) == 0:
        typenum[0] = NPY_INT8; itemsize[0] = 1
    elif n == 4 and memcmp(p, "BOOL", 4) == 0:
        typenum[0] = NPY_BOOL; itemsize[0] = 1
    elif n == 5 and memcmp(p, "INT16", 5) == 0:
        typenum[0] = NPY_INT16; itemsize[0] = 2
    elif n == 6 and memcmp(p, "UINT16", 6) == 0:
        typenum[0] = NPY_UINT16; itemsize[0] = 2
    elif n == 6 and memcmp(p, "UINT32", 6) == 0:
        typenum[0] = NPY_UINT32; itemsize[0] = 4
    elif n == 6 and memcmp(p, "UINT64", 6) == 0:
        typenum[0] = NPY_UINT64; itemsize[0] = 8
    elif n == 4 and memcmp(p, "BF16", 4) == 0:
        typenum[0] = NPY_UINT16; itemsize[0] = 2  # bfloat16 words travel as uint16
    else:
        return False
    return True


cdef inline bint _is_bytes_type(string_view dt) noexcept:
    return dt.size() == 5 and memcmp(dt.data(), "BYTES", 5) == 0


cdef inline int64_t _element_size(string_view dt) noexcept:
    """Bytes per element in numpy (a BYTES element is an object pointer);
    1 for a datatype the caller refuses later."""
    cdef int typenum, itemsize
    if _is_bytes_type(dt):
        return sizeof(void*)
    return itemsize if _raw_type(dt, &typenum, &itemsize) else 1


cdef enum:
    MAX_DIMS = 32  # numpy allows 64; Triton's shapes are far smaller
    NOGIL_BYTES = 262144  # copy big responses with the GIL released

_RESERVED = "triton_enable_empty_final_response"


cdef inline str _str(string_view v):
    return PyUnicode_DecodeUTF8(v.data(), <Py_ssize_t>v.size(), NULL)


cdef inline str _rid(str request_id):
    return "[request id: " + (request_id or "<id_unknown>") + "] "


cdef inline object _bad(str message):
    return ServerError(Code.INVALID_ARG, message)


cdef object _value(const Parameter* p):
    if p.kind == ParamKind.kBool:
        return p.bool_value
    if p.kind == ParamKind.kInt64:
        return p.int64_value
    if p.kind == ParamKind.kString:
        return _str(p.string_value)
    if p.kind == ParamKind.kDouble:
        return p.double_value
    if p.kind == ParamKind.kUint64:
        return p.uint64_value
    return None


cdef dict _params(vector[Parameter]& params):
    cdef dict out = {}
    cdef size_t i
    for i in range(params.size()):
        out[_str(params[i].key)] = _value(&params[i])
    return out


cdef object _type_error(str key, str expected):
    return _bad(f"invalid value type for '{key}' parameter, expected {expected}.")


# ---------------------------------------------------------------- decoding


cdef object _bytes_elements(const char* base, size_t size, int64_t count, tuple shape,
                            str name, str model_name, str request_id):
    """BYTES raw contents: 4-byte little-endian length + bytes per element."""
    cdef size_t pos = 0
    cdef uint64_t n
    cdef int64_t got = 0
    cdef list out = []
    cdef unsigned int length
    while pos < size:
        if size - pos < 4:
            raise _bad(
                f"{_rid(request_id)}incomplete string length indicator for inference input "
                f"'{name}' for model '{model_name}', expecting 4 bytes but only "
                f"{size - pos} bytes available")
        memcpy(&length, base + pos, 4)
        pos += 4
        n = length
        if n > size - pos:
            raise _bad(
                f"{_rid(request_id)}element byte size indicator exceeds the end of the buffer "
                f"for inference input '{name}' for model '{model_name}'")
        out.append(PyBytes_FromStringAndSize(base + pos, <Py_ssize_t>n))
        pos += n
        got += 1
        if got > count:
            break
    if got < count:
        raise _bad(
            f"{_rid(request_id)}expected {count} string elements for inference input "
            f"'{name}' for model '{model_name}', got {got}")
    if got > count:
        raise _bad(
            f"{_rid(request_id)}unexpected number of string elements {count + 1} for inference "
            f"input '{name}' for model '{model_name}', expecting {count}")
    import numpy as np
    arr = np.empty(count, dtype=np.object_)
    arr[:] = out
    return arr.reshape(shape)


cdef object _raw_tensor(bytes msg, string_view raw, str name, string_view datatype,
                        vector[int64_t]& dims, str model_name, str request_id):
    """A read-only numpy view over msg for one raw_input_contents entry."""
    cdef npy_intp np_dims[MAX_DIMS]
    cdef int nd = <int>dims.size()
    cdef int i
    cdef int64_t count = 1, d
    cdef bint overflow = False
    cdef int typenum
    cdef int itemsize
    if nd > MAX_DIMS:
        raise _bad(f"{_rid(request_id)}input '{name}' for model '{model_name}' has {nd} "
                   f"dimensions, at most {MAX_DIMS} are supported")
    for i in range(nd):
        d = dims[i]
        if d < 0:
            raise _bad(
                f"{_rid(request_id)}unexpected shape for input '{name}' for model "
                f"'{model_name}': dimension {d} is negative")
        if d != 0 and count > INT64_MAX // d:
            overflow = True
        else:
            count *= d
        np_dims[i] = <npy_intp>d
    if _is_bytes_type(datatype):
        if overflow:
            raise _bad(f"{_rid(request_id)}input '{name}' for model '{model_name}': element "
                       "count exceeds the maximum size")
        return _bytes_elements(raw.data(), raw.size(), count,
                               tuple([np_dims[i] for i in range(nd)]), name, model_name,
                               request_id)
    if not _raw_type(datatype, &typenum, &itemsize):
        raise _bad(f"invalid datatype for input {name}")
    if overflow or count > <int64_t>(INT64_MAX // itemsize) or \
            <uint64_t>(count * itemsize) != <uint64_t>raw.size():
        expected = 1
        for i in range(nd):
            expected *= dims[i]
        raise _bad(
            f"{_rid(request_id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {expected * itemsize}, got {raw.size()}")
    # A view: the array keeps msg alive through its base. Flags: read-only,
    # aligned when the offset allows (numpy computes the contiguity flags).
    arr = PyArray_NewFromDescr(&PyArray_Type, PyArray_DescrFromType(typenum), nd, np_dims,
                               NULL, <void*>raw.data(),
                               NPY_ARRAY_ALIGNED if (<size_t>raw.data()) % itemsize == 0 else 0,
                               NULL)
    Py_INCREF(msg)
    PyArray_SetBaseObject(<PyArrayObject*>arr, <PyObject*>msg)  # steals the reference
    return arr


cdef int _check_allocatable(vector[int64_t]& dims, string_view datatype, str name,
                            str request_id) except -1:
    """Refuses a zero-element shape whose other dimensions no array can have
    ([0, 2^63-1]): numpy would fail to make even the empty array. Whatever
    carries the data (raw, typed contents, shared memory)."""
    cdef int64_t nonzero = 1, d
    cdef bint zero = False, too_large = False
    for d in dims:
        if d == 0:
            zero = True
        elif d > 0:
            if nonzero > INT64_MAX // d:
                too_large = True
            else:
                nonzero *= d
    if zero and (too_large or nonzero > INT64_MAX // _element_size(datatype)):
        raise _bad(_rid(request_id) + shape_too_large(name, _shape_list(dims)))
    return 0


cdef int _check_shm_params(dict params, str tensor) except -1:
    """An offset or size into shared memory names no region without one."""
    if "shared_memory_region" in params:
        return 0
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        if key in params:
            raise _bad(f"'{key}' can not be specified without 'shared_memory_region' "
                       f"parameter for tensor '{tensor}'")
    return 0


cdef int _check_classification(vector[Parameter]& params) except -1:
    """Triton's gRPC frontend takes 'classification' as an int64 above 0
    (grpc_utils.cc), refused before the request runs."""
    cdef size_t i
    for i in range(params.size()):
        if _str(params[i].key) == "classification":
            if params[i].kind != ParamKind.kInt64:
                raise _bad("invalid value type for 'classification' parameter, expected "
                           "int64_param")
            if params[i].int64_value <= 0:
                raise _bad("invalid value for 'classification' parameter, expected >= 0")
    return 0


cdef list _shape_list(vector[int64_t]& dims):
    cdef list out = []
    cdef size_t i
    for i in range(dims.size()):
        out.append(dims[i])
    return out


cdef int _parse(bytes msg, InferRequestView* view) except -1:
    """Parses ``msg`` into ``view`` (views into msg); raises Triton's error."""
    check_status(ParseModelInferRequest(<const uint8_t*>PyBytes_AS_STRING(msg),
                                        <size_t>PyBytes_GET_SIZE(msg), view))
    return 0


cdef tuple _decode(bytes msg, object contents_decoder):
    # See decode_infer_request.
    cdef InferRequestView view
    _parse(msg, &view)
    return _decode_parsed(msg, view, contents_decoder)


cdef tuple _decode_parsed(bytes msg, InferRequestView& view, object contents_decoder):
    """The request ``view`` (parsed from ``msg``) holds, as _decode gives it."""
    try:
        return _decode_view(msg, view, contents_decoder)
    except UnicodeDecodeError:  # any of its strings: names, ids, keys, values
        raise ServerError(Code.INVALID_ARG,
                          "ModelInferRequest has a string that is not UTF-8") from None


cdef tuple _decode_view(bytes msg, InferRequestView& view, object contents_decoder):
    cdef const Parameter* p
    cdef InputTensorView* t
    cdef size_t i, raw_index = 0, nraw
    model_name = _str(view.model_name)
    model_version = _str(view.model_version)
    request_id = _str(view.id)

    cdef dict params = {}
    cdef dict flags = None
    priority = 0
    timeout = 0
    for i in range(view.parameters.size()):
        p = &view.parameters[i]
        key = _str(p.key)
        if key == "sequence_id":
            if p.kind != ParamKind.kInt64 and p.kind != ParamKind.kString \
                    and p.kind != ParamKind.kUint64:
                raise _bad("invalid value type for 'sequence_id' parameter, expected "
                           "int64_param or string_param.")
            params[key] = _value(p)
        elif key == "sequence_start" or key == "sequence_end":
            if p.kind != ParamKind.kBool:
                raise _type_error(key, "bool_param")
            params[key] = p.bool_value
        elif key == "priority":
            if p.kind == ParamKind.kInt64:
                if p.int64_value < 0:
                    raise _bad("invalid value for 'priority', expected value >= 0.")
                priority = p.int64_value
            elif p.kind == ParamKind.kUint64:
                priority = p.uint64_value
            else:
                raise _type_error(key, "int64_param or uint64_param")
        elif key == "timeout":
            if p.kind != ParamKind.kInt64:
                raise _type_error(key, "int64_param")
            timeout = p.int64_value if p.int64_value > 0 else 0
        elif key.startswith("triton_"):
            if key != _RESERVED:
                raise _bad("parameter keys starting with 'triton_' are reserved for Triton "
                           "usage. Only the following keys starting with 'triton_' are "
                           f"allowed: {_RESERVED}")
            if p.kind != ParamKind.kBool:
                raise _type_error(key, "bool_param")
            if flags is None:
                flags = {}
            flags[key] = p.bool_value
        elif p.kind == ParamKind.kInt64 or p.kind == ParamKind.kBool \
                or p.kind == ParamKind.kString or p.kind == ParamKind.kDouble:
            params[key] = _value(p)  # a double as Triton takes it (tritonclient's floats)
        else:
            raise _type_error(key, "int64_param, bool_param, or string_param")

    cdef list inputs = []
    nraw = view.raw_input_contents.size()
    for i in range(view.inputs.size()):
        t = &view.inputs[i]
        name = _str(t.name)
        datatype = _str(t.datatype)
        shape = _shape_list(t.shape)
        _check_allocatable(t.shape, t.datatype, name, request_id)
        iparams = _params(t.parameters) if not t.parameters.empty() else None
        if iparams is not None:
            _check_shm_params(iparams, name)
        if iparams is not None and "shared_memory_region" in iparams:
            if t.has_contents:
                raise _bad(f"unexpected 'content' provided when using shared memory for input "
                           f"tensor '{name}' for model '{model_name}'")
            data = None  # read from the region by whoever resolves shared memory
            if flags is None:
                flags = {}
            flags["shared_memory"] = True
        elif t.has_contents:
            if nraw:
                raise _bad(f"contents field must not be specified when using "
                           f"raw_input_contents for '{name}' for model '{model_name}'")
            if contents_decoder is None:
                raise ServerError(Code.UNSUPPORTED, "typed tensor contents are not supported")
            data = contents_decoder(name, datatype, list(shape),
                                    PyBytes_FromStringAndSize(t.contents.data(),
                                                              <Py_ssize_t>t.contents.size()),
                                    model_name, request_id)
        elif raw_index < nraw:
            data = _raw_tensor(msg, view.raw_input_contents[raw_index], name, t.datatype,
                               t.shape, model_name, request_id)
            raw_index += 1
        else:
            raise _bad(f"unable to find data for input tensor '{name}' for model "
                       f"'{model_name}' in request.")
        inputs.append(new_tensor(name, datatype, shape, data, iparams))

    cdef list outputs = []
    for i in range(view.outputs.size()):
        if view.outputs[i].parameters.empty():
            oparams = None
        else:
            oparams = _params(view.outputs[i].parameters)
            _check_shm_params(oparams, _str(view.outputs[i].name))
            if "classification" in oparams:
                _check_classification(view.outputs[i].parameters)
            if "shared_memory_region" in oparams:
                if flags is None:
                    flags = {}
                flags["shared_memory"] = True
        outputs.append(new_output(_str(view.outputs[i].name), oparams))
    return (new_request(model_name, model_version, request_id, inputs, outputs, params,
                         priority, timeout), flags)


def decode_infer_request(bytes msg, contents_decoder=None):
    """Parses a serialized ModelInferRequest into ``(InferRequest, flags)``.

    ``flags`` is None, or a dict of the gRPC-only request parameters Triton
    reserves (``triton_enable_empty_final_response``), removed from the
    request, and ``"shared_memory": True`` when an input or output names a
    shared-memory region (such inputs have data None).
    ``contents_decoder(name, datatype, shape, contents_bytes, model_name,
    request_id)`` turns typed ``contents`` into an array (rare; protobuf's
    library is fine there). Raises ServerError with Triton's texts."""
    return _decode(msg, contents_decoder)


# ---------------------------------------------------------------- encoding


cdef string_view _sv(object s, list keep) except *:
    """A view of str/bytes s (kept alive in keep while the view is used)."""
    cdef Py_ssize_t n
    cdef const char* p
    if type(s) is str:
        p = PyUnicode_AsUTF8AndSize(s, &n)
    elif type(s) is bytes:
        p = PyBytes_AS_STRING(s)
        n = PyBytes_GET_SIZE(s)
    else:
        s = str(s)
        p = PyUnicode_AsUTF8AndSize(s, &n)
    keep.append(s)
    return string_view(p, <size_t>n)


cdef int _fill_params(dict params, vector[Parameter]* out, list keep) except -1:
    cdef Parameter blank
    cdef Parameter p
    for key, value in params.items():
        p = blank
        p.key = _sv(key, keep)
        if value is True or value is False:
            p.kind = ParamKind.kBool
            p.bool_value = value
        elif isinstance(value, int):
            if value > INT64_MAX:
                p.kind = ParamKind.kUint64
                p.uint64_value = value
            else:
                p.kind = ParamKind.kInt64
                p.int64_value = value
        elif isinstance(value, float):
            p.kind = ParamKind.kDouble
            p.double_value = value
        elif value is None:
            continue
        else:
            p.kind = ParamKind.kString
            p.string_value = _sv(value if isinstance(value, (str, bytes)) else str(value), keep)
        out.push_back(p)
    return 0


cdef int _raw_buffer(data, Py_buffer* buf, list keep) except -1:
    """``data``'s bytes in ``buf`` (a row-major copy where it has none to
    give), what holds them kept in ``keep``."""
    keep.append(data)
    try:
        PyObject_GetBuffer(data, buf, PyBUF_SIMPLE)
    except (BufferError, ValueError, TypeError):
        import numpy as np
        data = np.ascontiguousarray(data)
        keep.append(data)
        PyObject_GetBuffer(data, buf, PyBUF_SIMPLE)
    return 0


cdef int _fill_response(object response_, object request, InferResponseView* view,
                        list keep, vector[Py_buffer]* bufs) except -1:
    cdef OutputTensorView* o
    cdef Py_buffer buf
    cdef size_t i, n
    # the engine's types, read through their fields (no lookups by name)
    cdef InferResponse response = <InferResponse?>response_
    cdef InferTensor t
    view.model_name = _sv(response.model_name, keep)
    view.model_version = _sv(response.model_version, keep)
    rid = response.id
    if not rid and request is not None:
        rid = request.id
    if rid:
        view.id = _sv(rid, keep)
    if response.parameters:
        _fill_params(response.parameters, &view.parameters, keep)
    outputs = response.outputs
    n = len(outputs)
    view.outputs.resize(n)
    bufs.reserve(n)
    for i in range(n):
        t = <InferTensor?>outputs[i]
        o = &view.outputs[i]
        o.name = _sv(t.name, keep)
        datatype = t.datatype
        o.datatype = _sv(datatype, keep)
        for d in t.shape:
            o.shape.push_back(d)
        if t.parameters:
            _fill_params(t.parameters, &o.parameters, keep)
        data = t.data
        if data is None:
            continue
        if datatype == "BYTES":
            data = serialize_bytes_tensor(data)
        _raw_buffer(data, &buf, keep)
        bufs.push_back(buf)
        o.raw = <const uint8_t*>buf.buf
        o.raw_size = <size_t>buf.len
    return 0


cdef inline void _put_prefix(uint8_t* p, size_t n) noexcept nogil:
    p[0] = 0  # not compressed
    p[1] = <uint8_t>(n >> 24)
    p[2] = <uint8_t>(n >> 16)
    p[3] = <uint8_t>(n >> 8)
    p[4] = <uint8_t>n


cdef object _encode(object response, object request, bint stream, object error):
    cdef InferResponseView view
    cdef vector[Py_buffer] bufs
    cdef list keep = []
    cdef string_view err
    cdef bint has_infer = True
    try:
        if response is not None:
            _fill_response(response, request, &view, keep, &bufs)
        elif request is not None and request.id:
            view.id = _sv(request.id, keep)  # an in-stream error names its request
        else:
            has_infer = False
        if error is not None:
            err = _sv(error, keep)
        return _message(view, stream, err, has_infer)
    finally:
        for i in range(bufs.size()):
            PyBuffer_Release(&bufs[i])


cdef object _message(InferResponseView& view, bint stream, string_view err, bint has_infer):
    """The gRPC message (prefix included) of a filled response view."""
    cdef size_t size, infer_size = 0, total, head
    cdef uint8_t* p
    infer_size = ModelInferResponseSize(view)
    head = StreamResponsePrefixSize(err, infer_size, has_infer) if stream else 0
    size = head + infer_size
    if size > 0xFFFFFFFF:
        raise ServerError(Code.INTERNAL, f"response of {size} bytes exceeds gRPC's limit")
    total = 5 + size
    out = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>total)
    p = <uint8_t*>PyBytes_AS_STRING(out)
    _put_prefix(p, size)
    if stream:
        WriteStreamResponsePrefix(err, infer_size, has_infer, p + 5)
    if total >= NOGIL_BYTES:
        # Safe without the GIL: the views point into objects the caller
        # holds, and out is not shared yet.
        with nogil:
            WriteModelInferResponse(view, p + 5 + head)
    else:
        WriteModelInferResponse(view, p + 5 + head)
    return out


def encode_infer_response(response, request=None):
    """A gRPC message (5-byte prefix included) holding the ModelInferResponse
    for ``response`` (an InferResponse); raw_output_contents in output order."""
    return _encode(response, request, False, None)


def encode_stream_response(response, request=None, error=None):
    """A gRPC message holding a ModelStreamInferResponse: ``response``'s
    ModelInferResponse, or (response None) ``error`` as error_message with
    the request's id."""
    return _encode(response, request, True, error)


# ---------------------------------------------------------------- ModelInfer calls


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()  # the engine's clock, for a traced call's stamps


cdef class InferHandler:
    """ModelInfer's route handler for ``pyserver.engine.protocol.http2`` (a UNARY
    route): ``handler(stream, message)`` decodes the request, submits it and
    answers the stream from the future's done-callback, with no Python frame
    on the way. ``prepare`` is the decoding step alone, which ModelStreamInfer
    shares (the frontend submits its requests as streams).

    ``submit(InferRequest, future) -> Future`` (``Server.submit``, handed an
    ImmediateFuture so that the answer goes out as the batch completes); ``loop`` for
    deadlines; ``contents_decoder`` for typed contents; ``shm_resolver(request)
    -> use or None`` when the request names shared-memory regions (``use``
    has ``write(response)`` and ``release()``); ``on_error(stream, exc)``
    ends a call with an exception's status; ``on_deadline(stream, future)``
    when grpc-timeout passes first; ``header_forwarder(headers, parameters)``
    copies the call's forwarded headers into the request's parameters;
    ``tracer`` (the server's) takes the call's GRPC_WAITREAD and GRPC_SEND
    stamps while tracing is on; ``admission`` (``Server.admission``, or None:
    every call the general way): its ``route(model_name)`` is a plain call's
    model, run as it is read where the Route is runnable, else handed back
    to ``submit`` as its third argument; its ``enqueue_plain(route, record)``
    queues a plain call to a model whose Route has ``records`` as read
    (GrpcPending).
    """

    cdef object submit
    cdef object loop
    cdef object contents_decoder
    cdef object shm_resolver
    cdef object on_error
    cdef object on_deadline
    cdef object canceller
    cdef object header_forwarder
    cdef object tracer
    cdef Admission admission

    def __init__(self, submit, loop, *, contents_decoder=None, shm_resolver=None,
                 on_error, on_deadline, canceller=None, header_forwarder=None, tracer=None,
                 Admission admission=None):
        self.admission = admission
        self.tracer = tracer
        self.canceller = canceller
        self.header_forwarder = header_forwarder
        self.submit = submit
        self.loop = loop
        self.contents_decoder = contents_decoder
        self.shm_resolver = shm_resolver
        self.on_error = on_error
        self.on_deadline = on_deadline

    cpdef tuple prepare(self, stream, bytes msg):
        """The request a ModelInfer or ModelStreamInfer message carries, as
        both calls take it: ``(request, flags, use)``, decoded, the call's
        forwarded headers among its parameters, and ``use`` the
        shared-memory regions it names (None without), already resolved.
        Raises what the message gets wrong (nothing is held then)."""
        cdef InferRequestView view
        _parse(msg, &view)
        return self._prepare_parsed(stream, msg, view)

    cdef tuple _prepare_parsed(self, stream, bytes msg, InferRequestView& view):
        cdef tuple decoded = _decode_parsed(msg, view, self.contents_decoder)
        request = decoded[0]
        flags = decoded[1]
        if self.header_forwarder is not None:
            self.header_forwarder(stream.headers or (), request.parameters)
        use = None
        if flags is not None and "shared_memory" in flags:
            if self.shm_resolver is None:
                raise ServerError(Code.UNSUPPORTED, "shared memory is not supported here")
            use = self.shm_resolver(request)
        return request, flags, use

    def __call__(self, stream, bytes msg):
        cdef object use = None
        cdef tuple prepared
        cdef _InferDone done
        cdef InferRequestView view
        cdef Route route = None
        try:
            _parse(msg, &view)
            if self.admission is not None and view.model_version.empty():
                route = self.admission.route(_str(view.model_name))
                if route is not None and self._take_plain(stream, msg, view, route):
                    return
            prepared = self._prepare_parsed(stream, msg, view)
            request = prepared[0]
            use = prepared[2]
            tracer = self.tracer
            if tracer is not None and tracer.active:
                tracer.frontend_received(request, "GRPC_WAITREAD_START", stream.opened_ns,
                                         "GRPC_WAITREAD_END", NowNs())
            # answered as the request's batch completes, not an iteration later
            if route is None:
                fut = self.submit(request, ImmediateFuture())
            else:  # looked up once (Admission.route)
                fut = self.submit(request, ImmediateFuture(), route)
        except Exception as e:
            if use is not None:
                use.release()
            self.on_error(stream, e)
            return
        done = _InferDone.__new__(_InferDone)
        done.stream = stream
        done.request = request
        done.use = use
        done.on_error = self.on_error
        done.tracer = self.tracer
        done.handle = self._watch(stream, fut)
        fut.add_done_callback(done)

    cdef object _watch(self, stream, fut):
        """What ends a call before its answer, for the general path and a
        record alike: RST_STREAM cancels ``fut`` (with a canceller,
        Server.cancel, the request also leaves the model's queue if it has
        not started yet), and the call's deadline (grpc-timeout) ends it with
        DEADLINE_EXCEEDED (``on_deadline``). Returns the deadline's timer, or
        None, for the done-callback to cancel."""
        stream.cancel_callback = fut.cancel if self.canceller is None \
            else functools.partial(self.canceller, fut)
        timeout = stream.timeout
        if timeout is None:
            return None
        return self.loop.call_later(timeout, self.on_deadline, stream, fut)

    cdef bint _take_plain(self, Stream stream, bytes msg, InferRequestView& view,
                          Route route) except -1:
        """Runs and answers a plain request to a model that takes it as it
        is read (batch_execution.DirectRoute), or queues it as read where
        the model's Route has ``records`` (a GrpcPending, answered by
        _RecordDone); False, having taken nothing, where the general path
        must: anything but raw inputs of the model's fixed shapes, datatypes
        and sizes, outputs asked for by name alone (csrc ReadPlainRequest
        decides those), and no parameters (but the streaming flag Triton
        reserves), or forwarded headers for a record's model to see. A
        call's deadline (grpc-timeout) is kept as the general path keeps it:
        a run as read ends before it can pass; a record's call ends with
        DEADLINE_EXCEEDED and leaves the queue (``on_deadline``). Its
        errors are those the general path gives the same request: decoding's
        (the same calls), then the run's."""
        cdef uint64_t received = NowNs()
        cdef PlainModel m
        cdef InputTensorView* t
        cdef const PlainRequestInput* inp
        cdef PlainRequest plain  # the request against the model's rules (csrc ReadPlainRequest)
        cdef size_t i
        for i in range(view.parameters.size()):
            # perf_analyzer's: a streaming flag, nothing to a unary call
            if view.parameters[i].kind != ParamKind.kBool or \
                    _str(view.parameters[i].key) != _RESERVED:
                return False
        cdef DirectRoute direct = route.runnable()
        if direct is not None:
            m = direct
        elif route.records is not None:
            m = route.records
        else:
            return False
        if not ReadPlainRequest(view, m.spec.c.get()[0], m.input_itemsizes, &plain):
            return False
        request_id = _str(view.id)
        model_name = m.model_name
        cdef dict feed = {}
        names = m.input_names
        for i in range(plain.inputs.size()):  # as _decode_view reads them
            inp = &plain.inputs[i]
            t = &view.inputs[inp.source]
            name = names[inp.index]
            _check_allocatable(t.shape, t.datatype, name, request_id)
            feed[name] = _raw_tensor(msg, view.raw_input_contents[inp.source], name, t.datatype,
                                     t.shape, model_name, request_id)
        if direct is None:
            self._queue_record(stream, route, m, feed, plain, request_id)
            return True
        try:
            outputs = direct.run(feed, <uint32_t>plain.match.batch_size, received)
            payload = _encode_outputs(direct, request_id, plain.outputs, outputs, False)
        except Exception as e:
            self.on_error(stream, e)
            return True
        stream.respond(payload, True)
        return True

    cdef int _queue_record(self, Stream stream, Route route, PlainModel m, dict feed,
                           PlainRequest& plain, request_id) except -1:
        fut = ImmediateFuture()
        cdef GrpcPending p = GrpcPending.__new__(GrpcPending)
        init_plain(p, fut, feed, plain.match.batch_size, request_id,
                   wanted_names(m.output_names, plain))
        p.model = m
        p.outputs = plain.outputs
        self.admission.enqueue_plain(route, p)
        cdef _RecordDone done = _RecordDone.__new__(_RecordDone)
        done.stream = stream
        done.record = p
        done.on_error = self.on_error
        done.handle = self._watch(stream, fut)
        fut.add_done_callback(done)
        return 0


cdef class GrpcPending(PlainPending):
    """A plain record read from a ModelInfer call (InferHandler._take_plain):
    besides its model, the outputs its answer holds, in order."""

    cdef PlainModel model
    cdef vector[PlainRequestOutput] outputs


cdef class _RecordDone(DoneCallback):
    """A record's done-callback: its answer from its outputs (typed by
    their arrays, as RequestPath.response types them) onto its stream."""

    cdef Stream stream
    cdef GrpcPending record
    cdef object on_error
    cdef object handle  # the deadline's timer, if the call has one

    cdef int done(self, fut) except -1:
        cdef Stream stream = self.stream
        cdef GrpcPending p = self.record
        if self.handle is not None:
            self.handle.cancel()
        self.stream = self.record = self.handle = None
        if stream.closed or stream.finished:
            if not fut.cancelled():  # nobody reads it: marked seen
                fut.exception()
            return 0
        try:
            result = fut.result()
            payload = None
            if type(result) is dict:
                payload = _encode_outputs(p.model, p.request_id, p.outputs, result,
                                          p.model.typed_by_arrays)
                parameters = None
            else:
                result, parameters = result
            if payload is None:  # what the writer leaves to the general encoder
                payload = _encode(p.model.respond(p.request_id, p.wanted, result, parameters),
                                  None, False, None)
        except BaseException as e:
            self.on_error(stream, e)
            return 0
        stream.respond(payload, True)
        return 0


cdef object _encode_outputs(PlainModel m, request_id,
                            const vector[PlainRequestOutput]& wanted, dict outputs,
                            bint by_arrays):
    """The gRPC message answering a plain request: the ``wanted`` outputs
    (by index), typed as the model's config types them (a direct run's, a
    batch's rows: RequestPath.scatter); or (``by_arrays``) those its
    backend gave, None returned where one's array is not of its config's
    type (RequestPath.response types it by its array: the general
    encoder's). None too where an output is missing."""
    cdef InferResponseView view
    cdef vector[Py_buffer] bufs
    cdef list keep = []
    cdef OutputTensorView* o
    cdef Py_buffer buf
    cdef size_t i, n = wanted.size()
    cdef Py_ssize_t k
    cdef string_view err
    cdef const string* out_name
    names = m.output_names
    view.model_name = _sv(m.model_name, keep)
    view.model_version = _sv(m.version, keep)
    if request_id:
        view.id = _sv(request_id, keep)
    view.outputs.reserve(n)
    bufs.reserve(n)
    try:
        for i in range(n):
            k = wanted[i].index
            if by_arrays:
                value = outputs.get(names[k])
                if value is None:
                    continue
                dtype = m.output_dtypes[k]
                if dtype is None or getattr(value, "dtype", None) != dtype:
                    return None
            else:
                value = outputs.get(names[k])
                if value is None:
                    return None  # a direct run's are all there; a record's: the general way's
            view.outputs.resize(view.outputs.size() + 1)
            o = &view.outputs.back()
            out_name = m.spec.output_name(k)
            o.name = string_view(out_name.data(), out_name.size())
            o.datatype = string_view(m.output_datatypes[k].data(),
                                     m.output_datatypes[k].size())
            for d in value.shape:
                o.shape.push_back(d)
            _raw_buffer(value, &buf, keep)
            bufs.push_back(buf)
            o.raw = <const uint8_t*>buf.buf
            o.raw_size = <size_t>buf.len
        return _message(view, False, err, True)
    finally:
        for i in range(bufs.size()):
            PyBuffer_Release(&bufs[i])


cdef class _InferDone(DoneCallback):
    """A ModelInfer call's done-callback: encode the response, answer."""

    cdef object stream
    cdef object request
    cdef object use
    cdef object handle
    cdef object on_error
    cdef object tracer

    cdef int done(self, fut) except -1:
        cdef uint64_t sending = 0
        stream = self.stream
        use = self.use
        if self.handle is not None:
            self.handle.cancel()
        try:
            if stream.closed or stream.finished:
                # Nobody reads the outcome (the client reset the stream),
                # but asyncio logs an exception never retrieved: mark it seen.
                if not fut.cancelled():
                    fut.exception()
                return 0
            try:
                response = fut.result()
                if use is not None:
                    use.write(response)
                payload = _encode(response, self.request, False, None)
            except BaseException as e:
                self.on_error(stream, e)
                return 0
            request = self.request
            if request.trace is not None:  # traced: the send is timed
                sending = NowNs()
            stream.respond(payload, True)
        finally:
            if use is not None:
                use.release()
            request = self.request
            if request.trace is not None and self.tracer is not None:  # an error's too
                self.tracer.sent(request, "GRPC_SEND_START", sending or NowNs(),
                                 "GRPC_SEND_END", NowNs())
            self.stream = self.request = self.use = self.handle = None
        return 0
