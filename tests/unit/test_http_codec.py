"""Unit tests for pyserver.engine.protocol.http_codec (KServe v2 JSON + binary tensor extension)."""

import json
import struct

import numpy as np
import orjson
import pytest

from pyserver.engine.protocol.http_codec import (
    INFER_HEADER_LENGTH,
    decode_infer_request,
    encode_error,
    encode_infer_response,
)
from pyserver.kernel.dtypes import serialize_bytes_tensor
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferResponse, InferTensor, RequestedOutput

tc_http = pytest.importorskip("tritonclient.http")
from tritonclient.http._utils import _get_inference_request  # noqa: E402


def client_body(inputs, outputs=None, request_id="", priority=0, timeout=None, params=None):
    """A request body exactly as tritonclient.http builds it; returns (body, headers)."""
    body, json_size = _get_inference_request(
        inputs=inputs, request_id=request_id, outputs=outputs, sequence_id=0,
        sequence_start=False, sequence_end=False, priority=priority, timeout=timeout,
        custom_parameters=params)
    headers = {}
    if json_size is not None:
        headers["inference-header-content-length"] = str(json_size)
    return body, headers


def make_input(name, arr, datatype, binary=True):
    inp = tc_http.InferInput(name, list(arr.shape), datatype)
    inp.set_data_from_numpy(arr, binary_data=binary)
    return inp


def decode(body, headers=None, model="m", version=""):
    headers = headers or {}
    return decode_infer_request(model, version, headers.get(INFER_HEADER_LENGTH), body)


def decode_json(doc, model="m"):
    return decode(json.dumps(doc).encode(), model=model)


def triton_code(message: str, code=Code.INVALID_ARG):
    """The code Triton's HTTP frontend gives a message: TritonJson's
    accessor and parse failures and its 'data' reader's are INTERNAL (500),
    the rest ``code``."""
    internal = ("attempt to access", "attempt to get members", "request JSON buffer",
                "hape does not match true shape")
    return Code.INTERNAL if any(words in message for words in internal) else code


def expect_error(fn, *args, code=Code.INVALID_ARG):
    with pytest.raises(ServerError) as ei:
        fn(*args)
    assert ei.value.code == triton_code(ei.value.message, code), ei.value
    return ei.value.message


# ---------------------------------------------------------------- decode: binary


def test_decode_binary_fp32_is_zero_copy_view_of_body():
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3.5, np.float32)
    body, headers = client_body(
        [make_input("INPUT0", a, "FP32"), make_input("INPUT1", b, "FP32")],
        outputs=[tc_http.InferRequestedOutput("OUTPUT0")], request_id="r1")
    req = decode(body, headers, model="add_sub", version="3")
    assert isinstance(req, InferRequest)
    assert (req.model_name, req.model_version, req.id) == ("add_sub", "3", "r1")
    assert [t.name for t in req.inputs] == ["INPUT0", "INPUT1"]
    x0, x1 = req.inputs[0], req.inputs[1]
    assert x0.datatype == "FP32" and x0.shape == [2, 16]
    assert x0.data.dtype == np.float32 and x0.data.shape == (2, 16)
    np.testing.assert_array_equal(x0.data, a)
    np.testing.assert_array_equal(x1.data, b)
    # zero copy: the arrays are views over the request body
    body_arr = np.frombuffer(body, np.uint8)
    assert np.shares_memory(x0.data, body_arr) and np.shares_memory(x1.data, body_arr)
    assert [o.name for o in req.outputs] == ["OUTPUT0"]
    assert req.outputs[0].parameters == {"binary_data": True}


@pytest.mark.parametrize("dtype,datatype", [
    (np.bool_, "BOOL"), (np.uint8, "UINT8"), (np.uint16, "UINT16"), (np.uint32, "UINT32"),
    (np.uint64, "UINT64"), (np.int8, "INT8"), (np.int16, "INT16"), (np.int32, "INT32"),
    (np.int64, "INT64"), (np.float16, "FP16"), (np.float32, "FP32"), (np.float64, "FP64"),
])
@pytest.mark.parametrize("binary", [True, False])
def test_decode_all_numeric_types(dtype, datatype, binary):
    rng = np.random.default_rng(7)
    if dtype is np.bool_:
        arr = rng.integers(0, 2, size=(3, 4)).astype(bool)
    elif np.issubdtype(dtype, np.floating):
        arr = (rng.standard_normal((3, 4)) * 10).astype(dtype)
    else:
        arr = rng.integers(0, 100, size=(3, 4)).astype(dtype)
    body, headers = client_body([make_input("X", arr, datatype, binary=binary)])
    if datatype == "FP16" and not binary:  # Triton takes half floats as binary only
        with pytest.raises(ServerError, match="receiving FP16 data via JSON is not supported"):
            decode(body, headers)
        return
    req = decode(body, headers)
    got = req.inputs[0].data
    assert got.dtype == np.dtype(dtype)
    assert got.shape == (3, 4)
    np.testing.assert_array_equal(got, arr)


@pytest.mark.parametrize("dtype,datatype", [
    (np.uint8, "UINT8"), (np.uint16, "UINT16"), (np.uint32, "UINT32"), (np.uint64, "UINT64"),
    (np.int8, "INT8"), (np.int16, "INT16"), (np.int32, "INT32"), (np.int64, "INT64"),
])
def test_json_integers_take_their_whole_range(dtype, datatype):
    """Every integer type's min and max as JSON data, through the reader and
    the general walk; past int64 (signed) or uint64 (unsigned) is TritonJson's
    type error; inside those, narrower types wrap as Triton's casts do."""
    info = np.iinfo(dtype)
    values = [int(info.min), int(info.max), 0, int(info.max)]
    doc = {"inputs": [{"name": "X", "datatype": datatype, "shape": [4], "data": values}]}
    fast, python_only = _decode_both(json.dumps(doc).encode())
    for got in (fast, python_only):
        assert not isinstance(got, ServerError), got
        assert got.inputs[0].data.dtype == np.dtype(dtype)
        assert got.inputs[0].data.tolist() == values
    signed = info.min < 0
    wide_low, wide_high = (-(1 << 63), (1 << 63) - 1) if signed else (0, (1 << 64) - 1)
    message = ("Unable to parse 'data': attempt to access JSON "
               + ("non-signed-integer as signed-integer" if signed
                  else "non-unsigned-integer as unsigned-integer"))
    for bad in (wide_low - 1, wide_high + 1):
        doc["inputs"][0].update(shape=[2], data=[0, bad])
        for got in _decode_both(json.dumps(doc).encode()):
            assert isinstance(got, ServerError) and got.message == message, (bad, got)
    if info.bits < 64:
        wraps = [int(info.max) + 1, int(info.min) - 1] if signed else [int(info.max) + 1]
        doc["inputs"][0].update(shape=[len(wraps)], data=wraps)
        for got in _decode_both(json.dumps(doc).encode()):
            assert got.inputs[0].data.tolist() == [int(info.min), int(info.max)][:len(wraps)]


@pytest.mark.parametrize("datatype,leaf", [("BYTES", "hello"), ("INT64", 123)])
def test_json_nesting_depth_limit_is_tritons(datatype, leaf):
    """HTTP_MAX_JSON_NESTING_DEPTH (100): 99 brackets deep is read, 100 is
    refused with Triton's text (qa/L0_http test_json_recursion_depth_limit)."""
    def nested(depth):
        value = leaf
        for _ in range(depth):
            value = [value]
        return {"inputs": [{"name": "X", "datatype": datatype, "shape": [1, 1], "data": value}]}

    for got in _decode_both(json.dumps(nested(99)).encode()):
        assert not isinstance(got, ServerError), got
    for depth in (100, 120):
        for got in _decode_both(json.dumps(nested(depth)).encode()):
            assert isinstance(got, ServerError)
            assert "JSON nesting depth exceeds maximum allowed limit (100)" in got.message


def test_json_floats_take_integers_past_int64():
    doc = {"inputs": [{"name": "X", "datatype": "FP64", "shape": [3],
                       "data": [0, (1 << 64) - 1, -1]}]}
    for got in _decode_both(json.dumps(doc).encode()):
        assert got.inputs[0].data.tolist() == [0.0, float((1 << 64) - 1), -1.0]
    doc["inputs"][0]["data"] = [-1, (1 << 64) - 1, "x"]
    for got in _decode_both(json.dumps(doc).encode()):
        assert got.message == "Unable to parse 'data': attempt to access JSON non-number as double"


def test_decode_binary_bytes():
    arr = np.array([[b"hello", b"", b"\xff\x00binary"]], dtype=np.object_)
    body, headers = client_body([make_input("S", arr, "BYTES")])
    req = decode(body, headers)
    got = req.inputs[0].data
    assert got.dtype == np.object_ and got.shape == (1, 3)
    assert got.tolist() == [[b"hello", b"", b"\xff\x00binary"]]


def test_decode_binary_mixed_with_json_inputs():
    a = np.arange(4, dtype=np.int32)
    b = np.array([1.5, 2.5], dtype=np.float64)
    c = np.array([b"x", b"yz"], dtype=np.object_)
    body, headers = client_body([make_input("A", a, "INT32"),
                                 make_input("B", b, "FP64", binary=False),
                                 make_input("C", c, "BYTES")])
    req = decode(body, headers)
    np.testing.assert_array_equal(req.inputs[0].data, a)
    np.testing.assert_array_equal(req.inputs[1].data, b)
    assert req.inputs[2].data.tolist() == [b"x", b"yz"]


def test_decode_zero_size_binary_input():
    arr = np.zeros((0, 4), np.float32)
    body, headers = client_body([make_input("E", arr, "FP32"),
                                 make_input("F", np.ones(2, np.float32), "FP32")])
    req = decode(body, headers)
    assert req.inputs[0].data.shape == (0, 4)
    np.testing.assert_array_equal(req.inputs[1].data, [1, 1])


# ---------------------------------------------------------------- decode: JSON data


def test_decode_json_nested_and_flat_data():
    doc = {"inputs": [
        {"name": "N", "shape": [2, 3], "datatype": "INT32", "data": [[1, 2, 3], [4, 5, 6]]},
        {"name": "F", "shape": [2, 3], "datatype": "FP32", "data": [1, 2.5, 3, 4, 5, 6]},
        {"name": "D", "shape": [1, 2, 2], "datatype": "INT64", "data": [[[1, 2]], [[3, 4]]]},
    ]}
    req = decode_json(doc)
    n, f, d = (t.data for t in req.inputs)
    assert n.dtype == np.int32 and n.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert f.dtype == np.float32 and f.tolist() == [[1, 2.5, 3], [4, 5, 6]]
    assert d.shape == (1, 2, 2) and d.tolist() == [[[1, 2], [3, 4]]]


def test_decode_json_bytes_bool_fp16():
    doc = {"inputs": [
        {"name": "S", "shape": [2, 2], "datatype": "BYTES", "data": [["a", "bé"], ["", "z"]]},
        {"name": "B", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
    ]}
    s, b = (t.data for t in decode_json(doc).inputs)
    assert s.dtype == np.object_ and s.tolist() == [[b"a", "bé".encode()], [b"", b"z"]]
    assert b.dtype == np.bool_ and b.tolist() == [True, False, True]
    # FP16 as JSON numbers: refused with Triton's text (#21); binary FP16 is fine
    doc = {"inputs": [{"name": "H", "shape": [2], "datatype": "FP16", "data": [0.5, -2]}]}
    with pytest.raises(ServerError) as err:
        decode_json(doc)
    assert err.value.code == Code.INVALID_ARG
    assert err.value.message == ("receiving FP16 data via JSON is not supported. Please use the "
                                 "binary data format for input H")


def test_decode_json_ragged_nesting_is_flattened():
    doc = {"inputs": [{"name": "R", "shape": [4], "datatype": "INT32", "data": [[1], [2, 3], 4]}]}
    assert decode_json(doc).inputs[0].data.tolist() == [1, 2, 3, 4]


def test_decode_request_parameters_and_outputs():
    doc = {"id": "abc",
           "parameters": {"priority": 2, "timeout": 1500, "binary_data_output": True,
                          "sequence_id": 5, "sequence_start": True, "custom": "x", "n": 1.5},
           "inputs": [{"name": "I", "shape": [1], "datatype": "INT8", "data": [7]}],
           "outputs": [{"name": "O1", "parameters": {"binary_data": False}},
                       {"name": "O2", "parameters": {"classification": 3}},
                       {"name": "O3"}]}
    req = decode_json(doc)
    assert req.id == "abc"
    assert req.priority == 2 and req.timeout_us == 1500
    assert req.parameters == {"binary_data_output": True, "sequence_id": 5,
                              "sequence_start": True, "custom": "x", "n": 1.5}
    assert [(o.name, o.parameters) for o in req.outputs] == [
        ("O1", {"binary_data": False}), ("O2", {"classification": 3}), ("O3", {})]


def test_decode_shared_memory_input_without_manager_is_unknown_region():
    doc = {"inputs": [{"name": "I", "shape": [4], "datatype": "FP32",
                       "parameters": {"shared_memory_region": "r0",
                                      "shared_memory_byte_size": 16}}]}
    assert expect_error(decode_json, doc, code=Code.NOT_FOUND) == (
        "Unable to find shared memory region: 'r0'")


# ---------------------------------------------------------------- decode: errors


def test_error_bad_json():
    msg = expect_error(decode, b'{"inputs": [')
    assert msg.startswith("failed to parse the request JSON buffer: ")


def test_error_missing_and_malformed_fields():
    assert expect_error(decode_json, {"id": "x"}) == (
        "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'")
    assert expect_error(decode_json, {"inputs": {}}) == (
        "Unable to parse 'inputs': attempt to access JSON non-array as array")
    assert expect_error(decode_json, {"inputs": [{"shape": [1], "datatype": "FP32",
                                                  "data": [1]}]}) == (
        "Unable to parse 'name': attempt to access non-existing object member 'name'")
    assert expect_error(decode_json, {"inputs": [{"name": "a", "shape": [1], "data": [1]}]}) == (
        "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'")
    assert expect_error(decode_json, {"inputs": [{"name": "a", "datatype": "FP32",
                                                  "data": [1]}]}) == (
        "Unable to parse 'shape': attempt to access non-existing object member 'shape'")
    assert "Unable to parse 'shape'" in expect_error(
        decode_json, {"inputs": [{"name": "a", "shape": [-1], "datatype": "FP32", "data": [1]}]})
    assert expect_error(decode_json, {"id": 5, "inputs": []}) == (
        "Unable to parse 'id': attempt to access JSON non-string as string")
    assert expect_error(decode_json, {"inputs": [{"name": "a", "shape": [1],
                                                  "datatype": "FP99", "data": [1]}]}) == (
        "invalid datatype for input a")


def test_error_input_content_fields():
    msg = expect_error(decode_json, {"inputs": [{"name": "a", "shape": [1], "datatype": "FP32"}]})
    assert msg.endswith("But no field is set")
    msg = expect_error(decode_json, {"inputs": [{"name": "a", "shape": [1], "datatype": "FP32",
                                                 "data": [1],
                                                 "parameters": {"binary_data_size": 4}}]})
    assert msg.endswith("But set 'data' 'binary_data_size'")


def test_error_element_count_vs_shape():
    more = {"inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1, 2, 3]}]}
    fewer = {"inputs": [{"name": "a", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2]]}]}
    assert expect_error(decode_json, more) == (
        "Unable to parse 'data': Shape does not match true shape of 'data' field")
    assert expect_error(decode_json, fewer) == (
        "Failed to parse 'data' field: shape does not match true shape")
    bytes_fewer = {"inputs": [{"name": "s", "shape": [3], "datatype": "BYTES",
                               "data": ["a", "b"]}]}
    assert "expected 3 string elements for inference input 's' for model 'm', got 2" in \
        expect_error(decode_json, bytes_fewer)


def test_error_json_element_types():
    def one(datatype, data):
        return expect_error(decode_json, {"inputs": [{"name": "a", "shape": [len(data)],
                                                      "datatype": datatype, "data": data}]})
    assert one("INT32", [1.5, 2]) == (
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer")
    assert one("UINT8", [1, -2]) == (
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer")
    assert one("FP32", ["1.0", 2]) == (
        "Unable to parse 'data': attempt to access JSON non-number as double")
    # a boolean among numbers is not the number 1 (numpy would read it so)
    assert one("FP32", [True, 2, 3, 4]) == (
        "Unable to parse 'data': attempt to access JSON non-number as double")
    assert one("INT64", [[1, False]]) == (
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer")
    assert one("UINT16", [3, True]) == (
        "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer")
    assert one("BOOL", [1, 0]) == (
        "Unable to parse 'data': attempt to access JSON non-boolean as boolean")
    assert one("BYTES", ["a", 3]) == (
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string")
    assert "receiving BF16 data via JSON is not supported" in one("BF16", [1.0])


def test_error_binary_sizes():
    a = np.arange(16, dtype=np.float32)
    body, headers = client_body([make_input("INPUT0", a, "FP32")])
    # body shorter than the declared binary_data_size
    assert expect_error(decode, body[:-10], headers, "m") == (
        "unexpected size for input 'INPUT0', expecting 10 additional bytes for model 'm'")
    # extra bytes after the last binary input
    assert expect_error(decode, body + b"\0\0\0\0", headers, "m") == (
        "unexpected additional input data for model 'm'")
    # binary_data_size that does not match the shape
    js = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 8], "datatype": "FP32",
                                 "parameters": {"binary_data_size": 64}}]}).encode()
    msg = expect_error(decode, js + a.tobytes(),
                       {"inference-header-content-length": str(len(js))})
    assert msg == ("[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' "
                   "for model 'm'. Expected 32, got 64")


def test_error_binary_bytes_counts():
    raw = serialize_bytes_tensor(np.array([b"a", b"b", b"c"], dtype=np.object_))
    for shape, fragment in (([2], "unexpected number of string elements 3 for inference input "
                                  "'s' for model 'm', expecting 2"),
                            ([4], "expected 4 string elements for inference input 's' for "
                                  "model 'm', got 3")):
        js = json.dumps({"inputs": [{"name": "s", "shape": shape, "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
        msg = expect_error(decode, js + raw, {"inference-header-content-length": str(len(js))})
        assert fragment in msg


def test_error_header_length():
    body = b'{"inputs": []}'
    assert expect_error(decode, body, {"inference-header-content-length": "abc"}) == (
        "Unable to parse Inference-Header-Content-Length, got: abc")
    assert "value is out of range" in expect_error(
        decode, body, {"inference-header-content-length": "99999999999"})
    assert expect_error(decode, body, {"inference-header-content-length": "100"}) == (
        f"inference header size should be in range (0, {len(body)}), got: 100")
    assert expect_error(decode, body, {"inference-header-content-length": "-1"}) == (
        f"inference header size should be in range (0, {len(body)}), got: -1")
    # header length 0 is a raw request: it needs the model's config
    assert "raw binary" in expect_error(decode, body, {"inference-header-content-length": "0"})
    # header value may come as bytes (as stored by the HTTP frontend)
    req = decode(body, {"inference-header-content-length": str(len(body)).encode()})
    assert req.inputs == []


def test_error_parameters():
    base = {"inputs": []}
    assert expect_error(decode_json, {**base, "parameters": {"triton_x": 1}}) == (
        "parameter keys starting with 'triton_' are reserved for Triton usage and should "
        "not be specified.")
    assert expect_error(decode_json, {**base, "parameters": {"priority": -1}}) == (
        "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as "
        "unsigned-integer")
    assert "Unable to parse 'timeout'" in expect_error(
        decode_json, {**base, "parameters": {"timeout": "1"}})
    assert "Unable to parse 'binary_data_output'" in expect_error(
        decode_json, {**base, "parameters": {"binary_data_output": 1}})
    assert expect_error(decode_json, {**base, "parameters": {"p": [1]}}) == (
        "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'.")


def test_error_duplicates_and_outputs():
    inp = {"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}
    # core's texts, with its request-id prefix (Triton sets the id first)
    assert expect_error(decode_json, {"inputs": [inp, inp]}) == (
        "[request id: <id_unknown>] input 'a' already exists in request")
    assert expect_error(decode_json, {"inputs": [inp], "outputs": [{"name": "o"},
                                                                   {"name": "o"}]}) == (
        "[request id: <id_unknown>] output 'o' already exists in request")
    assert expect_error(decode_json, {"id": "r7", "inputs": [inp],
                                      "outputs": [{"name": "o"}, {"name": "o"}]}) == (
        "[request id: r7] output 'o' already exists in request")
    assert expect_error(decode_json, {"inputs": [inp], "outputs": [
        {"name": "o", "parameters": {"shared_memory_region": "r", "binary_data": True}}]}) == (
        "Output can't set both 'shared_memory_region' and 'binary_data'")
    assert "Unable to parse 'binary_data'" in expect_error(
        decode_json, {"inputs": [inp], "outputs": [{"name": "o",
                                                    "parameters": {"binary_data": 1}}]})


# ---------------------------------------------------------------- encode


def as_bytes(body):
    return body if isinstance(body, bytes) else b"".join(bytes(b) for b in body)


def client_result(headers, body):
    """Parse our response as tritonclient.http does."""
    hdrs = dict(headers)
    hlen = hdrs.get(b"Inference-Header-Content-Length")
    return tc_http.InferResult.from_response_body(
        as_bytes(body), header_length=None if hlen is None else int(hlen))


def response_of(*tensors, rid="", params=None):
    return InferResponse("m", "1", rid, list(tensors), params)


def test_encode_json_outputs_all_types():
    f32 = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    tensors = [
        InferTensor("F", "FP32", [2, 3], f32),
        InferTensor("H", "FP16", [2], np.array([0.5, -1.25], np.float16)),
        InferTensor("B", "BOOL", [3], np.array([True, False, True])),
        InferTensor("I", "INT64", [2], np.array([-3, 2**40], np.int64)),
        InferTensor("U", "UINT8", [2], np.array([0, 255], np.uint8)),
        InferTensor("S", "BYTES", [2], np.array([b"abc", "d\u00e9"], dtype=np.object_)),
    ]
    req = InferRequest("m", inputs=[], parameters={})
    headers, body = encode_infer_response(response_of(*tensors, rid="x9"), req)
    assert headers == [(b"Content-Type", b"application/json")]
    assert isinstance(body, bytes)
    doc = orjson.loads(body)
    assert list(doc) == ["id", "model_name", "model_version", "outputs"]
    assert doc["id"] == "x9" and doc["model_name"] == "m" and doc["model_version"] == "1"
    outs = {o["name"]: o for o in doc["outputs"]}
    assert outs["F"] == {"name": "F", "datatype": "FP32", "shape": [2, 3],
                         "data": [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]}
    assert outs["H"]["data"] == [0.5, -1.25]
    assert outs["B"]["data"] == [True, False, True]
    assert outs["I"]["data"] == [-3, 2**40]
    assert outs["U"]["data"] == [0, 255]
    assert outs["S"]["data"] == ["abc", "d\u00e9"]
    result = client_result(headers, body)
    np.testing.assert_array_equal(result.as_numpy("F"), f32)
    # tritonclient gives JSON BYTES back as str
    assert result.as_numpy("S").tolist() == ["abc", "d\u00e9"]


def test_encode_binary_outputs_round_trip_through_tritonclient():
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    s = np.array([[b"\xff\xfe", b"ok"]], dtype=np.object_)
    h = np.array([1.5, 2.0], np.float16)
    tensors = [InferTensor("OUTPUT0", "FP32", [1, 16], a),
               InferTensor("S", "BYTES", [1, 2], s),
               InferTensor("H", "FP16", [2], h),
               InferTensor("Z", "INT32", [0], np.zeros(0, np.int32))]
    req = InferRequest("m", parameters={"binary_data_output": True})
    headers, body = encode_infer_response(response_of(*tensors), req)
    hdrs = dict(headers)
    assert hdrs[b"Content-Type"] == b"application/octet-stream"
    js_len = int(hdrs[b"Inference-Header-Content-Length"])
    raw = as_bytes(body)
    doc = orjson.loads(raw[:js_len])
    assert "id" not in doc
    sizes = [o["parameters"]["binary_data_size"] for o in doc["outputs"]]
    assert sizes == [64, 4 + 2 + 4 + 2, 4, 0]
    assert all("data" not in o for o in doc["outputs"])
    assert len(raw) == js_len + sum(sizes)
    assert raw[js_len:js_len + 64] == a.tobytes()
    result = client_result(headers, body)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a)
    assert result.as_numpy("S").reshape(-1).tolist() == [b"\xff\xfe", b"ok"]
    np.testing.assert_array_equal(result.as_numpy("H"), h)
    assert result.as_numpy("Z").size == 0


def test_encode_binary_output_is_zero_copy_for_contiguous_arrays():
    a = np.arange(1000, dtype=np.float64)
    req = InferRequest("m", parameters={"binary_data_output": True})
    _, body = encode_infer_response(response_of(InferTensor("A", "FP64", [1000], a)), req)
    assert isinstance(body, list) and len(body) == 2
    assert np.shares_memory(np.frombuffer(body[1], np.uint8), a)
    # a non-contiguous output is still sent row-major
    t = np.arange(6, dtype=np.int32).reshape(2, 3).T
    _, body = encode_infer_response(response_of(InferTensor("T", "INT32", [3, 2], t)), req)
    assert bytes(body[1]) == np.ascontiguousarray(t).tobytes()


def test_encode_per_output_binary_flag_overrides_default():
    a = np.ones(2, np.float32)
    tensors = [InferTensor("O1", "FP32", [2], a), InferTensor("O2", "FP32", [2], a * 2)]
    # outputs requested explicitly: each one's own binary_data decides (default JSON)
    req = InferRequest("m", outputs=[RequestedOutput("O1", {"binary_data": True}),
                                     RequestedOutput("O2", {})],
                       parameters={"binary_data_output": True})
    headers, body = encode_infer_response(response_of(*tensors), req)
    raw = as_bytes(body)
    js_len = int(dict(headers)[b"Inference-Header-Content-Length"])
    outs = orjson.loads(raw[:js_len])["outputs"]
    assert outs[0]["parameters"] == {"binary_data_size": 8} and "data" not in outs[0]
    assert outs[1]["data"] == [2.0, 2.0] and "parameters" not in outs[1]
    assert raw[js_len:] == a.tobytes()
    # no outputs requested and no binary_data_output: everything JSON
    headers, body = encode_infer_response(response_of(*tensors), InferRequest("m"))
    assert headers == [(b"Content-Type", b"application/json")]
    assert [o["data"] for o in orjson.loads(body)["outputs"]] == [[1.0, 1.0], [2.0, 2.0]]


def test_encode_non_utf8_bytes_fall_back_to_binary_and_bf16_json():
    s = np.array([b"\xff"], dtype=np.object_)
    bf16 = np.array([0x3FC0, 0xC000], np.uint16)  # 1.5, -2.0
    req = InferRequest("m")
    headers, body = encode_infer_response(
        response_of(InferTensor("S", "BYTES", [1], s), InferTensor("W", "BF16", [2], bf16),
                    params={"p": 1}), req)
    result = client_result(headers, body)
    assert result.as_numpy("S").tolist() == [b"\xff"]
    assert result.get_response()["parameters"] == {"p": 1}
    w = next(o for o in result.get_response()["outputs"] if o["name"] == "W")
    assert w["data"] == [1.5, -2.0]


def test_encode_error():
    status, body = encode_error(ServerError(Code.NOT_FOUND, "Request for unknown model: 'x' is not found"))
    assert status == 404
    assert orjson.loads(body) == {"error": "Request for unknown model: 'x' is not found"}
    status, body = encode_error(ServerError(Code.UNAVAILABLE, "Exceeds maximum queue size"))
    assert status == 503 and json.loads(body)["error"] == "Exceeds maximum queue size"


def test_decode_then_encode_round_trip_matches_client_view():
    """A request built by tritonclient, answered by echoing its inputs, parsed by tritonclient."""
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    s = np.array([b"x", b"yy"], dtype=np.object_)
    body, headers = client_body([make_input("A", a, "FP32"), make_input("S", s, "BYTES")],
                                outputs=[tc_http.InferRequestedOutput("A", binary_data=True),
                                         tc_http.InferRequestedOutput("S", binary_data=False)])
    req = decode(body, headers)
    resp = InferResponse("m", "1", req.id, [InferTensor(t.name, t.datatype, t.shape, t.data)
                                             for t in req.inputs])
    result = client_result(*encode_infer_response(resp, req))
    np.testing.assert_array_equal(result.as_numpy("A"), a)
    assert result.as_numpy("S").tolist() == ["x", "yy"]  # JSON BYTES come back as str
    assert struct.unpack("<f", a.tobytes()[:4])[0] == pytest.approx(-1.0)


# ---------------------------------------------------------------- the compiled fast path


def _decode_both(body: bytes, header_len=None):
    """(fast path result or error, Python-only result or error) for a body."""
    import pyserver.engine.protocol.http_codec as codec

    headers = {} if header_len is None else {"inference-header-content-length": str(header_len)}

    def run():
        try:
            return codec.decode_infer_request("m", "", headers.get(codec.INFER_HEADER_LENGTH),
                                              body)
        except ServerError as e:
            return e

    with_fast = run()
    saved = codec.read_common
    codec.read_common = lambda *a: None
    try:
        python_only = run()
    finally:
        codec.read_common = saved
    return with_fast, python_only


def _same(a, b):
    if isinstance(a, ServerError) or isinstance(b, ServerError):
        return (type(a), getattr(a, "message", None)) == (type(b), getattr(b, "message", None))
    if (a.id, a.parameters, a.priority, a.timeout_us) != (b.id, b.parameters, b.priority,
                                                          b.timeout_us):
        return False
    if [(o.name, o.parameters) for o in a.outputs] != [(o.name, o.parameters) for o in b.outputs]:
        return False
    for x, y in zip(a.inputs, b.inputs, strict=True):
        if (x.name, x.datatype, list(x.shape), x.parameters) != \
                (y.name, y.datatype, list(y.shape), y.parameters):
            return False
        if x.data.dtype != y.data.dtype or x.data.shape != y.data.shape or \
                not np.array_equal(x.data, y.data):
            return False
    return True


def _json_variants():
    def doc(inputs, **extra):
        return {"inputs": inputs, **extra}

    def t(name="A", datatype="FP32", shape=(2,), data=(1, 2), **extra):
        d = {"name": name, "datatype": datatype, "shape": list(shape), **extra}
        if data is not None:
            d["data"] = list(data)
        return d

    yield doc([t()])
    yield doc([t(), t(name="B", datatype="INT32", data=[3, 4])], id="x")
    yield doc([t(datatype="UINT8", data=[1, -1])])
    yield doc([t(datatype="INT64", data=[1.5, 2])])
    yield doc([t(datatype="BOOL", data=[True, False])])
    # the compiled fill of flat lists: int64-then-cast vs float64-then-cast,
    # wrap-around of C casts, and what it leaves to numpy
    big = (1 << 54) + (1 << 30) + 1
    for datatype in ("FP32", "FP64", "INT32", "INT64", "UINT8", "UINT16", "FP16"):
        yield doc([t(datatype=datatype, data=[big, 3])])
        yield doc([t(datatype=datatype, data=[big, 0.5])])
        yield doc([t(datatype=datatype, data=[1 << 40, -7])])
        yield doc([t(datatype=datatype, data=[300, 2])])
        yield doc([t(datatype=datatype, data=[(1 << 63) + 5, 1])])
        yield doc([t(datatype=datatype, data=[1e300, -1e-300])])
        yield doc([t(datatype=datatype, data=[True, 1])])
        yield doc([t(datatype=datatype, data=[1, None])])
        yield doc([t(datatype=datatype, data=[1, 2, 3])])
    yield doc([t(datatype="BOOL", data=[1, 0])])
    yield doc([t(datatype="FP64", shape=(2, 2), data=[[1, 2], [3, 4]])])
    yield doc([t(shape=(2, 2), data=[[1, 2], [3]])])
    yield doc([t(shape=(3,))])
    yield doc([t(shape=(0,), data=[])])
    yield doc([t(shape=(-1,))])
    yield doc([t(shape=(2,), data=None)])
    yield doc([t(), t()])
    yield doc([t(datatype="BYTES", data=["a", "b"])])
    yield doc([t(datatype="BF16")])
    yield doc([t(datatype="NOPE")])
    yield doc([t()], id=7)
    yield doc([t()], parameters={"binary_data_output": True})
    yield doc([t()], parameters={"binary_data_output": 1})
    yield doc([t()], parameters={"priority": 2, "timeout": 5})
    yield doc([t()], parameters={"sequence_id": 4, "sequence_start": True})
    yield doc([t()], parameters={"triton_x": 1})
    yield doc([t()], outputs=[{"name": "Y"}, {"name": "Z", "parameters": {"binary_data": True}}])
    yield doc([t()], outputs=[{"name": "Y"}, {"name": "Y"}])
    yield doc([t()], outputs=[{"name": "Y", "parameters": {"binary_data": "yes"}}])
    yield doc([t()], outputs=[{"name": "Y", "parameters": {"classification": 2}}])
    yield doc([t()], outputs=[{"name": "Y", "parameters": {"shared_memory_region": "r"}}])
    yield doc([t(parameters={"shared_memory_region": "r"}, data=None)])
    yield doc([t(parameters={})])
    yield doc([t(parameters={"binary_data_size": 8})])
    yield doc([t(shape=(2, 10**18))])
    yield doc([t(shape=(1 << 62, 4))])
    yield doc("inputs")
    yield {"outputs": []}
    yield [1, 2]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("document", list(_json_variants()), ids=str)
def test_compiled_json_path_decodes_as_python_does(document):
    fast, python_only = _decode_both(json.dumps(document).encode())
    assert _same(fast, python_only), (fast, python_only)


@pytest.mark.parametrize("sizes,extra,shape", [
    ((8, 8), b"", [2]), ((8, 4), b"", [2]), ((8, 8), b"xx", [2]), ((8, 8), b"", [3]),
    ((8, 16), b"", [2]), ((0, 8), b"", [0]),
])
def test_compiled_binary_path_decodes_as_python_does(sizes, extra, shape):
    a = np.arange(2, dtype=np.float32)
    b = np.arange(2, dtype=np.int32)
    header = json.dumps({"inputs": [
        {"name": "A", "datatype": "FP32", "shape": shape,
         "parameters": {"binary_data_size": sizes[0]}},
        {"name": "B", "datatype": "INT32", "shape": [2],
         "parameters": {"binary_data_size": sizes[1]}}],
        "outputs": [{"name": "Y", "parameters": {"binary_data": True}}]}).encode()
    body = header + a.tobytes()[:sizes[0]] + b.tobytes() + b.tobytes()[:sizes[1] - 8] + extra
    fast, python_only = _decode_both(body, len(header))
    assert _same(fast, python_only), (fast, python_only)


def test_compiled_path_takes_what_tritonclient_sends():
    """The requests tritonclient.http builds by default go the compiled way."""
    import pyserver.engine.protocol.http_codec as codec

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    for binary in (True, False):
        body, headers = client_body([make_input("INPUT0", a, "FP32", binary)],
                                    [tc_http.InferRequestedOutput("OUTPUT0", binary_data=binary)])
        decoded = codec.read_common("m", "", body, int(headers.get(
            "inference-header-content-length", len(body))), 1 << 26)
        assert decoded is not None
        np.testing.assert_array_equal(decoded.inputs[0].data, a)


def _encode_both(response, request):
    import pyserver.engine.protocol.http_codec as codec

    def flat(result):
        headers, body = result
        return headers, b"".join(bytes(b) for b in body) if type(body) is list else body

    # the whole answer, compiled where it can be, against the Python path's
    with_fast = b"".join(bytes(p) for p in codec.answer_infer(response, request, True, False))
    saved = codec.json_answer
    codec.json_answer = lambda *a: None
    try:
        python_only = b"".join(bytes(p) for p in codec.answer_infer(response, request, True,
                                                                    False))
    finally:
        codec.json_answer = saved
    return with_fast, python_only


@pytest.mark.parametrize("case", range(9))
def test_compiled_encoding_matches_python(case):
    import pyserver.engine.protocol.http_codec as codec

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[True], [False]])
    outs = [InferTensor("X", "FP32", [2, 3], a), InferTensor("Y", "BOOL", [2, 1], b)]
    req_outputs, params, rid, resp_params = [], {}, "", None
    if case == 1:
        params = {"binary_data_output": True}
    elif case == 2:
        req_outputs = [RequestedOutput("X", {"binary_data": True}), RequestedOutput("Y")]
    elif case == 3:
        rid = "r1"
        resp_params = {"p": 1}
    elif case == 4:
        outs[0] = InferTensor("X", "FP32", [3, 2], a.T)  # not row-major: Python's way
    elif case == 5:
        outs[0] = InferTensor("X", "FP32", [2, 3], a.astype(">f4"))  # big-endian
    elif case == 6:
        outs.append(InferTensor("S", "BYTES", [1], np.array([b"x"], dtype=np.object_)))
    elif case == 7:
        outs = [InferTensor("X", "FP32", [2, 3], a, {"extra": 1})]
        params = {"binary_data_output": True}
    elif case == 8:
        outs = [InferTensor("X", "FP32", [0, 3], np.empty((0, 3), np.float32))]
        params = {"binary_data_output": True}
    request = InferRequest("m", "", rid, [], req_outputs, params)
    response = InferResponse("m", "1", rid, outs, resp_params)
    fast, python_only = _encode_both(response, request)
    assert fast == python_only
    # json_writer takes plain numeric outputs without parameters
    taken = codec.json_answer(response, request, codec.JSON_HEADERS, True, False) is not None
    assert taken == (case not in (3, 4, 5, 6, 7))
    # the whole answer in one call: the framing the frontend would add
    from pyserver.engine.protocol.http_infer import http_message

    for keep_alive, http10 in ((True, False), (False, False), (True, True)):
        whole = codec.answer_infer(response, request, keep_alive, http10)
        headers, body = codec.encode_infer_response(response, request)
        framed = http_message(b"HTTP/1.1 200 OK\r\n", headers, body, keep_alive, http10)
        assert b"".join(bytes(p) for p in whole) == b"".join(bytes(p) for p in framed)


def _common_or_python(body: bytes, headers: dict):
    """The reader's answer (None: not its case) and the Python decoder's, for
    the same request."""
    import pyserver.engine.protocol.http_codec as codec

    hval = headers.get(b"inference-header-content-length")
    try:
        python = codec.decode_infer_request("m", "", hval, body)
    except ServerError as e:
        python = e
    common = None
    if hval is None or (hval.isdigit() and int(hval) <= len(body)):
        common = codec.read_common("m", "", body, len(body) if hval is None else int(hval),
                                   1 << 26)
    return common, python


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("document", list(_json_variants()), ids=str)
def test_common_request_decodes_as_python_does_or_declines(document):
    common, python = _common_or_python(json.dumps(document).encode(), {})
    if common is not None:
        assert not isinstance(python, ServerError) and _same(common, python)


@pytest.mark.parametrize("hval", [None, b"%d", b" %d", b"+%d", b"%d0", b"0", b"-1", b"x",
                                  b"99999999999999999999"])
def test_common_request_header_length_cases(hval):
    a = np.arange(2, dtype=np.float32)
    header = json.dumps({"inputs": [{"name": "A", "datatype": "FP32", "shape": [2],
                                     "parameters": {"binary_data_size": 8}}]}).encode()
    body = header + a.tobytes()
    headers = {}
    if hval is not None:
        headers[b"inference-header-content-length"] = hval % len(header) if b"%d" in hval else hval
    common, python = _common_or_python(body, headers)
    if common is not None:
        assert not isinstance(python, ServerError) and _same(common, python)
    if hval in (b"%d",):
        assert common is not None  # the plain case is taken


def test_frontend_message_framing():
    from pyserver.engine.protocol.http_infer import http_message

    assert http_message(b"HTTP/1.1 404 Not Found\r\n", [(b"A", b"1")], b"{}", True, False) == \
        [b"HTTP/1.1 404 Not Found\r\nA: 1\r\nContent-Length: 2\r\n\r\n{}"]
    assert http_message(b"HTTP/1.1 200 OK\r\n", [], b"", False, False) == \
        [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"]
    assert http_message(b"HTTP/1.1 200 OK\r\n", None, [b"ab", memoryview(b"cde")], True, True) \
        == [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n", b"ab",
            memoryview(b"cde")]
    big = b"x" * 70000
    head, body = http_message(b"HTTP/1.1 200 OK\r\n", [], big, True, False)
    assert body is big and head.endswith(b"Content-Length: 70000\r\n\r\n")


def _orjson_answer(response, request, keep_alive=True, http10=False):
    """The answer as the orjson path writes it (encode_infer_response +
    http_message)."""
    import pyserver.engine.protocol.http_codec as codec
    from pyserver.engine.protocol.http_infer import http_message

    headers, body = codec.encode_infer_response(response, request)
    return b"".join(bytes(p) for p in http_message(b"HTTP/1.1 200 OK\r\n", headers, body,
                                                  keep_alive, http10))


def _random_values(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":  # any finite bit pattern, plus the awkward ones
        bits = rng.integers(0, 1 << (8 * dtype.itemsize), n, dtype=np.uint64, endpoint=False)
        values = bits.astype(f"u{dtype.itemsize}").view(dtype)
        values = np.where(np.isfinite(values), values, 0).astype(dtype)
        special = np.array([0.0, -0.0, 1.0, 0.1, 1e-5, 1e-6, 1e-7, 1e13, 1e15, 1e16, 1e17,
                            123456.7, 2 / 3, np.finfo(dtype).max, np.finfo(dtype).tiny,
                            np.finfo(dtype).smallest_subnormal], dtype=dtype)
        return np.concatenate([values, special, -special])
    if dtype.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return np.concatenate([values, np.array([info.min, info.max, 0], dtype=dtype)])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int16", "int32", "int64",
                                   "uint8", "uint16", "uint32", "uint64", "bool"])
def test_json_answer_writes_what_orjson_writes(dtype):
    """The C writer's answer is the orjson path's, byte for byte, over
    random values of every numeric type (any finite float bit pattern)."""
    from pyserver.engine.protocol.http_codec import JSON_HEADERS
    from pyserver.engine.protocol.http_infer import json_answer

    rng = np.random.default_rng(7)
    # JSON data; all binary; per output (one binary, one JSON); asked
    # binary but empty (a JSON answer, as encode_infer_response gives)
    asks = [({}, []), ({"binary_data_output": True}, []),
            ({}, [RequestedOutput("OUT\"0", {"binary_data": True}), RequestedOutput("é\n", {})]),
            ({"binary_data_output": True}, [RequestedOutput("é\n", None)])]
    for i in range(20):
        a = _random_values(rng, dtype, 200)
        b = a[: len(a) // 2].reshape(2, -1) if len(a) % 4 == 0 else a[:2].reshape(1, 2)
        if i == 0:
            a = a[:0]
        outs = [InferTensor("OUT\"0", "X", [len(a)], a), InferTensor("é\n", "Y", list(b.shape), b)]
        for rid in ("", "id-7"):
            for params, req_outputs in asks:
                request = InferRequest("m\\1", "", rid, [], req_outputs, params)
                response = InferResponse("m\\1", "3", rid, outs)
                for keep_alive, http10 in ((True, False), (False, False), (True, True)):
                    got = json_answer(response, request, JSON_HEADERS, keep_alive, http10)
                    assert got is not None
                    assert b"".join(bytes(p) for p in got) == \
                        _orjson_answer(response, request, keep_alive, http10)


def test_json_answer_declines_what_it_does_not_write():
    """Anything but plain JSON numbers without parameters is left to the
    orjson path (None), which then answers as before."""
    import pyserver.engine.protocol.http_codec as codec
    from pyserver.engine.protocol.http_infer import json_answer

    a = np.arange(4, dtype=np.float32)

    def answer(outs, params=None, req_outputs=(), resp_params=None, name="m"):
        request = InferRequest(name, "", "", [], list(req_outputs), params or {})
        response = InferResponse(name, "1", "", outs, resp_params)
        got = json_answer(response, request, codec.JSON_HEADERS, True, False)
        try:
            whole = codec.answer_infer(response, request, True, False)
        except TypeError:  # orjson refuses a lone surrogate (the frontend's 500)
            whole = None
        return got, whole, request, response

    declined = [
        answer([InferTensor("X", "FP32", [4], np.array([1, np.nan, 2, 3], np.float32))]),
        answer([InferTensor("X", "FP64", [2], np.array([np.inf, 1.0]))]),
        answer([InferTensor("X", "FP16", [4], a.astype(np.float16))]),
        answer([InferTensor("X", "FP16", [4], a.astype(np.float16))],
               params={"binary_data_output": True}, resp_params={"k": 1}),
        answer([InferTensor("X", "FP32", [4], a)], resp_params={"k": "v"}),
        answer([InferTensor("X", "FP32", [4], a, {"p": 1})]),
        answer([InferTensor("X", "FP32", [2, 2], a.reshape(2, 2).T)]),
        answer([InferTensor("X", "FP32", [4], a.astype(">f4"))]),
        answer([InferTensor("X", "FP32", [], np.float32(1.0) * np.ones((), np.float32))]),
        answer([InferTensor("X", "FP32", [np.int64(4)], a)]),
        answer([InferTensor("\ud800", "FP32", [4], a)]),
        answer([InferTensor("S", "BYTES", [1], np.array([b"x"], dtype=np.object_))]),
    ]
    for i, (got, whole, request, response) in enumerate(declined):
        assert got is None, i
        if whole is not None:  # the orjson path still answers it, as before
            assert b"".join(bytes(p) for p in whole) == _orjson_answer(response, request)
    # NaN goes out as orjson's null through the fallback
    got, whole, request, response = declined[0]
    assert b'"data":[1.0,null,2.0,3.0]' in b"".join(bytes(p) for p in whole)
    # FP16 goes as binary data, not as JSON numbers: small outputs copied
    # into the one answer, large ones (64 KiB and up) after it as views
    request = InferRequest("m", "", "", [], [], {"binary_data_output": True})
    for count in (4, 1 << 16):
        half = (np.arange(count) % 2048).astype(np.float16)
        response = InferResponse("m", "1", "", [InferTensor("X", "FP16", [count], half)])
        got = json_answer(response, request, codec.JSON_HEADERS, True, False)
        if count == 4:
            assert len(got) == 1
        else:
            assert len(got) == 2 and got[1].obj is half
        assert b"".join(bytes(p) for p in got) == _orjson_answer(response, request)


def _reader_variants():
    """Raw documents for the simdjson reader: what json.dumps cannot write
    (duplicate keys, nulls) beside the corpus above."""
    for document in _json_variants():
        yield json.dumps(document).encode()
    a = '{"name":"A","datatype":"FP32","shape":[2],"data":[1,2]}'
    yield ('{"inputs":[%s],"inputs":[%s]}' % (a, a)).encode()
    yield ('{"inputs":[{"name":"A","name":"B","datatype":"FP32","shape":[2],"data":[1,2]}]}').encode()
    yield ('{"inputs":[%s],"parameters":null,"outputs":null,"extra":{"x":[1]}}' % a).encode()
    yield ('{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[1,2],"parameters":null,'
           '"what":1}],"id":"r"}').encode()
    yield ('{"inputs":[%s],"id":null}' % a).encode()
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":null}]}'
    yield b'{"inputs":[{"name":"A","datatype":"INT32","shape":[3],"data":[-0,0,-2147483649]}]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[3],"data":[-0,-0.0,1e-46]}]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[2.0],"data":[1,2]}]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[true],"data":[1]}]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[1,2]}],"outputs":[{"name":"Y","parameters":null}]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[1,2]}],"outputs":[{"parameters":{}}]}'
    yield b'{"inputs":[{"name":"\\u00e9\\n","datatype":"FP32","shape":[1],"data":[1]}],"id":"\\"q\\""}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[1]}]} x'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[1]}],}'
    yield b'{"inputs":[{"name":"\\ud800","datatype":"FP32","shape":[1],"data":[1]}]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[1],"data":[18446744073709551616]}]}'
    yield b'{"inputs":[{"name":"A","datatype":"INT64","shape":[1],"data":[9223372036854775808]}]}'
    yield b'{"inputs":[]}'
    yield b'\xef\xbb\xbf{"inputs":[]}'
    yield b'{"inputs":[{"name":"A","datatype":"FP32","shape":[2],"data":[1,2]}]'


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("body", list(_reader_variants()), ids=lambda b: b[:60].decode("latin-1"))
def test_json_reader_reads_as_orjson_path_or_declines(body):
    """What csrc's InferRequestReader (simdjson) makes of a request is what
    orjson + the Python walk make of it; where it declines, they decide."""
    import pyserver.engine.protocol.http_codec as codec
    from pyserver.engine.protocol.http_infer import read_plain

    read = read_plain("m", "", body, len(body), 1 << 26, codec.WIRE_TO_NUMPY)
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        assert read is None
        return
    saved = codec.read_common
    codec.read_common = lambda *a: None
    try:
        walked = codec.decode_infer_request("m", "", None, body)
    except ServerError as e:
        walked = e
    finally:
        codec.read_common = saved
    if read is not None:
        assert not isinstance(walked, ServerError) and _same(read, walked), (read, walked)


def test_json_reader_takes_the_common_requests():
    """The requests tritonclient sends for numeric tensors (JSON data or
    binary, with outputs and an id) are read by the reader, not orjson."""
    import pyserver.engine.protocol.http_codec as codec
    from pyserver.engine.protocol.http_infer import read_plain

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([[1, -2, 3]], dtype=np.int64)
    for binary in (False, True):
        inputs = [make_input("A", a, "FP32", binary), make_input("B", b, "INT64", binary)]
        outputs = [tc_http.InferRequestedOutput("Y", binary_data=binary)]
        body, headers = client_body(inputs, outputs, request_id="req-1")
        body = body if isinstance(body, bytes) else body.encode()
        hlen = int(headers.get("inference-header-content-length", len(body)))
        read = read_plain("m", "", body, hlen, 1 << 26, codec.WIRE_TO_NUMPY)
        assert read is not None and read.id == "req-1"
        np.testing.assert_array_equal(read.inputs[0].data, a)
        np.testing.assert_array_equal(read.inputs[1].data, b)
        assert [(o.name, o.parameters) for o in read.outputs] == [("Y", {"binary_data": binary})]


def test_json_reader_binary_inputs_view_the_body():
    """Binary inputs are read-only views of the request body, flagged as
    np.ndarray(shape, dtype, body, offset) flags them; a body that is not
    bytes (a bytearray) gets that numpy view itself."""
    import pyserver.engine.protocol.http_codec as codec
    from pyserver.engine.protocol.http_infer import read_plain

    flags = ["C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA", "WRITEABLE", "ALIGNED"]
    a = np.arange(16, dtype=np.float32)
    for pad in range(4):
        header = json.dumps({"id": "x" * pad, "inputs": [
            {"name": "A", "datatype": "FP32", "shape": [2, 8],
             "parameters": {"binary_data_size": 64}}]}).encode()
        body = header + a.tobytes()
        got = read_plain("m", "", body, len(header), 1 << 26, codec.WIRE_TO_NUMPY).inputs[0].data
        ref = np.ndarray([2, 8], np.dtype(np.float32), body, len(header))
        assert [got.flags[f] for f in flags] == [ref.flags[f] for f in flags]
        assert got.base is body and np.array_equal(got, a.reshape(2, 8))
        mutable = bytearray(body)
        got = read_plain("m", "", mutable, len(header), 1 << 26,
                         codec.WIRE_TO_NUMPY).inputs[0].data
        np.testing.assert_array_equal(got, a.reshape(2, 8))
        assert got.base is mutable and got.flags.writeable
