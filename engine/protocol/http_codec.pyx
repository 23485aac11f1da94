# cython: language_level=3, annotation_typing=False
"""KServe v2 / Triton HTTP infer body codec: wire bytes <-> core objects.

Pure functions, no I/O, one authority per direction:

Compiled (engine/protocol/http_codec.pyx) though written as plain Python:
the general path is what runs for every request the C common case declines,
so it runs at compiled speed too, with every rule and error text here.

- ``decode_infer_request`` turns a request body (JSON header plus Triton's
  binary tensor extension) into an ``InferRequest`` whose binary inputs are
  numpy views over the received body (no copy). Its common case is read in
  C by csrc's InferRequestReader (engine/protocol/http_infer.pyx,
  ``read_plain``: simdjson, numbers written straight into the arrays); what
  the reader declines is parsed once by orjson and walked here, where every
  rule and error text lives.
- ``answer_infer`` writes the whole 200 answer: in its common case in C by
  csrc's json_writer (``json_answer``, the same bytes), else through
  ``encode_infer_response`` (headers and body) and the HTTP framing;
  ``encode_infer_response`` alone serves a compressed answer.

Error texts follow Triton's HTTP frontend (``http_server.cc``) and core where
clients or tests match on them; every decode error is INVALID_ARG (HTTP 400).
"""

from __future__ import annotations

import math

import numpy as np
import orjson

from pyserver.engine.protocol.http_infer import (
    NOT_READ,
    READER_DECLINED,
    binary_entry,
    data_entry,
    document,
    http_message,
    json_answer,
    read_plain,
)
from pyserver.kernel.dtypes import WIRE_TO_NUMPY, config_to_wire, serialize_bytes_tensor
from pyserver.kernel.errors import (
    Code,
    ServerError,
    json_parse_error,
    json_type_error,
    shape_too_large,
)
from pyserver.engine.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from pyserver.engine.protocol.shared_memory import SharedMemoryUse

__all__ = [
    "INFER_HEADER_LENGTH",
    "DEFAULT_MAX_INPUT_SIZE",
    "answer_infer",
    "decode_infer_request",
    "encode_infer_response",
    "ShmInferRequest",
    "release_shm",
    "encode_error",
    "encode_json",
    "json_tensor_data",
]

# Lower-case header name (HTTP header names are case-insensitive).
INFER_HEADER_LENGTH = "inference-header-content-length"
# Triton's --http-max-input-size default: limit on the JSON part of a request.
DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024

_UINT64_END = 1 << 64
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1

_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError
_OPT_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_ndarray = np.ndarray

# numpy dtype kinds accepted for JSON "data" of each datatype, and the
# message (TritonJson's wording) when the elements have another type.
_NON_NUMBER = "attempt to access JSON non-number as double"
_NON_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NON_BOOL = "attempt to access JSON non-boolean as boolean"
_JSON_KINDS = {
    "BOOL": ("b", _NON_BOOL),
    "UINT8": ("ui", _NON_UINT),
    "UINT16": ("ui", _NON_UINT),
    "UINT32": ("ui", _NON_UINT),
    "UINT64": ("ui", _NON_UINT),
    "INT8": ("i", _NON_INT),
    "INT16": ("i", _NON_INT),
    "INT32": ("i", _NON_INT),
    "INT64": ("i", _NON_INT),
    "FP16": ("fiu", _NON_NUMBER),
    "FP32": ("fiu", _NON_NUMBER),
    "FP64": ("fiu", _NON_NUMBER),
}

JSON_HEADERS = [(b"Content-Type", b"application/json")]

# JSON headers up to this size go through the reader, whose parser keeps
# buffers as large as the largest document it read (per thread); larger
# ones are orjson's.
READER_MAX = 1 << 20
_OK = b"HTTP/1.1 200 OK\r\n"


def read_common(model_name: str, model_version: str, body, hlen: int, max_input_size: int,
                held: int = NOT_READ):
    """The common case of a request, read in C without a Python object per
    JSON value (csrc's InferRequestReader): the InferRequest the walk below
    would make of it, or None when it is not the common case (then the
    walk decides, and says what is wrong). ``held``: see read_plain."""
    return read_plain(model_name, model_version, body, hlen, max_input_size, WIRE_TO_NUMPY,
                      held)

_REQ_BOOL_PARAMS = ("sequence_start", "sequence_end", "binary_data_output")


def _bad(msg: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, msg)


def _rid(request_id: str) -> str:
    """Core's error prefix: "[request id: <id>] "."""
    return "[request id: " + (request_id or "<id_unknown>") + "] "


def _is_uint(v) -> bool:
    return type(v) is int and 0 <= v < _UINT64_END


# ---------------------------------------------------------------- decoding


def inference_header_length(value, content_length: int) -> int:
    """An Inference-Header-Content-Length value as a length within the
    body's ``content_length``; raises Triton's error where it is not one."""
    try:
        parsed = int(value)  # str or bytes; surrounding whitespace allowed
    except (ValueError, TypeError):
        parsed = None
    if parsed is not None and 0 <= parsed <= content_length:
        return parsed
    if not isinstance(value, str):
        value = bytes(value).decode("latin-1")
    if parsed is None:
        raise _bad("Unable to parse Inference-Header-Content-Length, got: " + value)
    if parsed < _INT32_MIN or parsed > _INT32_MAX:
        raise _bad(
            "Unable to parse Inference-Header-Content-Length, value is out of range "
            f"[ {_INT32_MIN}, {_INT32_MAX} ], got: {value}"
        )
    raise _bad(f"inference header size should be in range (0, {content_length}), got: {value}")


def _parse_request_parameters(params: dict):
    """Validate request-level parameters; returns (priority, timeout_us) and
    removes those two keys from ``params`` (everything else stays)."""
    priority = 0
    timeout = 0
    for key, value in params.items():
        if key == "priority":
            if not _is_uint(value):
                raise json_type_error("Unable to parse 'priority': " + _NON_UINT)
            priority = value
        elif key == "timeout":
            if not _is_uint(value):
                raise json_type_error("Unable to parse 'timeout': " + _NON_UINT)
            timeout = value
        elif key == "sequence_id":
            if not (_is_uint(value) or type(value) is str):
                raise json_type_error(
                    "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
                )
        elif key in _REQ_BOOL_PARAMS:
            if type(value) is not bool:
                raise json_type_error(f"Unable to parse '{key}': " + _NON_BOOL)
        elif key.startswith("triton_"):
            raise _bad(
                "parameter keys starting with 'triton_' are reserved for Triton usage "
                "and should not be specified."
            )
        elif not isinstance(value, (str, int, float)):  # bool is an int
            raise _bad(
                f"parameter '{key}' has invalid type. It should be either "
                "'int', 'bool', or 'string'."
            )
    if "priority" in params:
        del params["priority"]
    if "timeout" in params:
        del params["timeout"]
    return priority, timeout


# Triton's HTTP_MAX_JSON_NESTING_DEPTH: 'data' elements may sit this deep at
# most (the outer list holds depth 1).
_MAX_JSON_DEPTH = 100


def _flatten(data, out: list, depth: int = 0) -> list:
    if depth + 1 >= _MAX_JSON_DEPTH:  # this list's elements would sit that deep
        raise _bad(f"JSON nesting depth exceeds maximum allowed limit ({_MAX_JSON_DEPTH})")
    for x in data:
        if type(x) is list:
            _flatten(x, out, depth + 1)
        else:
            out.append(x)
    return out


def _has_bool(data) -> bool:
    for x in data:
        if type(x) is bool or (type(x) is list and _has_bool(x)):
            return True
    return False


def _json_numeric(name, datatype, npdt, data, count, shape):
    kinds, type_msg = _JSON_KINDS[datatype]
    try:
        arr = np.array(data)
    except (ValueError, TypeError, OverflowError):  # ragged nesting
        arr = np.array(_flatten(data, []))
    kind = arr.dtype.kind
    # numpy reads true among numbers as 1; TritonJson refuses a boolean
    # where a number is due (csrc's reader declined such data)
    if kind in "iuf" and _has_bool(data):
        raise json_type_error("Unable to parse 'data': " + type_msg)
    if kind not in kinds:
        if arr.size == 0 and kind == "f":  # [] or [[]]: a count problem, not a type one
            pass
        else:
            arr = _json_wide_numbers(_flatten(data, []), kinds, type_msg)
            kind = arr.dtype.kind
    size = arr.size
    if size != count:  # INTERNAL in Triton (HTTP 500), as its other 'data' failures
        if size > count:
            raise ServerError(Code.INTERNAL,
                              "Unable to parse 'data': Shape does not match true shape of 'data' "
                              "field")
        raise ServerError(Code.INTERNAL,
                          "Failed to parse 'data' field: shape does not match true shape")
    if kind == "i" and kinds == "ui" and arr.min() < 0:
        raise json_type_error("Unable to parse 'data': " + _NON_UINT)
    return arr.astype(npdt, copy=False).reshape(shape)


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1


def _json_wide_numbers(flat: list, kinds: str, type_msg: str):
    """The elements numpy typed otherwise than the datatype asks: integers
    past int64 (numpy makes [0, 2**64 - 1] float64 and [-1, 2**64 - 1]
    objects). As TritonJson reads them: a signed type takes int64's range, an
    unsigned one uint64's, a float type any number; anything else is the
    datatype's type error."""
    bad = json_type_error("Unable to parse 'data': " + type_msg)
    if kinds == "fiu":
        for x in flat:
            if type(x) is not int and type(x) is not float:
                raise bad
        return np.array(flat, dtype=np.float64)
    if kinds == "b":
        raise bad
    low, high, wide = ((0, _UINT64_MAX, np.uint64) if kinds == "ui"
                       else (_INT64_MIN, _INT64_MAX, np.int64))
    for x in flat:
        if type(x) is not int or x < low or x > high:
            raise bad
    return np.array(flat, dtype=wide)


def _half_refused(name: str, datatype: str) -> ServerError:
    # half floats have no JSON number form in Triton either
    return _bad(f"receiving {datatype} data via JSON is not supported. Please use the binary "
                "data format for input " + name)


def json_tensor_data(name: str, datatype: str, values: list, shape: list):
    """A numeric tensor of ``shape`` from a JSON list, read as the infer
    route reads 'data' (TritonJson's texts); the generate route's fields
    come through here too."""
    if datatype == "BF16" or datatype == "FP16":
        raise _half_refused(name, datatype)
    npdt = WIRE_TO_NUMPY.get(datatype)
    if npdt is None or datatype == "BYTES":
        raise _bad("invalid datatype for input " + name)
    count = 1
    for d in shape:
        count *= d
    if count == 0:
        return np.empty(shape, npdt)
    return _json_numeric(name, datatype, npdt, values, count, shape)


def _bytes_count_error(name, model_name, request_id, got, count) -> ServerError:
    if got < count:
        return _bad(
            f"{_rid(request_id)}expected {count} string elements for inference input "
            f"'{name}' for model '{model_name}', got {got}"
        )
    return _bad(
        f"{_rid(request_id)}unexpected number of string elements {count + 1} for inference "
        f"input '{name}' for model '{model_name}', expecting {count}"
    )


def _json_bytes(name, model_name, request_id, data, count, shape):
    flat = data
    for x in data:
        if type(x) is not str:
            flat = _flatten(data, [])
            break
    out = []
    for x in flat:
        if type(x) is not str:
            raise json_type_error(
                "Unable to parse JSON bytes array: attempt to access JSON non-string as string")
        out.append(x.encode("utf-8"))
    if len(out) != count:
        raise _bytes_count_error(name, model_name, request_id, len(out), count)
    arr = np.empty(count, dtype=np.object_)
    arr[:] = out
    return arr.reshape(shape)


def _binary_bytes(name, model_name, request_id, body, offset, size, count, shape):
    mv = memoryview(body)
    end = offset + size
    out = []
    pos = offset
    from_bytes = int.from_bytes
    while pos < end:
        if pos + 4 > end:
            raise _bad(
                f"{_rid(request_id)}incomplete string length indicator for inference input "
                f"'{name}' for model '{model_name}', expecting 4 bytes but only "
                f"{end - pos} bytes available"
            )
        n = from_bytes(mv[pos:pos + 4], "little")
        pos += 4
        if pos + n > end:
            raise _bad(
                f"{_rid(request_id)}element byte size indicator exceeds the end of the buffer "
                f"for inference input '{name}' for model '{model_name}'"
            )
        out.append(bytes(mv[pos:pos + n]))
        pos += n
        if len(out) > count:
            break
    if len(out) != count:
        raise _bytes_count_error(name, model_name, request_id, len(out), count)
    arr = np.empty(count, dtype=np.object_)
    arr[:] = out
    return arr.reshape(shape)


def _input_content_error(has_data, has_binary, has_shm) -> ServerError:
    msg = (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But"
    )
    if not (has_data or has_binary or has_shm):
        msg += " no field is set"
    else:
        msg += " set"
        if has_data:
            msg += " 'data'"
        if has_binary:
            msg += " 'binary_data_size'"
        if has_shm:
            msg += " 'shared_memory_region'"
    return _bad(msg)


def _member_error(field: str, value) -> ServerError:
    if value is None:
        return json_type_error(
            f"Unable to parse '{field}': attempt to access non-existing object member '{field}'"
        )
    if field == "shape" or field == "inputs" or field == "outputs" or field == "data":
        return json_type_error(
            f"Unable to parse '{field}': attempt to access JSON non-array as array")
    return json_type_error(f"Unable to parse '{field}': attempt to access JSON non-string as string")


class ShmInferRequest(InferRequest):
    """An InferRequest that reads inputs from or writes outputs to client
    shared memory: ``shm`` (a SharedMemoryUse) holds the leases on the
    regions until ``release_shm`` (after the response is encoded, or on
    failure)."""

    __slots__ = ("shm",)

    def __init__(self, *args, shm=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.shm = shm


def release_shm(request) -> None:
    """Releases the shared-memory leases a decoded request holds (idempotent)."""
    if type(request) is ShmInferRequest:
        request.shm.release()


def _shm_params(params: dict):
    """http_server.cc CheckSharedMemoryData: (region, offset, byte_size)."""
    region = params["shared_memory_region"]
    if type(region) is not str:
        raise json_type_error("Unable to parse 'shared_memory_region': attempt to access JSON "
                              "non-string as string")
    offset = params.get("shared_memory_offset", 0)
    if not _is_uint(offset):
        raise json_type_error("Unable to parse 'shared_memory_offset': " + _NON_UINT)
    size = params.get("shared_memory_byte_size", 0)
    if not _is_uint(size):
        raise json_type_error("Unable to parse 'shared_memory_byte_size': " + _NON_UINT)
    return region, offset, size


def _acquire(shm, leases: list, region: str, offset: int, size: int):
    if shm is None:
        raise ServerError(Code.NOT_FOUND, f"Unable to find shared memory region: '{region}'")
    lease = shm.acquire(region, offset, size)
    leases.append(lease)
    return lease


def _parse_outputs(outputs, shm=None, leases=None, shm_outputs=None, request_id="") -> list:
    if type(outputs) is not list:
        raise _member_error("outputs", outputs)
    result = []
    seen = set()
    for out in outputs:
        if type(out) is not dict:
            raise json_type_error(
                "Unable to parse 'outputs': attempt to access JSON non-object as object")
        params = out.get("parameters")
        use_shm = False
        if params is not None:
            if type(params) is not dict:
                raise json_type_error(
                    "Unable to parse 'parameters': attempt to access JSON non-object as object")
            if params:
                binary = params.get("binary_data")
                if "shared_memory_region" in params:
                    if "classification" in params:
                        raise _bad(
                            "Output can't set both 'shared_memory_region' and 'classification'"
                        )
                    if binary is not None and type(binary) is not bool:
                        raise json_type_error("Unable to set 'binary_data': " + _NON_BOOL)
                    if binary:
                        raise _bad(
                            "Output can't set both 'shared_memory_region' and 'binary_data'"
                        )
                    use_shm = True
                if binary is not None and type(binary) is not bool:
                    raise json_type_error("Unable to parse 'binary_data': " + _NON_BOOL)
                if "classification" in params:
                    if not _is_uint(params["classification"]):
                        raise json_type_error("Unable to set 'classification': " + _NON_UINT)
                    if params["classification"] == 0:  # Triton's HTTP: no classification
                        params = {k: v for k, v in params.items() if k != "classification"}
        name = out.get("name")
        if type(name) is not str:
            raise _member_error("name", name)
        if name in seen:
            raise _bad(f"{_rid(request_id)}output '{name}' already exists in request")
        seen.add(name)
        if use_shm:
            region, offset, size = _shm_params(params)
            shm_outputs[name] = _acquire(shm, leases, region, offset, size)
        result.append(RequestedOutput(name, params))
    return result


def _shape_count(name: str, shape: list, itemsize: int) -> int:
    count = math.prod(shape)
    if count > _INT64_MAX:
        raise _bad(
            f"invalid shape for input '{name}': shape [{','.join(str(d) for d in shape)}] causes "
            f"total element count to exceed maximum size of {_INT64_MAX}"
        )
    if count == 0 and math.prod(d for d in shape if d) * itemsize > _INT64_MAX:
        raise _bad(shape_too_large(name, shape))
    return count


def _decode_raw(model_name, model_version, body, max_input_size, config) -> InferRequest:
    """A raw binary request (Inference-Header-Content-Length: 0): the whole
    body is the one input of the model, its shape deduced as core does
    (infer_request.cc Normalize)."""
    size = len(body)
    if size > max_input_size:
        raise _bad(
            f"Raw input has a byte_size ({size} bytes) that exceeds the maximum allowed value "
            f"of {max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    prefix = _rid("")
    inputs = config.get("input") or []
    if len(inputs) != 1:
        raise _bad(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(inputs)} inputs in '{model_name}' model configuration"
        )
    spec = inputs[0]
    name = spec.get("name", "")
    datatype = config_to_wire(str(spec.get("data_type", "TYPE_INVALID")))
    shape = [1] if int(config.get("max_batch_size", 0) or 0) != 0 else []
    dynamic = -1
    element_cnt = 1
    for d in spec.get("dims") or []:
        d = int(d)
        if d == -1:
            if dynamic != -1:
                raise _bad(
                    f"{prefix}The shape of the raw input '{name}' can not be deduced because "
                    "there are more than one variable-sized dimension"
                )
            dynamic = len(shape)
        else:
            element_cnt *= d
        shape.append(d)
    npdt = WIRE_TO_NUMPY.get(datatype)
    if npdt is None:
        raise _bad(f"invalid datatype for input {name}")
    if datatype == "BYTES":
        if dynamic != -1 or element_cnt != 1:
            raise _bad(
                f"{prefix}For BYTE datatype raw input '{name}', the model must have input "
                "shape [1]"
            )
        data = np.empty(1, dtype=np.object_)
        data[0] = bytes(body)
        data = data.reshape(shape)
    else:
        if dynamic != -1:
            shape[dynamic] = size // element_cnt // npdt.itemsize if element_cnt else 0
        count = math.prod(shape)
        expected = count * npdt.itemsize
        if expected != size:
            raise _bad(
                f"{prefix}input byte size mismatch for input '{name}' for model "
                f"'{model_name}'. Expected {expected}, got {size}"
            )
        data = _ndarray(shape, npdt, body) if count else np.empty(shape, npdt)
    return InferRequest(model_name, model_version, "",
                        [InferTensor(name, datatype, shape, data)], [],
                        {"binary_data_output": True})


def decode_infer_request(model_name: str, model_version: str, header_length, body,
                         max_input_size: int = DEFAULT_MAX_INPUT_SIZE, shm=None,
                         model_config=None, reader_held: int = NOT_READ) -> InferRequest:
    """Decode one infer request body: the only HTTP infer decoder.

    ``header_length`` is the Inference-Header-Content-Length header's value
    (str or bytes) or None when the request has none. ``body`` is the whole
    (decompressed) request body; binary inputs become read-only numpy views
    into it. The body is parsed once: by the reader in its common case,
    else by orjson.

    ``shm`` is the SharedMemoryManager for inputs/outputs that name a
    ``shared_memory_region``: such a request comes back as a
    ``ShmInferRequest`` holding leases on the regions; call ``release_shm``
    when done with it. ``model_config(model_name, model_version)`` returns
    the model's config JSON (Server.model_config); it
    is needed only for raw binary requests (header length 0).
    ``reader_held``: what a declined direct run left in this thread's
    reader (http_infer.direct_answer), so that the header is not read twice.
    """
    total = len(body)
    hval = header_length
    if hval is None:
        hlen = total  # Triton: no header means "all JSON"; an empty body is raw
    else:
        hlen = inference_header_length(hval, total)
    if hlen == 0:
        if model_config is None:
            raise _bad(
                "raw binary inference requests (Inference-Header-Content-Length: 0) are not "
                f"supported for model '{model_name}'"
            )
        return _decode_raw(model_name, model_version, body, max_input_size,
                           model_config(model_name, model_version))
    if hlen > max_input_size:
        raise _bad(
            f"request JSON size of {hlen} bytes exceeds the maximum allowed input size of "
            f"{max_input_size} bytes. Use --http-max-input-size to increase the limit."
        )
    if hlen <= READER_MAX and reader_held != READER_DECLINED:
        request = read_common(model_name, model_version, body, hlen, max_input_size,
                              reader_held)
        if request is not None:
            return request
    try:
        # the JSON alone (a view: the reader above needed no slice)
        doc = _loads(body if hlen == total else memoryview(body)[:hlen])
    except _JSONDecodeError as e:
        raise json_parse_error(e) from None
    if type(doc) is not dict:
        raise _member_error("inputs", None)

    request_id = doc.get("id", "")
    if type(request_id) is not str:
        raise json_type_error("Unable to parse 'id': attempt to access JSON non-string as string")

    priority = timeout = 0
    params = doc.get("parameters")
    if params is None:
        params = {}
    elif type(params) is not dict:
        raise json_type_error(
            "failed to get request params.: attempt to get members for non-object")
    elif params:
        priority, timeout = _parse_request_parameters(params)

    inputs_json = doc.get("inputs")
    if type(inputs_json) is not list:
        raise _member_error("inputs", inputs_json)

    leases = None  # shared-memory leases, released on any error below
    shm_outputs = None
    try:
        inputs = []
        names = set()
        offset = hlen
        for inp in inputs_json:
            if type(inp) is not dict:
                raise json_type_error(
                    "Unable to parse 'inputs': attempt to access JSON non-object as object")
            iparams = inp.get("parameters")
            has_data = "data" in inp
            has_binary = has_shm = False
            if iparams is not None:
                if type(iparams) is not dict:
                    raise json_type_error(
                        "Unable to parse 'parameters': attempt to access JSON non-object as object")
                if iparams:
                    has_binary = "binary_data_size" in iparams
                    has_shm = "shared_memory_region" in iparams
            if has_data + has_binary + has_shm != 1:
                raise _input_content_error(has_data, has_binary, has_shm)

            name = inp.get("name")
            if type(name) is not str:
                raise _member_error("name", name)
            datatype = inp.get("datatype")
            if type(datatype) is not str:
                raise _member_error("datatype", datatype)
            shape = inp.get("shape")
            if type(shape) is not list:
                raise _member_error("shape", shape)
            for d in shape:
                if type(d) is not int or d < 0:
                    raise json_type_error("Unable to parse 'shape': " + _NON_UINT)
            if name in names:
                raise _bad(f"{_rid(request_id)}input '{name}' already exists in request")
            names.add(name)
            npdt = WIRE_TO_NUMPY.get(datatype)
            if npdt is None:
                raise _bad("invalid datatype for input " + name)
            count = _shape_count(name, shape, npdt.itemsize)

            if has_binary:
                size = iparams["binary_data_size"]
                if type(size) is not int or size < 0:
                    raise json_type_error("Unable to parse 'binary_data_size': " + _NON_UINT)
                end = offset + size
                if end > total:
                    raise _bad(
                        f"unexpected size for input '{name}', expecting {end - total} "
                        f"additional bytes for model '{model_name}'"
                    )
                if datatype == "BYTES":
                    data = _binary_bytes(name, model_name, request_id, body, offset, size,
                                         count, shape)
                else:
                    expected = count * npdt.itemsize
                    if size != expected:
                        raise _bad(
                            f"{_rid(request_id)}input byte size mismatch for input '{name}' for "
                            f"model '{model_name}'. Expected {expected}, got {size}"
                        )
                    # a read-only view over the request body (no copy)
                    data = _ndarray(shape, npdt, body, offset) if count else np.empty(shape, npdt)
                offset = end
            elif has_data:
                jdata = inp["data"]
                if count == 0:
                    data = np.empty(shape, npdt)
                else:
                    if type(jdata) is not list:
                        raise _member_error("data", jdata)
                    if datatype == "BYTES":
                        data = _json_bytes(name, model_name, request_id, jdata, count, shape)
                    elif datatype == "BF16" or datatype == "FP16":
                        raise _half_refused(name, datatype)
                    else:
                        itemsize = npdt.itemsize
                        if itemsize > 1 and count > _INT64_MAX // itemsize:
                            raise _bad(
                                f"byte size overflow for input '{name}': element count "
                                f"({count}) * data type size ({itemsize}) exceeds maximum "
                                f"allowed size ({_INT64_MAX})"
                            )
                        if count * itemsize > max_input_size:
                            raise _bad(
                                f"JSON input '{name}' has a byte_size ({count * itemsize} bytes) "
                                "that exceeds the maximum allowed value of "
                                f"{max_input_size} bytes. Use --http-max-input-size to "
                                "increase the limit."
                            )
                        data = _json_numeric(name, datatype, npdt, jdata, count, shape)
            else:  # shared memory: a view over the registered region
                region, shm_offset, size = _shm_params(iparams)
                if leases is None:
                    leases = []
                lease = _acquire(shm, leases, region, shm_offset, size)
                data = lease.as_array(datatype, shape, input_name=name, model_name=model_name,
                                      request_id=request_id)
            inputs.append(InferTensor(name, datatype, shape, data, iparams))

        if offset != total:
            raise _bad(f"unexpected additional input data for model '{model_name}'")

        outputs_json = doc.get("outputs")
        if outputs_json is None:
            outputs = []
        else:
            if leases is None:
                leases = []
            shm_outputs = {}
            outputs = _parse_outputs(outputs_json, shm, leases, shm_outputs, request_id)
    except BaseException:
        if leases:
            for lease in leases:
                lease.release()
        raise

    if not leases:
        return InferRequest(model_name, model_version, request_id, inputs, outputs, params,
                            priority, timeout)
    use = SharedMemoryUse()
    use.leases = leases
    use.outputs = shm_outputs or {}
    request = ShmInferRequest(model_name, model_version, request_id, inputs, outputs, params,
                              priority, timeout, shm=use)
    return request


# ---------------------------------------------------------------- encoding


def _raw_bytes(arr: np.ndarray):
    """The tensor's bytes, row-major, without copying when already contiguous."""
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if arr.ndim == 0 or arr.size == 0:  # memoryview cannot cast these
        return arr.tobytes()
    return memoryview(arr).cast("B")


def _json_bytes_data(arr: np.ndarray):
    """BYTES as JSON strings; None when an element is not valid UTF-8."""
    out = []
    try:
        for x in arr.reshape(-1):
            if isinstance(x, bytes):
                out.append(x.decode("utf-8"))
            elif isinstance(x, str):
                out.append(str(x))
            else:
                out.append(str(x))
    except UnicodeDecodeError:
        return None
    return out


def _json_numeric_data(arr: np.ndarray, datatype: str):
    if datatype == "BF16":
        # bfloat16 words are the high halves of float32 values.
        return (arr.astype(np.uint32) << 16).view(np.float32).reshape(-1)
    if not arr.flags.c_contiguous or not arr.dtype.isnative:
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    return arr.reshape(-1)


def encode_infer_response(response: InferResponse, request: InferRequest):
    """Encode a successful infer response.

    Outputs the request asked for in shared memory are written into their
    regions here (a too-small region raises Triton's INTERNAL error).

    Returns ``(headers, body)``: headers is a list of (name, value) byte
    pairs without Content-Length; body is ``bytes`` (JSON only) or a list of
    buffers (the JSON header followed by the binary output data).
    """
    default_binary = request.parameters.get("binary_data_output") is True
    requested = request.outputs
    out_params = {o.name: o.parameters for o in requested} if requested else None

    shm_outputs = request.shm.outputs if type(request) is ShmInferRequest else None

    outputs_json = []
    buffers = None
    for t in response.outputs:
        datatype = t.datatype
        arr = t.data
        if shm_outputs:
            lease = shm_outputs.get(t.name)
            if lease is not None:
                # written into the client's region; the response carries no data
                # (http_server.cc: an SHM output has name, datatype and shape only)
                if arr is not None:
                    lease.write(t.name, arr, datatype)
                outputs_json.append({"name": t.name, "datatype": datatype, "shape": t.shape})
                continue
        if out_params is not None:
            p = out_params.get(t.name)
            binary = p.get("binary_data") is True if p is not None else default_binary
        else:
            binary = default_binary
        data = None
        if not binary:
            if arr is None:
                data = []
            elif datatype == "BYTES":
                data = _json_bytes_data(arr)
                if data is None:  # not UTF-8: send as binary, the client handles both
                    binary = True
            else:
                data = _json_numeric_data(arr, datatype)
        if binary:
            if arr is None:
                raw = b""
            elif datatype == "BYTES":
                raw = serialize_bytes_tensor(arr)
            else:
                raw = _raw_bytes(arr)
            buffers = binary_entry(outputs_json, buffers, t, datatype, raw)
        else:
            data_entry(outputs_json, t, datatype, data)

    return document(response, request, outputs_json, buffers, _dumps, _OPT_NUMPY, JSON_HEADERS)


def answer_infer(response: InferResponse, request: InferRequest, keep_alive: bool,
                 http10: bool) -> list:
    """The whole 200 answer to an infer request, as written: in C by csrc's
    json_writer when its outputs are plain numeric arrays and no parameters
    or shared memory are involved (the same bytes the path below writes),
    else encode_infer_response and the framing. Encodes once either way."""
    if type(request) is InferRequest:  # no shared-memory outputs
        answer = json_answer(response, request, JSON_HEADERS, keep_alive, http10)
        if answer is not None:
            return answer
    headers, body = encode_infer_response(response, request)
    return http_message(_OK, headers, body, keep_alive, http10)


def encode_error(err: ServerError):
    """(http status, body) for an error: ``{"error": "<message>"}``."""
    return err.http_status, _dumps({"error": err.message})


def encode_json(obj) -> bytes:
    """JSON for the non-infer endpoints (metadata, config)."""
    return _dumps(obj, option=_OPT_NUMPY | orjson.OPT_NON_STR_KEYS)
