# cython: language_level=3
"""The common case of a KServe v2 HTTP infer request and its answer, in C.

Reading: ``read_plain`` builds the InferRequest for a JSON header with
numeric tensors in "data" or in the binary tensor extension, outputs asking
at most for ``binary_data``, and no request parameters but
``binary_data_output``, from what csrc's InferRequestReader (simdjson) read:
numbers are written straight into the input arrays, and no Python object is
made per JSON value. Writing: ``json_answer`` writes the whole 200 answer
with csrc's json_writer (the general path's bytes, byte for byte) with no
dict, list or number objects made for it.

Both only say yes: anything else (an error, BYTES or BF16, shared memory,
classification, sequence or priority parameters, nesting, parameters on an
output) returns None, and pyserver.engine.protocol.http_codec, the one authority
for every rule and error text, does the work. ``http_message`` frames an
answer; ``binary_entry``, ``data_entry`` and ``document`` are the general
encoder's steps that build no more Python objects than they must.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_CheckExact
from cpython.list cimport PyList_GET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.batch_execution cimport DirectRoute
from pyserver.engine.plain_spec cimport PlainModel
from pyserver.engine.protocol.plain_request cimport (
    Asked,
    PlaceInput,
    PlainRequest,
    PlainRequestInput,
    PlainRequestOutput,
    ReadPlainRequest,
    wanted_names,
)
from pyserver.engine.ndarray cimport PyArray_NewFromDescr, PyArray_Type
from pyserver.engine.protocol.infer_request_reader cimport (
    InferRequestReader,
    ParamsState,
    RequestInput,
    RequestOutput,
    ThreadInferRequestReader,
)
from pyserver.engine.protocol.json_writer cimport (
    AppendArray,
    AppendInt,
    AppendJsonString,
    ElementKind,
    string_view,
)

cimport numpy as cnp
import numpy as np

from pyserver.engine.types cimport (
    InferRequest,
    InferResponse,
    InferTensor,
    PlainPending,
    RequestedOutput,
    init_plain,
    new_output,
    new_request,
    new_response,
    new_tensor,
)

cnp.import_array()



cdef object _ndarray = np.ndarray
cdef object _empty = np.empty
cdef object _array = np.array
cdef Py_ssize_t _INT64_MAX = 0x7FFFFFFFFFFFFFFF


cpdef list http_message(bytes status_line, headers, body, bint keep_alive, bint http10):
    """A response as written: the status line, ``headers`` ((name, value)
    byte pairs), Content-Length, Connection when it is not the default,
    then ``body`` (bytes, or a list of buffers). One bytes object when the
    body is bytes under 64 KiB."""
    cdef Py_ssize_t length = 0
    cdef list parts
    if type(body) is list:
        for b in <list>body:
            length += len(b)
    else:
        length = len(body)
    if headers:
        parts = [status_line]
        for k, v in headers:
            parts.append(k)
            parts.append(b": ")
            parts.append(v)
            parts.append(b"\r\n")
        parts.append(b"Content-Length: %d\r\n" % length)
    else:
        parts = [status_line, b"Content-Length: %d\r\n" % length]
    if not keep_alive:
        parts.append(b"Connection: close\r\n")
    elif http10:
        parts.append(b"Connection: keep-alive\r\n")
    parts.append(b"\r\n")
    if type(body) is list:
        return [b"".join(parts), *(<list>body)]
    if length < 65536:
        parts.append(body)
        return [b"".join(parts)]
    return [b"".join(parts), body]


cdef dict _requested_params(InferRequest req):
    """Each requested output's parameters by name (None: no outputs named)."""
    if not req.outputs:
        return None
    cdef RequestedOutput o
    cdef dict named = {}
    for item in req.outputs:
        o = <RequestedOutput?>item  # its fields, not lookups by name
        named[o.name] = o.parameters
    return named


cdef bint _is_binary(dict out_params, name, bint default_binary) except -1:
    """Whether output ``name`` goes as binary data: its own binary_data
    when the request named it (with parameters), else binary_data_output."""
    if out_params is None:
        return default_binary
    p = out_params.get(name)
    return p.get("binary_data") is True if p is not None else default_binary


cpdef list binary_entry(list outputs_json, list buffers, InferTensor t, datatype, raw):
    """Adds an output sent as binary data (``raw``: its bytes) to the
    response's output list; returns the response's buffers (the JSON first,
    then each non-empty output's bytes), made on the first one."""
    size = len(raw) if type(raw) is bytes else raw.nbytes
    if t.parameters:
        oparams = dict(t.parameters)
        oparams["binary_data_size"] = size
    else:
        oparams = {"binary_data_size": size}
    outputs_json.append({"name": t.name, "datatype": datatype, "shape": t.shape,
                         "parameters": oparams})
    if size:
        if buffers is None:
            return [None, raw]
        buffers.append(raw)
    return buffers


cpdef data_entry(list outputs_json, InferTensor t, datatype, data):
    """Adds an output sent as JSON ``data`` to the response's output list."""
    if t.parameters:
        outputs_json.append({"name": t.name, "datatype": datatype, "shape": t.shape,
                             "parameters": t.parameters, "data": data})
    else:
        outputs_json.append({"name": t.name, "datatype": datatype, "shape": t.shape,
                             "data": data})


cpdef tuple document(response, InferRequest request, list outputs_json, list buffers, dumps,
                     option, json_headers):
    """The response body and its headers around its output list."""
    cdef dict doc = {}
    rid = response.id or request.id
    if rid:
        doc["id"] = rid
    doc["model_name"] = response.model_name
    doc["model_version"] = str(response.model_version)
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = outputs_json
    js = dumps(doc, option=option)
    if buffers is None:
        return json_headers, js
    buffers[0] = js
    return [(b"Content-Type", b"application/octet-stream"),
            (b"Inference-Header-Content-Length", b"%d" % len(js))], buffers


cdef int _element_kind(const char* fmt, Py_ssize_t itemsize) noexcept:
    """The json_writer kind of a buffer's elements (its struct format, native
    order only), or -1."""
    if fmt == NULL or fmt[0] == 0 or fmt[1] != 0:
        return -1  # absent, or with a byte-order prefix or a structure
    cdef char c = fmt[0]
    if c == b'?':
        return <int>ElementKind.kBool
    if c == b'f' and itemsize == 4:
        return <int>ElementKind.kFloat32
    if c == b'd' and itemsize == 8:
        return <int>ElementKind.kFloat64
    if c == b'b' or c == b'h' or c == b'i' or c == b'l' or c == b'q':
        return _by_size(itemsize, ElementKind.kInt8, ElementKind.kInt16, ElementKind.kInt32,
                        ElementKind.kInt64)
    if c == b'B' or c == b'H' or c == b'I' or c == b'L' or c == b'Q':
        return _by_size(itemsize, ElementKind.kUint8, ElementKind.kUint16, ElementKind.kUint32,
                        ElementKind.kUint64)
    return -1  # float16, long double, complex, objects, ...


cdef inline int _by_size(Py_ssize_t itemsize, ElementKind k1, ElementKind k2, ElementKind k4,
                         ElementKind k8) noexcept:
    """The integer kind of ``itemsize`` bytes, or -1."""
    if itemsize == 1:
        return <int>k1
    if itemsize == 2:
        return <int>k2
    if itemsize == 4:
        return <int>k4
    if itemsize == 8:
        return <int>k8
    return -1


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL


cdef bint _append_str(obj, string* out) except -1:
    """``obj`` as a JSON string; False when it is not a str or has no UTF-8
    (lone surrogates: orjson refuses them, the caller's path says so)."""
    if type(obj) is not str:
        return False
    cdef Py_ssize_t n
    cdef const char* utf8
    try:
        utf8 = PyUnicode_AsUTF8AndSize(obj, &n)  # the str's own bytes when ASCII
    except UnicodeEncodeError:
        return False
    AppendJsonString(string_view(utf8, n), out)
    return True


cdef inline void _append_bytes(bytes b, string* out) noexcept:
    out.append(PyBytes_AS_STRING(b), <size_t>PyBytes_GET_SIZE(b))


cdef bint _append_tensor(InferTensor t, bint binary, string* out, list raws) except -1:
    """One output as ``{"name":..,"datatype":..,"shape":[..],"data":[..]}``,
    or with ``binary`` as ``{.., "parameters":{"binary_data_size":N}}`` with
    its array added to ``raws`` (when it has bytes); False when it is not
    plain numeric data (or not what the general encoder would write without
    parameters)."""
    if t.parameters or type(t.shape) is not list:
        return False
    return _append_array(t.name, t.datatype, t.shape, t.data, binary, out, raws)


# the datatype of an array of each json_writer ElementKind (typed by its array)
cdef tuple _KIND_DATATYPES = ("BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                              "UINT32", "UINT64", "FP32", "FP64")


cdef bint _append_array(name, datatype, shape, arr, bint binary, string* out,
                        list raws) except -1:
    """_append_tensor's output from its parts (``shape``: a list or tuple;
    ``datatype`` None: its array's, as RequestPath.response types it)."""
    if type(arr) is not _ndarray or datatype == "BYTES" or datatype == "BF16":
        return False
    cdef Py_buffer view
    try:
        PyObject_GetBuffer(arr, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except (BufferError, ValueError):
        return False  # not row-major, or no buffer
    cdef int kind, overflow
    cdef long long n
    try:
        kind = _element_kind(view.format, view.itemsize)
        if view.ndim == 0 or (kind < 0 and not (binary and _is_half(view.format))):
            return False
        if datatype is None:
            datatype = _KIND_DATATYPES[kind] if kind >= 0 else "FP16"
        out.append(b'{"name":')
        if not _append_str(name, out):
            return False
        out.append(b',"datatype":')
        if not _append_str(datatype, out):
            return False
        out.append(b',"shape":[')
        first = True
        for dim in shape:
            if type(dim) is not int:
                return False
            if not first:
                out.push_back(b',')
            first = False
            n = PyLong_AsLongLongAndOverflow(dim, &overflow)
            if overflow:
                return False
            AppendInt(n, out)
        if binary:
            out.append(b'],"parameters":{"binary_data_size":')
            AppendInt(<long long>view.len, out)
            out.append(b'}}')
            if view.len:
                raws.append(arr)
            return True
        out.append(b'],"data":')
        if not AppendArray(<ElementKind>kind, view.buf, <size_t>(view.len // view.itemsize), out):
            return False  # NaN or an infinity: orjson's null
        out.push_back(b'}')
        return True
    finally:
        PyBuffer_Release(&view)


cdef inline bint _is_half(const char* fmt) noexcept:
    return fmt != NULL and fmt[0] == b'e' and fmt[1] == 0


cdef bint _append_head(request_id, model_name, version, string* out) except -1:
    """An answer's document up to its output list: id (when there is one),
    model_name, model_version, then ``"outputs":[``; False where a string
    is not one json_writer writes."""
    if request_id:
        out.append(b'{"id":')
        if not _append_str(request_id, out):
            return False
        out.append(b',"model_name":')
    else:
        out.append(b'{"model_name":')
    if not _append_str(model_name, out):
        return False
    out.append(b',"model_version":')
    if not _append_str(version, out):
        return False
    out.append(b',"outputs":[')
    return True


cpdef list json_answer(response, InferRequest request, json_headers, bint keep_alive,
                       bint http10):
    """The whole 200 answer to a request whose outputs are numeric arrays
    and that sets no parameters but binary_data(_output): what
    http_message(encode_infer_response(...)) puts on the wire, byte for byte, as one
    bytes object, followed by the binary outputs' bytes (views) when some
    go as binary data; written by csrc's json_writer. Else None."""
    if type(response) is not InferResponse:
        return None
    cdef InferResponse r = <InferResponse>response
    if r.parameters:
        return None
    cdef bint default_binary = request.parameters.get("binary_data_output") is True
    cdef dict out_params = _requested_params(request)
    cdef string body
    body.reserve(512)
    version = r.model_version
    if not _append_head(r.id or request.id, r.model_name,
                        version if type(version) is str else str(version), &body):
        return None
    cdef list raws = []
    cdef bint binary
    first = True
    for item in r.outputs:
        if type(item) is not InferTensor:
            return None
        binary = _is_binary(out_params, (<InferTensor>item).name, default_binary)
        if not first:
            body.push_back(b',')
        first = False
        if not _append_tensor(<InferTensor>item, binary, &body, raws):
            return None
    body.append(b']}')
    return _framed(body, raws, json_headers, keep_alive, http10)


cdef list _framed(string& body, list raws, json_headers, bint keep_alive, bint http10):
    """The 200 answer around a JSON body written by json_writer and its
    binary outputs (``raws``, arrays)."""
    cdef Py_ssize_t raw_size = 0
    for raw in raws:
        raw_size += raw.nbytes
    cdef Py_ssize_t length = <Py_ssize_t>body.size() + raw_size
    cdef string head
    head.append(b"HTTP/1.1 200 OK\r\n")
    if raws:  # as the general encoder: binary outputs of no bytes leave a JSON answer
        head.append(b"Content-Type: application/octet-stream\r\n"
                    b"Inference-Header-Content-Length: ")
        AppendInt(<long long>body.size(), &head)
        head.append(b"\r\n")
    else:
        for k, v in json_headers:
            _append_bytes(k, &head)
            head.append(b": ")
            _append_bytes(v, &head)
            head.append(b"\r\n")
    head.append(b"Content-Length: ")
    AppendInt(<long long>length, &head)
    head.append(b"\r\n")
    if not keep_alive:
        head.append(b"Connection: close\r\n")
    elif http10:
        head.append(b"Connection: keep-alive\r\n")
    head.append(b"\r\n")
    # Small outputs are copied in (as http_message does a small body): one
    # write, no views; larger ones follow as views of their arrays.
    cdef bint inline_raws = raw_size < 65536
    cdef Py_ssize_t size = <Py_ssize_t>(head.size() + body.size())
    cdef bytes answer = PyBytes_FromStringAndSize(NULL, size + raw_size if inline_raws else size)
    cdef char* dst = PyBytes_AS_STRING(answer)
    memcpy(dst, head.data(), head.size())
    memcpy(dst + head.size(), body.data(), body.size())
    if not raws:
        return [answer]
    cdef Py_buffer view
    if inline_raws:
        dst += size
        for raw in raws:
            PyObject_GetBuffer(raw, &view, PyBUF_C_CONTIGUOUS)
            memcpy(dst, view.buf, view.len)
            dst += view.len
            PyBuffer_Release(&view)
        return [answer]
    return [answer, *[memoryview(raw).cast("B") for raw in raws]]


cdef inline str _text(string_view v):
    return v.data()[:v.size()].decode("utf-8")


# What a direct run that declined left in this thread's reader, for the
# general decoder that takes the request next (direct_answer's answer when it
# declines): nothing read, the request's header read, or the reader declined it.
NOT_READ = 0
HEADER_READ = 1
READER_DECLINED = 2


def read_plain(model_name, model_version, body, Py_ssize_t hlen, Py_ssize_t max_input_size,
               dict wire_to_numpy, int held=NOT_READ):
    """The InferRequest the general decoder (http_codec.decode_infer_request)
    makes of the same request, read without building the JSON document in
    Python; None when the reader declines (then orjson and the general walk
    take it, and say what is wrong). ``held``: HEADER_READ when this
    thread's reader has just read this very body's header (a declined
    direct run), which is then not read again."""
    cdef Py_buffer src
    cdef InferRequestReader* reader = &ThreadInferRequestReader()
    PyObject_GetBuffer(body, &src, 0)
    try:
        return _build_plain(model_name, model_version, body, &src, hlen, max_input_size,
                            wire_to_numpy, reader, held != HEADER_READ)
    finally:
        PyBuffer_Release(&src)


cdef enum:
    _MAX_DIMS = 32  # numpy's own limit (1.x); more: the general path's error


cdef object _view(body, char* data, const vector[int64_t]& shape, dtype):
    """What np.ndarray(shape, dtype, body, offset) gives (a read-only,
    row-major view of ``body``'s bytes at ``data``, based on ``body``),
    made through numpy's C API: the Python constructor costs ~5k
    instructions per input."""
    cdef cnp.npy_intp dims[_MAX_DIMS]
    cdef int nd = <int>shape.size()
    for j in range(nd):
        dims[j] = <cnp.npy_intp>shape[j]
    Py_INCREF(dtype)  # the descriptor reference is stolen
    arr = PyArray_NewFromDescr(&PyArray_Type, <cnp.dtype>dtype, nd, dims, NULL, <void*>data,
                               cnp.NPY_ARRAY_C_CONTIGUOUS, NULL)
    cnp.PyArray_CLEARFLAGS(<cnp.ndarray>arr, cnp.NPY_ARRAY_WRITEABLE)
    cnp.set_array_base(<cnp.ndarray>arr, body)
    return arr


cdef object _new_array(const vector[int64_t]& shape, dtype):
    """np.empty(shape, dtype), through numpy's C API."""
    cdef cnp.npy_intp dims[_MAX_DIMS]
    cdef int nd = <int>shape.size()
    for j in range(nd):
        dims[j] = <cnp.npy_intp>shape[j]
    Py_INCREF(dtype)
    return PyArray_NewFromDescr(&PyArray_Type, <cnp.dtype>dtype, nd, dims, NULL, NULL, 0, NULL)


cdef object _binary_input(body, Py_buffer* src, const vector[int64_t]& shape, npdt,
                          Py_ssize_t offset):
    """An input's array over its binary data at ``offset`` in the body."""
    if type(body) is bytes:  # immutable: a view based on it stays valid
        return _view(body, <char*>src.buf + offset, shape, npdt)
    # numpy's own view (writable for a bytearray), as the general path's
    return _ndarray(list(shape), npdt, body, offset)


cdef object _json_input(InferRequestReader* reader, size_t i, ElementKind kind, size_t count,
                        npdt):
    """Input ``i``'s JSON "data" filled into a new array; None where the
    reader's common case ends."""
    data = _new_array(reader.inputs()[i].shape, npdt)
    if not reader.FillData(i, kind, cnp.PyArray_DATA(<cnp.ndarray>data), count):
        return None
    return data


cdef object _input_data(body, Py_buffer* src, InferRequestReader* reader, Py_ssize_t i,
                        Py_ssize_t count, npdt, size_t* offset, Py_ssize_t max_input_size):
    """Input ``i``'s array (``count`` elements of ``npdt``): a view of its
    binary data at ``*offset`` in the body (moved past it), or its JSON
    "data" filled in, placed as the plain case places them (csrc
    PlaceInput); None where the reader's common case ends."""
    cdef const RequestInput* inp = &reader.inputs()[i]
    cdef PlainRequestInput read
    if not PlaceInput(inp[0], <size_t>count, <size_t>npdt.itemsize, <size_t>src.len,
                      <size_t>max_input_size, offset, &read):
        return None
    if read.binary:
        return _binary_input(body, src, inp.shape, npdt, <Py_ssize_t>read.offset)
    return _json_input(reader, <size_t>i, read.kind, <size_t>count, npdt)


cdef object _build_plain(model_name, model_version, body, Py_buffer* src, Py_ssize_t hlen,
                         Py_ssize_t max_input_size, dict wire_to_numpy,
                         InferRequestReader* reader, bint read):
    cdef const RequestInput* inp
    cdef const RequestOutput* out
    cdef Py_ssize_t total = src.len, count, i, j
    cdef size_t offset
    cdef int64_t dim
    if hlen > total or (read and not reader.Read(<const char*>src.buf, <size_t>hlen)):
        return None
    if reader.parameters() == ParamsState.kOne:
        params = {"binary_data_output": reader.binary_data_output()}
    else:
        params = {}
    request_id = _text(reader.id()) if reader.has_id() else ""
    offset = <size_t>hlen
    cdef list inputs = []
    cdef set names = set()
    for i in range(<Py_ssize_t>reader.inputs().size()):
        inp = &reader.inputs()[i]
        name = _text(inp.name)
        datatype = _text(inp.datatype)
        if datatype == "BYTES" or datatype == "BF16" or name in names:
            return None
        npdt = wire_to_numpy.get(datatype)
        if npdt is None:
            return None
        if inp.shape.size() > _MAX_DIMS:
            return None
        count = 1
        shape = []
        for j in range(<Py_ssize_t>inp.shape.size()):
            dim = inp.shape[j]
            if dim and count > _INT64_MAX // dim:
                return None  # the element count overflows
            count *= <Py_ssize_t>dim
            shape.append(dim)
        if count == 0:
            return None
        names.add(name)
        if inp.parameters == ParamsState.kOne:
            iparams = {"binary_data_size": inp.binary_data_size}
        else:
            iparams = {} if inp.parameters == ParamsState.kEmpty else None
        data = _input_data(body, src, reader, i, count, npdt, &offset, max_input_size)
        if data is None:
            return None
        inputs.append(new_tensor(name, datatype, shape, data, iparams))
    if offset != <size_t>total:
        return None
    cdef list outputs = []
    cdef set seen = set()
    for i in range(<Py_ssize_t>reader.outputs().size()):
        out = &reader.outputs()[i]
        name = _text(out.name)
        if name in seen:
            return None
        seen.add(name)
        if out.parameters == ParamsState.kOne:
            oparams = {"binary_data": out.binary_data}
        elif out.parameters == ParamsState.kEmpty:
            oparams = {}
        else:
            oparams = None
        outputs.append(new_output(name, oparams))
    return new_request(model_name, model_version, request_id, inputs, outputs, params, 0, 0)


# ---------------------------------------------------------------- direct runs


cpdef object direct_answer(DirectRoute direct, body, Py_ssize_t hlen,
                           Py_ssize_t max_input_size, json_headers, bint keep_alive,
                           bint http10, uint64_t received, fallback):
    """Runs a plain request (JSON header of ``hlen`` bytes, then its binary
    tensors) through ``direct`` (batch_execution.DirectRoute) and returns
    its whole 200 answer (a list); where the general path must take it
    (what read_plain declines, anything that does not match the model's
    fixed shapes and datatypes) it runs nothing and returns what this
    thread's reader holds for that path (NOT_READ, HEADER_READ or
    READER_DECLINED: read_plain's ``held``). Raises the run's error. Outputs
    the writer cannot write (a NaN as JSON data) go to ``fallback(response,
    request, keep_alive, http10)``, the general encoder."""
    cdef Py_buffer src
    PyObject_GetBuffer(body, &src, 0)
    try:
        return _direct(direct, body, &src, hlen, max_input_size, json_headers, keep_alive,
                       http10, received, fallback, &ThreadInferRequestReader())
    finally:
        PyBuffer_Release(&src)


cdef object _read_feed(PlainModel m, body, Py_buffer* src, Py_ssize_t hlen,
                       Py_ssize_t max_input_size, InferRequestReader* reader,
                       PlainRequest* plain):
    """A plain request's inputs by name (a dict: views of the body's binary
    data, arrays of its JSON data), read into ``plain`` against ``m``'s
    rules (csrc ReadPlainRequest); or what the reader holds where it
    declines (an int: NOT_READ, HEADER_READ, READER_DECLINED)."""
    cdef const PlainRequestInput* inp
    cdef size_t i
    if hlen > src.len:
        return NOT_READ
    if not reader.Read(<const char*>src.buf, <size_t>hlen):
        return READER_DECLINED
    if not ReadPlainRequest(reader[0], m.spec.c.get()[0], m.input_itemsizes, <size_t>hlen,
                            <size_t>src.len, <size_t>max_input_size, plain):
        return HEADER_READ
    cdef dict feed = {}
    names = m.input_names
    dtypes = m.input_dtypes
    for i in range(plain.inputs.size()):
        inp = &plain.inputs[i]
        npdt = dtypes[inp.index]
        if inp.binary:
            data = _binary_input(body, src, reader.inputs()[inp.source].shape, npdt,
                                 <Py_ssize_t>inp.offset)
        else:
            data = _json_input(reader, inp.source, inp.kind, inp.count, npdt)
            if data is None:
                return HEADER_READ
        feed[names[inp.index]] = data
    return feed


cdef list _requested(PlainModel m, const vector[PlainRequestOutput]& wanted, bint named):
    """The RequestedOutputs the general encoder reads of a plain request's
    ``wanted`` outputs (none where it named none)."""
    cdef list requested = []
    cdef size_t i
    cdef const PlainRequestOutput* out
    if named:
        for i in range(wanted.size()):
            out = &wanted[i]
            requested.append(new_output(m.output_names[out.index], None if out.asked ==
                                        Asked.kDefault else ({} if out.asked == Asked.kEmpty
                                                             else {"binary_data": bool(out.binary)})))
    return requested


cdef object _direct(DirectRoute direct, body, Py_buffer* src, Py_ssize_t hlen,
                    Py_ssize_t max_input_size, json_headers, bint keep_alive, bint http10,
                    uint64_t received, fallback, InferRequestReader* reader):
    cdef PlainRequest plain  # the request against the model's rules (csrc ReadPlainRequest)
    cdef const PlainRequestOutput* out
    cdef size_t i
    feed = _read_feed(direct, body, src, hlen, max_input_size, reader, &plain)
    if type(feed) is not dict:
        return feed
    request_id = _text(reader.id()) if reader.has_id() else ""
    outputs = direct.run(feed, <uint32_t>plain.match.batch_size, received)
    answer = _plain_json(direct, request_id, plain.outputs, outputs, False, json_headers,
                         keep_alive, http10)
    if answer is not None:
        return answer
    # the general encoder, from the objects it reads
    out_names = direct.output_names
    tensors = []
    for i in range(plain.outputs.size()):
        out = &plain.outputs[i]
        name = out_names[out.index]
        value = outputs[name]
        tensors.append(new_tensor(name, direct.output_types[out.index], list(value.shape),
                                  value, None))
    params = {"binary_data_output": reader.binary_data_output()} \
        if reader.parameters() == ParamsState.kOne else {}
    return fallback(new_response(direct.model_name, direct.version, request_id, tensors),
                    new_request(direct.model_name, "", request_id, [],
                                _requested(direct, plain.outputs, plain.outputs_named), params,
                                0, 0),
                    keep_alive, http10)


cdef object _plain_json(PlainModel m, request_id, const vector[PlainRequestOutput]& wanted,
                        dict outputs, bint by_arrays, json_headers, bint keep_alive,
                        bint http10):
    """json_answer's bytes for a plain request's ``wanted`` outputs, or
    None. Typed by the config (a direct run's, a batch's rows), all of them
    there; or (``by_arrays``) as RequestPath.response makes a response:
    those its backend gave, typed by their arrays."""
    cdef string body
    cdef list raws = []
    cdef size_t i
    cdef int k
    cdef bint first = True
    body.reserve(512)
    if not _append_head(request_id, m.model_name, m.version, &body):
        return None
    names = m.output_names
    for i in range(wanted.size()):
        k = wanted[i].index
        name = names[k]
        if by_arrays:
            value = outputs.get(name)
            if value is None:
                continue
            if m.output_types[k] == "BF16":
                return None  # words as uint16: RequestPath.response names them
            datatype = None
        else:
            value = outputs.get(name)
            if value is None:
                return None  # a direct run's are all there; a record's: the general way's
            datatype = m.output_types[k]
        if not first:
            body.push_back(b',')
        first = False
        if not _append_array(name, datatype, value.shape, value, wanted[i].binary, &body,
                             raws):
            return None
    body.append(b']}')
    return _framed(body, raws, json_headers, keep_alive, http10)


# ---------------------------------------------------------------- plain records


cdef class HttpPending(PlainPending):
    """A plain record read from an HTTP request (plain_record): what its
    answer's writer needs besides its model: the outputs in the answer's
    order and how each asked, whether it named them, and its
    binary_data_output parameter (None: it gave none)."""


cpdef object plain_record(PlainModel m, body, Py_ssize_t hlen, Py_ssize_t max_input_size,
                          future):
    """A plain request (JSON header of ``hlen`` bytes, then its binary
    tensors) to a model whose plain requests queue as records
    (admission.Route.records), read into its queue entry (an HttpPending,
    settling ``future``); where the general path must take it, what this
    thread's reader holds for that path (an int, as direct_answer)."""
    cdef Py_buffer src
    PyObject_GetBuffer(body, &src, 0)
    try:
        return _record(m, body, &src, hlen, max_input_size, future,
                       &ThreadInferRequestReader())
    finally:
        PyBuffer_Release(&src)


cdef object _record(PlainModel m, body, Py_buffer* src, Py_ssize_t hlen,
                    Py_ssize_t max_input_size, future, InferRequestReader* reader):
    cdef PlainRequest plain
    feed = _read_feed(m, body, src, hlen, max_input_size, reader, &plain)
    if type(feed) is not dict:
        return feed
    cdef HttpPending p = HttpPending.__new__(HttpPending)
    init_plain(p, future, <dict>feed, plain.match.batch_size,
               _text(reader.id()) if reader.has_id() else "", wanted_names(m.output_names, plain))
    p.model = m
    p.outputs = plain.outputs
    p.outputs_named = plain.outputs_named
    p.binary_data_output = reader.binary_data_output() \
        if reader.parameters() == ParamsState.kOne else None
    return p


cpdef object record_answer(HttpPending p, result, json_headers, bint keep_alive, bint http10,
                           fallback):
    """The 200 answer (a list) of a record whose batch ran: ``result`` is its
    response (types.PlainPending: its outputs, or ``(outputs,
    parameters)``). What json_writer does not write (parameters, BYTES, a
    NaN as JSON data) goes to ``fallback(response, request, keep_alive,
    http10)``, the general encoder, with the InferResponse the model's
    RequestPath makes (PlainModel.respond)."""
    cdef PlainModel m = p.model
    if type(result) is dict:
        answer = _plain_json(m, p.request_id, p.outputs, <dict>result, m.typed_by_arrays,
                             json_headers, keep_alive, http10)
        if answer is not None:
            return answer
        outputs, parameters = result, None
    else:
        outputs, parameters = result
    params = {} if p.binary_data_output is None else \
        {"binary_data_output": p.binary_data_output}
    return fallback(m.respond(p.request_id, p.wanted, outputs, parameters),
                    new_request(m.model_name, "", p.request_id, [],
                                _requested(m, p.outputs, p.outputs_named), params, 0, 0),
                    keep_alive, http10)
