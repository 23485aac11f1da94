"""pyserver.engine.protocol.grpc_codec (C++ wire codec under Cython) checked against
the protobuf library's own encoding of the same messages, plus the typed
`contents` decoder and the gRPC header helpers."""

import numpy as np
import pytest

from pyserver._proto import message_class
from pyserver.engine.protocol.grpc_codec import (
    decode_infer_request,
    encode_infer_response,
    encode_stream_response,
)
from pyserver.engine.protocol.http2 import percent_encode
from pyserver.frontends.grpc import decode_contents, parse_restricted_protocols
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferResponse, InferTensor

Request = message_class("inference.ModelInferRequest")
Response = message_class("inference.ModelInferResponse")
StreamResponse = message_class("inference.ModelStreamInferResponse")


def request(inputs=(), raw=(), **kwargs):
    req = Request(model_name="m", **kwargs)
    for name, datatype, shape in inputs:
        req.inputs.add(name=name, datatype=datatype, shape=list(shape))
    req.raw_input_contents.extend(raw)
    return req


def decode(req, decoder=decode_contents):
    return decode_infer_request(req.SerializeToString(), decoder)


def bad(fn, text=None, code=Code.INVALID_ARG):
    with pytest.raises(ServerError) as err:
        fn()
    assert err.value.code == code, err.value
    if text is not None:
        assert err.value.message == text
    return err.value


# ---------------------------------------------------------------- decoding


def test_raw_inputs_are_read_only_views_of_the_message():
    a = np.arange(16, dtype=np.float32).reshape(2, 8)
    req = request([("X", "FP32", (2, 8))], [a.tobytes()], model_version="3", id="abc")
    req.outputs.add(name="Y")
    msg = req.SerializeToString()
    r, flags = decode_infer_request(msg)
    assert flags is None
    assert isinstance(r, InferRequest)
    assert (r.model_name, r.model_version, r.id) == ("m", "3", "abc")
    (t,) = r.inputs
    assert isinstance(t, InferTensor)
    assert (t.name, t.datatype, t.shape, t.parameters) == ("X", "FP32", [2, 8], {})
    np.testing.assert_array_equal(t.data, a)
    assert not t.data.flags.writeable
    assert t.data.base is msg  # no copy
    assert t.data.flags.aligned == (t.data.ctypes.data % 4 == 0)
    assert [o.name for o in r.outputs] == ["Y"] and r.outputs[0].parameters == {}
    assert r.parameters == {} and r.priority == 0 and r.timeout_us == 0


@pytest.mark.parametrize("datatype,dtype", [
    ("BOOL", np.bool_), ("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32),
    ("UINT64", np.uint64), ("INT8", np.int8), ("INT16", np.int16), ("INT32", np.int32),
    ("INT64", np.int64), ("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64),
    ("BF16", np.uint16)])
def test_every_raw_datatype(datatype, dtype):
    values = (np.arange(6) % 2).astype(dtype).reshape(3, 2)
    r, _ = decode(request([("X", datatype, (3, 2))], [values.tobytes()]))
    assert r.inputs[0].data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(r.inputs[0].data, values)


def test_bytes_inputs_and_their_errors():
    def enc(*items):
        return b"".join(len(x).to_bytes(4, "little") + x for x in items)

    r, _ = decode(request([("S", "BYTES", (1, 3))], [enc(b"a", b"", b"xyz")]))
    data = r.inputs[0].data
    assert data.dtype == object and data.shape == (1, 3)
    assert data.tolist() == [[b"a", b"", b"xyz"]]
    bad(lambda: decode(request([("S", "BYTES", (2,))], [enc(b"a")])),
        "[request id: <id_unknown>] expected 2 string elements for inference input 'S' for "
        "model 'm', got 1")
    bad(lambda: decode(request([("S", "BYTES", (1,))], [enc(b"a", b"b")])),
        "[request id: <id_unknown>] unexpected number of string elements 2 for inference input "
        "'S' for model 'm', expecting 1")
    bad(lambda: decode(request([("S", "BYTES", (1,))], [b"\x01\x00"])),
        "[request id: <id_unknown>] incomplete string length indicator for inference input 'S' "
        "for model 'm', expecting 4 bytes but only 2 bytes available")
    bad(lambda: decode(request([("S", "BYTES", (1,))], [b"\x09\x00\x00\x00ab"])),
        "[request id: <id_unknown>] element byte size indicator exceeds the end of the buffer "
        "for inference input 'S' for model 'm'")


def test_raw_input_errors():
    bad(lambda: decode(request([("X", "FP32", (1, 4))], [b"\0" * 12], id="r9")),
        "[request id: r9] input byte size mismatch for input 'X' for model 'm'. "
        "Expected 16, got 12")
    bad(lambda: decode(request([("X", "FP32", (-1, 4))], [b"\0" * 16])))
    bad(lambda: decode(request([("X", "FP33", (4,))], [b"\0" * 16])),
        "invalid datatype for input X")
    bad(lambda: decode(request([("X", "FP32", (4,)), ("Y", "FP32", (4,))], [b"\0" * 16])),
        "unable to find data for input tensor 'Y' for model 'm' in request.")
    huge = (1 << 40, 1 << 40)
    bad(lambda: decode(request([("X", "FP32", huge)], [b"\0" * 16])))
    bad(lambda: decode(request([("X", "FP32", (1,) * 40)], [b"\0" * 4])))
    r, _ = decode(request([("X", "FP32", (0, 4))], [b""]))
    assert r.inputs[0].data.shape == (0, 4)
    bad(lambda: decode_infer_request(b"\x0a\x05ab"))  # INVALID_ARG: the client's bytes
    bad(lambda: decode_infer_request(b"\x0a\x02\xff\xfe"))  # model name not UTF-8
    # an input name (or any string) that is not UTF-8: the client's, not INTERNAL (#27)
    not_utf8 = request([("X", "FP32", (1,))], [b"\0" * 4]).SerializeToString().replace(
        b"\x0a\x01X", b"\x0a\x01\xff")
    bad(lambda: decode_infer_request(not_utf8))


def test_request_parameters():
    req = request(id="p")
    req.parameters["priority"].uint64_param = 3
    req.parameters["timeout"].int64_param = 5000
    req.parameters["sequence_id"].int64_param = 42
    req.parameters["sequence_start"].bool_param = True
    req.parameters["custom"].string_param = "v"
    req.parameters["count"].int64_param = -7
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    r, flags = decode(req)
    assert (r.priority, r.timeout_us) == (3, 5000)
    assert r.parameters == {"sequence_id": 42, "sequence_start": True, "custom": "v",
                            "count": -7}
    assert flags == {"triton_enable_empty_final_response": True}

    def with_param(key, kind, value):
        req = request()
        setattr(req.parameters[key], kind, value)
        return lambda: decode(req)

    bad(with_param("priority", "int64_param", -1),
        "invalid value for 'priority', expected value >= 0.")
    bad(with_param("priority", "string_param", "hi"),
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param.")
    bad(with_param("timeout", "bool_param", True),
        "invalid value type for 'timeout' parameter, expected int64_param.")
    bad(with_param("sequence_start", "int64_param", 1),
        "invalid value type for 'sequence_start' parameter, expected bool_param.")
    bad(with_param("sequence_id", "bool_param", True),
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.")
    bad(with_param("ratio", "uint64_param", 5),
        "invalid value type for 'ratio' parameter, expected int64_param, bool_param, or "
        "string_param.")
    # a double is taken, as Triton takes it (tritonclient sends Python floats so: #21)
    req = request()
    req.parameters["ratio"].double_param = 0.5
    assert decode(req)[0].parameters["ratio"] == 0.5
    bad(with_param("triton_other", "bool_param", True),
        "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
        "following keys starting with 'triton_' are allowed: "
        "triton_enable_empty_final_response")


def test_tensor_parameters_and_shared_memory_flag():
    req = request([("X", "FP32", (4,))])
    p = req.inputs[0].parameters
    p["shared_memory_region"].string_param = "reg"
    p["shared_memory_byte_size"].int64_param = 16
    out = req.outputs.add(name="Y")
    out.parameters["classification"].int64_param = 2
    out.parameters["flag"].bool_param = False
    out.parameters["big"].uint64_param = 1 << 63
    out.parameters["d"].double_param = 1.5
    r, flags = decode(req)
    assert flags == {"shared_memory": True}
    assert r.inputs[0].data is None
    assert r.inputs[0].parameters == {"shared_memory_region": "reg",
                                      "shared_memory_byte_size": 16}
    assert r.outputs[0].parameters == {"classification": 2, "flag": False, "big": 1 << 63,
                                       "d": 1.5}
    req.inputs[0].contents.fp32_contents.extend([1, 2, 3, 4])
    bad(lambda: decode(req), "unexpected 'content' provided when using shared memory for "
                             "input tensor 'X' for model 'm'")


# ---------------------------------------------------------------- typed contents


@pytest.mark.parametrize("datatype,field,values,dtype", [
    ("BOOL", "bool_contents", [True, False], np.bool_),
    ("INT8", "int_contents", [1, -2], np.int8),
    ("INT16", "int_contents", [300, -300], np.int16),
    ("INT32", "int_contents", [(1 << 31) - 1, -(1 << 31)], np.int32),
    ("INT64", "int64_contents", [(1 << 63) - 1, -(1 << 63)], np.int64),
    ("UINT8", "uint_contents", [255, 3], np.uint8),
    ("UINT16", "uint_contents", [65535, 1], np.uint16),
    ("UINT32", "uint_contents", [(1 << 32) - 1, 0], np.uint32),
    ("UINT64", "uint64_contents", [(1 << 64) - 1, 0], np.uint64),
    ("FP32", "fp32_contents", [1.5, -2.0], np.float32),
    ("FP64", "fp64_contents", [1e100, -2.0], np.float64),
])
def test_typed_contents(datatype, field, values, dtype):
    req = request([("X", datatype, (1, 2))])
    getattr(req.inputs[0].contents, field).extend(values)
    r, _ = decode(req)
    data = r.inputs[0].data
    assert data.dtype == np.dtype(dtype) and data.shape == (1, 2)
    np.testing.assert_array_equal(data, np.array(values, dtype=dtype).reshape(1, 2))


def test_typed_contents_bytes_and_errors():
    req = request([("S", "BYTES", (2,))])
    req.inputs[0].contents.bytes_contents.extend([b"x", b"yz"])
    r, _ = decode(req)
    assert r.inputs[0].data.tolist() == [b"x", b"yz"]

    req = request([("X", "FP32", (2,))])
    req.inputs[0].contents.fp32_contents.extend([1.0])
    bad(lambda: decode(req), "[request id: <id_unknown>] input byte size mismatch for input "
                             "'X' for model 'm'. Expected 8, got 4")
    req.inputs[0].contents.fp32_contents.append(2.0)
    req.inputs[0].contents.fp64_contents.extend([1.0, 2.0])
    bad(lambda: decode(req), "unexpected explicit tensor data for input tensor 'X' for model "
                             "'m', binary data was already supplied.")
    req = request([("X", "FP16", (1,))])
    req.inputs[0].contents.fp32_contents.append(1.0)
    bad(lambda: decode(req), "unexpected explicit tensor data for input tensor 'X' for model "
                             "'m' of type 'FP32', expected datatype 'FP16'")
    req = request([("X", "FP32", (1,))])
    req.inputs[0].contents.fp32_contents.append(1.0)
    bad(lambda: decode(req, None), code=Code.UNSUPPORTED)


# ---------------------------------------------------------------- encoding


def parse(payload, cls=Response):
    assert payload[0] == 0
    assert int.from_bytes(payload[1:5], "big") == len(payload) - 5
    return cls.FromString(payload[5:])


def test_encode_response_matches_protobuf():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    strings = np.array([b"x", b"hello"], dtype=object)
    outputs = [InferTensor("A", "FP32", [2, 3], a, {"flag": True}),
               InferTensor("S", "BYTES", (2,), strings),
               InferTensor("T", "INT64", [3, 2], np.arange(6, dtype=np.int64).reshape(2, 3).T),
               InferTensor("E", "FP32", [0], None),
               InferTensor("Z", "FP64", [], np.array(2.5))]
    resp = InferResponse("m", "1", "", outputs,
                         {"n": 7, "u": 1 << 63, "f": 0.25, "s": "str", "b": False})
    req = InferRequest("m", id="from-request")
    msg = parse(encode_infer_response(resp, req))
    assert (msg.model_name, msg.model_version, msg.id) == ("m", "1", "from-request")
    assert msg.parameters["n"].int64_param == 7
    assert msg.parameters["u"].uint64_param == 1 << 63
    assert msg.parameters["f"].double_param == 0.25
    assert msg.parameters["s"].string_param == "str"
    assert msg.parameters["b"].WhichOneof("parameter_choice") == "bool_param"
    assert [o.name for o in msg.outputs] == ["A", "S", "T", "E", "Z"]
    assert list(msg.outputs[0].shape) == [2, 3]
    assert msg.outputs[0].parameters["flag"].bool_param is True
    assert len(msg.raw_output_contents) == 5
    np.testing.assert_array_equal(np.frombuffer(msg.raw_output_contents[0], np.float32), a.ravel())
    assert msg.raw_output_contents[1] == b"\x01\x00\x00\x00x\x05\x00\x00\x00hello"
    np.testing.assert_array_equal(np.frombuffer(msg.raw_output_contents[2], np.int64),
                                  np.arange(6).reshape(2, 3).T.ravel())  # made contiguous
    assert msg.raw_output_contents[3] == b""
    assert np.frombuffer(msg.raw_output_contents[4], np.float64)[0] == 2.5
    # byte for byte what the protobuf library writes for the same message
    twin = Response(model_name="m", model_version="1", id="x")
    o = twin.outputs.add(name="A", datatype="FP32", shape=[2, 3])
    twin.raw_output_contents.append(a.tobytes())
    resp = InferResponse("m", "1", "x", [InferTensor("A", "FP32", [2, 3], a)])
    assert encode_infer_response(resp)[5:] == twin.SerializeToString()
    del o


def test_encode_large_response():
    big = np.random.rand(1 << 20).astype(np.float32)  # 4 MiB: copied without the GIL
    payload = encode_infer_response(InferResponse("m", "1", "", [
        InferTensor("A", "FP32", [1 << 20], big)]))
    np.testing.assert_array_equal(
        np.frombuffer(parse(payload).raw_output_contents[0], np.float32), big)


def test_encode_stream_responses():
    a = np.ones(2, np.float32)
    resp = InferResponse("m", "2", "id7", [InferTensor("A", "FP32", [2], a)],
                         {"triton_final_response": True})
    msg = parse(encode_stream_response(resp), StreamResponse)
    assert msg.error_message == ""
    assert msg.infer_response.id == "id7"
    assert msg.infer_response.parameters["triton_final_response"].bool_param
    err = parse(encode_stream_response(None, InferRequest("m", id="r1"), "it broke"),
                StreamResponse)
    assert err.error_message == "it broke" and err.infer_response.id == "r1"
    err = parse(encode_stream_response(None, None, "no id"), StreamResponse)
    assert err.error_message == "no id" and not err.HasField("infer_response")


# ---------------------------------------------------------------- helpers


def test_percent_encode():
    assert percent_encode("plain: ok") == b"plain: ok"
    assert percent_encode("100%\n") == b"100%25%0A"
    assert percent_encode("caf\u00e9") == b"caf%C3%A9"


def test_parse_restricted_protocols():
    assert parse_restricted_protocols(["health,statistics:k=v"]) == {
        "health": ("triton-grpc-protocol-k", "v"), "statistics": ("triton-grpc-protocol-k", "v")}
    assert parse_restricted_protocols({"inference": ("a", "b")}) == {"inference": ("a", "b")}
    for spec in (["nonsense:k=v"], ["health"], ["health:k"], ["health:k=v", "health:k2=v"]):
        with pytest.raises(ValueError):
            parse_restricted_protocols(spec)


def test_classification_is_an_int64_above_zero():
    """As Triton's gRPC frontend (grpc_utils.cc), before the request runs."""
    for kind, value, text in (
            ("int64_param", 0, "invalid value for 'classification' parameter, expected >= 0"),
            ("int64_param", -3, "invalid value for 'classification' parameter, expected >= 0"),
            ("uint64_param", 2, "invalid value type for 'classification' parameter, expected "
                                "int64_param"),
            ("string_param", "2", "invalid value type for 'classification' parameter, expected "
                                  "int64_param")):
        req = request([("X", "FP32", (4,))], raw=[b"\0" * 16])
        setattr(req.outputs.add(name="Y").parameters["classification"], kind, value)
        bad(lambda: decode(req), text)
