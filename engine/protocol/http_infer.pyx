# cython: language_level=3
"""The common case of a KServe v2 HTTP infer request and its response, in C.

Decoding: the JSON document with numeric tensors in "data" or in the binary
tensor extension, outputs asking at most for ``binary_data``, and no
request parameters but ``binary_data_output``: read by csrc's
InferRequestReader (simdjson, numbers written straight into the arrays)
when it says yes, else parsed by orjson and walked here (decode_plain).
Encoding: numeric outputs, as JSON data or binary, with no shared memory:
the whole answer written by csrc's json_writer (orjson's text, byte for
byte) with no dict, list or number objects made for it, else through
orjson (encode_plain) when an output or the response has parameters.

As Python these walks cost ~6 µs (decode, JSON 15 -> 9 µs, binary 12 -> 6.5)
and ~8 µs (encode) of the event loop's thread per request. They only say
yes: anything else (an error, BYTES or BF16, shared memory, classification,
sequence or priority parameters, ragged nesting) returns None, and
pyserver.frontends.http_codec does the work itself, with every rule and
error text. So what is done here is exactly what the Python code would do,
to the same result.
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
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int64_t
from libc.string cimport memcpy
from libcpp.string cimport string
from libcpp.vector cimport vector

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
    AppendString,
    ElementKind,
    string_view,
)

cimport numpy as cnp
import numpy as np

from pyserver.engine.types cimport (
    InferRequest,
    InferTensor,
    new_output,
    new_request,
    new_tensor,
)

cnp.import_array()


cdef extern from "numpy/arrayobject.h":
    PyTypeObject PyArray_Type
    # Steals a reference to ``descr``.
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.dtype descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, PyObject* obj)

cdef object _ndarray = np.ndarray
cdef object _empty = np.empty
cdef object _array = np.array
cdef Py_ssize_t _INT64_MAX = 0x7FFFFFFFFFFFFFFF


def decode_plain(model_name, model_version, doc, body, Py_ssize_t hlen,
                 Py_ssize_t max_input_size, dict wire_to_numpy, dict json_kinds):
    """An InferRequest for ``doc`` (the request's JSON header, parsed; the
    binary tensors follow it in ``body`` from ``hlen``), or None."""
    if type(doc) is not dict:
        return None
    cdef dict d = <dict>doc
    request_id = d.get("id", "")
    if type(request_id) is not str:
        return None
    params = d.get("parameters")
    if params is None:
        params = {}
    elif type(params) is not dict:
        return None
    elif params:
        if len(<dict>params) != 1 or type((<dict>params).get("binary_data_output")) is not bool:
            return None
    inputs_json = d.get("inputs")
    if type(inputs_json) is not list:
        return None
    cdef Py_ssize_t total = len(body), offset = hlen, size, end, count, itemsize
    cdef list inputs = []
    cdef set names = set()
    cdef dict inp
    for item in <list>inputs_json:
        if type(item) is not dict:
            return None
        inp = <dict>item
        iparams = inp.get("parameters")
        has_data = "data" in inp
        binary_size = None
        if iparams is not None:
            if type(iparams) is not dict:
                return None
            if iparams:
                if len(<dict>iparams) != 1 or "binary_data_size" not in iparams:
                    return None
                binary_size = (<dict>iparams)["binary_data_size"]
        if has_data == (binary_size is not None):
            return None  # neither or both (or shared memory)
        name = inp.get("name")
        datatype = inp.get("datatype")
        shape = inp.get("shape")
        if type(name) is not str or type(datatype) is not str or type(shape) is not list:
            return None
        if datatype == "BYTES" or datatype == "BF16" or name in names:
            return None
        npdt = wire_to_numpy.get(datatype)
        if npdt is None:
            return None
        count = 1
        for dim in <list>shape:
            if type(dim) is not int or dim < 0 or dim > _INT64_MAX:
                return None
            if dim and count > _INT64_MAX // dim:
                return None  # the element count overflows
            count *= <Py_ssize_t>dim
        if count == 0:
            return None
        names.add(name)
        itemsize = npdt.itemsize
        if binary_size is not None:
            if type(binary_size) is not int or binary_size < 0:
                return None
            size = binary_size
            end = offset + size
            if end > total or size != count * itemsize:
                return None
            data = _ndarray(shape, npdt, body, offset)  # a read-only view, no copy
            offset = end
        else:
            jdata = inp["data"]
            if type(jdata) is not list or count > max_input_size // itemsize:
                return None
            data = _filled(<list>jdata, count, shape, npdt, datatype)
            if data is None:  # numpy's way
                try:
                    arr = _array(jdata)
                except (ValueError, TypeError, OverflowError):
                    return None  # ragged: the Python decoder flattens it
                kind = arr.dtype.kind
                kinds = json_kinds[datatype][0]
                if kind not in kinds or arr.size != count:
                    return None
                if kind == "i" and kinds == "ui" and arr.min() < 0:
                    return None
                data = arr.astype(npdt, copy=False).reshape(shape)
        inputs.append(new_tensor(name, datatype, shape, data, iparams))
    if offset != total:
        return None
    outputs_json = d.get("outputs")
    cdef list outputs = []
    if outputs_json is not None:
        if type(outputs_json) is not list:
            return None
        seen = set()
        for item in <list>outputs_json:
            if type(item) is not dict:
                return None
            oparams = (<dict>item).get("parameters")
            if oparams is not None:
                if type(oparams) is not dict:
                    return None
                if oparams and (len(<dict>oparams) != 1 or
                                type((<dict>oparams).get("binary_data")) is not bool):
                    return None
            name = (<dict>item).get("name")
            if type(name) is not str or name in seen:
                return None
            seen.add(name)
            outputs.append(new_output(name, oparams))
    return new_request(model_name, model_version, request_id, inputs, outputs, params, 0, 0)


cdef object _filled(list values, Py_ssize_t count, list shape, npdt, str datatype):
    """A flat JSON list of plain ints and floats as the tensor, written
    straight into a new array (np.array of the list, astype and reshape cost
    ~3.5 µs per input; this ~0.5): the values numpy's path would give, which
    is first an int64 array (all ints) or a float64 one (any float), then a
    C cast to the wire type. None when the list is anything else (nested,
    bools, big or negative-for-unsigned ints, FP16/BOOL): the caller's path
    decides."""
    if len(values) != count:
        return None
    cdef int kind = _fill_kind(datatype)
    if kind < 0:
        return None
    cdef bint to_float = kind == <int>ElementKind.kFloat32 or kind == <int>ElementKind.kFloat64
    cdef Py_ssize_t i
    cdef bint any_float = False
    cdef object v
    for i in range(count):
        v = <object>PyList_GET_ITEM(values, i)
        if PyFloat_CheckExact(v):
            any_float = True
        elif not PyLong_CheckExact(v):
            return None
    if any_float and not to_float:
        return None  # a float in an integer tensor: the caller's error
    arr = _empty(shape, npdt)
    cdef Py_buffer view
    PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)
    cdef long long n
    cdef double d
    cdef int overflow
    try:
        for i in range(count):
            v = <object>PyList_GET_ITEM(values, i)
            if PyFloat_CheckExact(v):
                d = PyFloat_AS_DOUBLE(v)
                if kind == <int>ElementKind.kFloat32:
                    (<float*>view.buf)[i] = <float>d
                else:
                    (<double*>view.buf)[i] = d
                continue
            n = PyLong_AsLongLongAndOverflow(v, &overflow)
            if overflow:
                return None  # beyond int64: numpy's path makes uint64 or objects
            if kind == <int>ElementKind.kFloat32:
                # numpy: ints alone are int64 cast to float32; with a float
                # among them, float64 first
                (<float*>view.buf)[i] = <float>(<double>n) if any_float else <float>n
            elif kind == <int>ElementKind.kFloat64:
                (<double*>view.buf)[i] = <double>n
            elif kind == <int>ElementKind.kInt32:
                (<int*>view.buf)[i] = <int>n
            elif kind == <int>ElementKind.kInt64:
                (<long long*>view.buf)[i] = n
            else:
                if n < 0:
                    return None  # negative for unsigned: the caller's error
                (<unsigned char*>view.buf)[i] = <unsigned char>n
    finally:
        PyBuffer_Release(&view)
    return arr


def decode_common(loads, dict wire_to_numpy, dict json_kinds, model_name, model_version,
                  dict headers, body, Py_ssize_t max_input_size):
    """http_codec.decode_infer_request for an uncompressed request whose
    Inference-Header-Content-Length is absent or plain digits within the
    body, its JSON header parsed by ``loads`` and then decode_plain's case;
    else None (the caller's decoder then says what is wrong, or handles it)."""
    cdef Py_ssize_t total = len(body), hlen
    hval = headers.get(b"inference-header-content-length")
    if hval is None:
        hlen = total
        src = body
    else:
        if not hval.isdigit() or len(hval) > 10:
            return None
        hlen = int(hval)
        if hlen > total:
            return None
        src = body if hlen == total else memoryview(body)[:hlen]
    if hlen == 0 or hlen > max_input_size:
        return None
    if hlen <= _READER_MAX:
        request = _read_plain(model_name, model_version, body, hlen, max_input_size,
                              wire_to_numpy)
        if request is not None:
            return request
    try:
        doc = loads(src)
    except ValueError:
        return None
    return decode_plain(model_name, model_version, doc, body, hlen, max_input_size,
                        wire_to_numpy, json_kinds)


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


def respond_plain(dumps, option, json_headers, response, request, bint keep_alive,
                  bint http10):
    """The whole 200 answer (http_message) to an infer request in
    encode_plain's case, else None."""
    if type(request) is InferRequest:
        answer = json_answer(response, <InferRequest>request, json_headers, keep_alive, http10)
        if answer is not None:
            return answer
    encoded = encode_plain(response, request, dumps, option, json_headers)
    if encoded is None:
        return None
    return http_message(b"HTTP/1.1 200 OK\r\n", encoded[0], encoded[1], keep_alive, http10)


def encode_plain(response, request, dumps, option, json_headers):
    """``(headers, body)`` as http_codec.encode_infer_response makes them,
    for a response whose outputs are all numeric arrays (not BYTES or BF16)
    in native byte order and row-major, to a request without shared-memory
    outputs (an InferRequest, not a subclass); else None."""
    if type(request) is not InferRequest:
        return None
    cdef InferRequest req = <InferRequest>request
    cdef bint default_binary = req.parameters.get("binary_data_output") is True
    cdef dict out_params = _requested_params(req)
    cdef list outputs_json = []
    cdef list buffers = None
    cdef InferTensor t
    for item in response.outputs:
        if type(item) is not InferTensor:
            return None
        t = <InferTensor>item
        datatype = t.datatype
        arr = t.data
        if datatype == "BYTES" or datatype == "BF16" or type(arr) is not np.ndarray:
            return None
        if not arr.flags.c_contiguous or not arr.dtype.isnative or arr.ndim == 0:
            return None
        if _is_binary(out_params, t.name, default_binary):
            # a view of no elements cannot be cast
            buffers = binary_entry(outputs_json, buffers, t, datatype,
                                   memoryview(arr).cast("B") if arr.size else b"")
        else:
            data_entry(outputs_json, t, datatype, arr.reshape(-1))
    return document(response, req, outputs_json, buffers, dumps, option, json_headers)


cdef dict _requested_params(InferRequest req):
    """Each requested output's parameters by name (None: no outputs named)."""
    if not req.outputs:
        return None
    return {o.name: o.parameters for o in req.outputs}


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
    AppendString(string_view(utf8, n), out)
    return True


cdef inline void _append_bytes(bytes b, string* out) noexcept:
    out.append(PyBytes_AS_STRING(b), <size_t>PyBytes_GET_SIZE(b))


cdef bint _append_tensor(InferTensor t, bint binary, string* out, list raws) except -1:
    """One output as ``{"name":..,"datatype":..,"shape":[..],"data":[..]}``,
    or with ``binary`` as ``{.., "parameters":{"binary_data_size":N}}`` with
    its array added to ``raws`` (when it has bytes); False when it is not
    plain numeric data (or not what encode_plain would write without
    parameters)."""
    datatype = t.datatype
    arr = t.data
    if t.parameters or type(arr) is not np.ndarray or datatype == "BYTES" \
            or datatype == "BF16" or type(t.shape) is not list:
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
        out.append(b'{"name":')
        if not _append_str(t.name, out):
            return False
        out.append(b',"datatype":')
        if not _append_str(datatype, out):
            return False
        out.append(b',"shape":[')
        first = True
        for dim in <list>t.shape:
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


cpdef list json_answer(response, InferRequest request, json_headers, bint keep_alive,
                       bint http10):
    """The whole 200 answer to a request whose outputs are numeric arrays
    and that sets no parameters but binary_data(_output): what
    http_message(encode_plain(...)) puts on the wire, byte for byte, as one
    bytes object, followed by the binary outputs' bytes (views) when some
    go as binary data; written by csrc's json_writer. Else None."""
    if response.parameters:
        return None
    cdef bint default_binary = request.parameters.get("binary_data_output") is True
    cdef dict out_params = _requested_params(request)
    cdef string body
    body.reserve(512)
    rid = response.id or request.id
    if rid:
        body.append(b'{"id":')
        if not _append_str(rid, &body):
            return None
        body.append(b',"model_name":')
    else:
        body.append(b'{"model_name":')
    if not _append_str(response.model_name, &body):
        return None
    body.append(b',"model_version":')
    if not _append_str(str(response.model_version), &body):
        return None
    body.append(b',"outputs":[')
    cdef list raws = []
    cdef bint binary
    first = True
    for item in response.outputs:
        if type(item) is not InferTensor:
            return None
        binary = _is_binary(out_params, (<InferTensor>item).name, default_binary)
        if not first:
            body.push_back(b',')
        first = False
        if not _append_tensor(<InferTensor>item, binary, &body, raws):
            return None
    body.append(b']}')
    cdef Py_ssize_t raw_size = 0
    for raw in raws:
        raw_size += raw.nbytes
    cdef Py_ssize_t length = <Py_ssize_t>body.size() + raw_size
    cdef string head
    head.append(b"HTTP/1.1 200 OK\r\n")
    if raws:  # as encode_plain: binary outputs of no bytes leave a JSON answer
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


# JSON headers up to this size go through the reader, whose parser keeps
# buffers as large as the largest document it read (per thread); larger
# ones are orjson's.
cdef Py_ssize_t _READER_MAX = 1 << 20


cdef inline str _text(string_view v):
    return v.data()[:v.size()].decode("utf-8")


cdef int _fill_kind(datatype) noexcept:
    """The element kind a JSON "data" input of this datatype is filled as
    (by _filled, and by InferRequestReader.FillData), or -1: the types the
    C fills take."""
    if datatype == "FP32":
        return <int>ElementKind.kFloat32
    if datatype == "FP64":
        return <int>ElementKind.kFloat64
    if datatype == "INT32":
        return <int>ElementKind.kInt32
    if datatype == "INT64":
        return <int>ElementKind.kInt64
    if datatype == "UINT8":
        return <int>ElementKind.kUint8
    return -1


def read_plain(model_name, model_version, body, Py_ssize_t hlen, Py_ssize_t max_input_size,
               dict wire_to_numpy):
    """_read_plain, for tests: what the reader makes of a request, or None."""
    return _read_plain(model_name, model_version, body, hlen, max_input_size, wire_to_numpy)


cdef object _read_plain(model_name, model_version, body, Py_ssize_t hlen,
                        Py_ssize_t max_input_size, dict wire_to_numpy):
    """decode_plain's InferRequest for the same request, read without
    building the JSON document in Python; None when the reader declines
    (then orjson and decode_plain take it, and say what is wrong)."""
    cdef Py_buffer src
    cdef InferRequestReader* reader = &ThreadInferRequestReader()
    PyObject_GetBuffer(body, &src, 0)
    try:
        return _build_plain(model_name, model_version, body, &src, hlen, max_input_size,
                            wire_to_numpy, reader)
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


cdef object _build_plain(model_name, model_version, body, Py_buffer* src, Py_ssize_t hlen,
                         Py_ssize_t max_input_size, dict wire_to_numpy,
                         InferRequestReader* reader):
    cdef const RequestInput* inp
    cdef const RequestOutput* out
    cdef Py_ssize_t total = src.len, offset, size, end, count, itemsize, i, j
    cdef int64_t dim
    cdef int kind
    cdef bint filled
    if hlen > total or not reader.Read(<const char*>src.buf, <size_t>hlen):
        return None
    if reader.parameters() == ParamsState.kOne:
        params = {"binary_data_output": reader.binary_data_output()}
    else:
        params = {}
    request_id = _text(reader.id()) if reader.has_id() else ""
    offset = hlen
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
        itemsize = npdt.itemsize
        if inp.parameters == ParamsState.kOne:
            size = inp.binary_data_size
            iparams = {"binary_data_size": size}
            end = offset + size
            if end > total or size != count * itemsize:
                return None
            if type(body) is bytes:  # immutable: a view based on it stays valid
                data = _view(body, <char*>src.buf + offset, inp.shape, npdt)
            else:  # numpy's own view (writable for a bytearray), as decode_plain
                data = _ndarray(shape, npdt, body, offset)
            offset = end
        else:
            iparams = {} if inp.parameters == ParamsState.kEmpty else None
            kind = _fill_kind(datatype)
            if kind < 0 or count > max_input_size // itemsize:
                return None
            data = _new_array(inp.shape, npdt)
            filled = reader.FillData(i, <ElementKind>kind,
                                     cnp.PyArray_DATA(<cnp.ndarray>data), <size_t>count)
            if not filled:
                return None
        inputs.append(new_tensor(name, datatype, shape, data, iparams))
    if offset != total:
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
