"""Fuzzed gRPC against a running server (#27): requests built field by field
(names, datatypes, shapes at the edges, raw contents, parameters of every
kind), serialized requests with bytes flipped, cut and inserted, to every
RPC, and raw HTTP/2 frames (hyperframe, hpack) on a connection of their own.
No call may end in INTERNAL or UNKNOWN for what a client sent, the server
stays up, computes correctly every 50 cases, and its file descriptors end
where they began. Replay: PYSERVER_FUZZ_SEED=<seed> PYSERVER_FUZZ_COUNT=<n>."""

import socket

import grpc
import numpy as np
from hpack import Encoder
from hyperframe import frame as h2frame
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from pyserver._proto import message_class
from tests.robustness.conftest import COUNT, SEED, open_fds
from tests.robustness.fuzz_http import DATATYPES, HUGE

SERVICE = "/inference.GRPCInferenceService/"
RPCS = {
    "ModelInfer": "inference.ModelInferRequest",
    "ModelMetadata": "inference.ModelMetadataRequest",
    "ModelConfig": "inference.ModelConfigRequest",
    "ModelStatistics": "inference.ModelStatisticsRequest",
    "RepositoryIndex": "inference.RepositoryIndexRequest",
    "RepositoryModelLoad": "inference.RepositoryModelLoadRequest",
    "SystemSharedMemoryRegister": "inference.SystemSharedMemoryRegisterRequest",
    "SystemSharedMemoryStatus": "inference.SystemSharedMemoryStatusRequest",
    "TraceSetting": "inference.TraceSettingRequest",
    "LogSettings": "inference.LogSettingsRequest",
    "ModelReady": "inference.ModelReadyRequest",
}
# INTERNAL that Triton gives a client too, for what it asked
_ALLOWED_INTERNAL = ("Unable to open shared memory region", "Invalid shared memory region")
_BAD = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS)

text = st.one_of(st.sampled_from(["add_sub", "add_sub_batched", "repeat", "bytes_echo", "",
                                  "INPUT0", "INPUT1", "OUTPUT0", "../x"]), st.text(max_size=10))
int64 = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1),
                  st.sampled_from([h for h in HUGE if h < 1 << 63] + [0, 1, 16, -1]))


@st.composite
def parameter(draw, message):
    kind = draw(st.sampled_from(["bool_param", "int64_param", "string_param", "double_param",
                                 "uint64_param"]))
    value = {"bool_param": st.booleans(), "int64_param": int64, "string_param": text,
             "double_param": st.floats(allow_nan=False),
             "uint64_param": st.integers(0, (1 << 64) - 1)}[kind]
    setattr(message, kind, draw(value))


PARAM_KEYS = ["binary_data_size", "shared_memory_region", "shared_memory_offset",
              "shared_memory_byte_size", "classification", "priority", "timeout", "sequence_id",
              "sequence_start", "sequence_end", "triton_enable_empty_final_response", "x",
              "config", "file:1/model.onnx"]


@st.composite
def infer_request(draw):
    request = message_class("inference.ModelInferRequest")(model_name=draw(text))
    if draw(st.booleans()):
        request.model_version = draw(st.sampled_from(["", "1", "2", "x", "-1"]))
    if draw(st.booleans()):
        request.id = draw(st.text(max_size=30))
    for _ in range(draw(st.integers(0, 3))):
        t = request.inputs.add(name=draw(text), datatype=draw(
            st.one_of(st.sampled_from(DATATYPES), st.text(max_size=6))))
        t.shape.extend(draw(st.lists(int64, max_size=4)))
        for _ in range(draw(st.integers(0, 2))):
            draw(parameter(t.parameters[draw(st.sampled_from(PARAM_KEYS))]))
        if draw(st.integers(0, 3)) == 0:
            t.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=20)))
        if draw(st.integers(0, 5)) == 0:
            t.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=8), max_size=4)))
    for _ in range(draw(st.integers(0, 3))):
        request.raw_input_contents.append(draw(st.one_of(
            st.just(np.arange(16, dtype=np.float32).tobytes()), st.binary(max_size=80))))
    for _ in range(draw(st.integers(0, 2))):
        out = request.outputs.add(name=draw(text))
        if draw(st.booleans()):
            draw(parameter(out.parameters[draw(st.sampled_from(PARAM_KEYS))]))
    for _ in range(draw(st.integers(0, 2))):
        draw(parameter(request.parameters[draw(st.sampled_from(PARAM_KEYS))]))
    return request.SerializeToString()


def good_request() -> bytes:
    request = message_class("inference.ModelInferRequest")(model_name="add_sub")
    for n in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=n, datatype="FP32")
        t.shape.extend([1, 16])
        request.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    return request.SerializeToString()


@st.composite
def mutated(draw, data: bytes):
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        pos = draw(st.integers(0, max(0, len(data))))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "cut":
            del data[pos:]
    return bytes(data)


def _repeated(field) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 6
    if flag is not None:
        return flag() if callable(flag) else flag
    return field.label == field.LABEL_REPEATED


@st.composite
def call(draw):
    """(method, serialized request)."""
    kind = draw(st.sampled_from(["built", "built", "mutated", "other"]))
    if kind == "built":
        return "ModelInfer", draw(infer_request())
    if kind == "mutated":
        return "ModelInfer", draw(mutated(good_request()))
    name = draw(st.sampled_from(sorted(RPCS)))
    cls = message_class(RPCS[name])
    message = cls()
    for field in cls.DESCRIPTOR.fields:
        if field.type == field.TYPE_STRING and not _repeated(field) and draw(st.booleans()):
            setattr(message, field.name, draw(text))
    return name, draw(mutated(message.SerializeToString())) if draw(st.booleans()) \
        else message.SerializeToString()


def _correct_grpc_infer(channel):
    Response = message_class("inference.ModelInferResponse")
    answer = channel.unary_unary(SERVICE + "ModelInfer", request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)(good_request(), timeout=10)
    out = np.frombuffer(Response.FromString(answer).raw_output_contents[0], np.float32)
    np.testing.assert_array_equal(out, 2 * np.arange(16, dtype=np.float32))


def test_fuzzed_grpc_calls(target):
    channel = grpc.insecure_channel(f"127.0.0.1:{target.grpc_port}")
    _correct_grpc_infer(channel)
    fds_before = open_fds(target.proc.pid)
    failures = []
    seen = [0]
    stubs = {name: channel.unary_unary(SERVICE + name, request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b) for name in RPCS}

    @seed(SEED)
    @settings(max_examples=COUNT, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(call())
    def one(case):
        name, payload = case
        try:
            stubs[name](payload, timeout=20)
        except grpc.RpcError as e:
            if e.code() in _BAD and not any(t in (e.details() or "") for t in _ALLOWED_INTERNAL):
                failures.append((name, e.code(), (e.details() or "")[:300], payload[:200]))
        seen[0] += 1
        if seen[0] % 50 == 0:
            target.check_alive_and_correct()

    one()
    _correct_grpc_infer(channel)
    channel.close()
    target.check_alive_and_correct()
    assert not failures, "\n".join(repr(f) for f in failures[:10])
    assert open_fds(target.proc.pid) <= fds_before + 4


# ---------------------------------------------------------------- raw HTTP/2

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@st.composite
def frames(draw):
    """A run of frames a client could send, from legal to nonsense."""
    encoder = Encoder()
    out = [h2frame.SettingsFrame(0, settings=draw(st.dictionaries(
        st.integers(1, 8), st.integers(0, (1 << 32) - 1), max_size=3))).serialize()]
    for _ in range(draw(st.integers(1, 8))):
        sid = draw(st.sampled_from([1, 3, 5, 2, 0, (1 << 31) - 1]))
        fid = sid or 1  # what hyperframe is given; the header gets sid
        kind = draw(st.sampled_from(["headers", "headers", "data", "window", "rst", "ping",
                                     "priority", "continuation", "goaway", "settings", "junk"]))
        if kind == "headers":
            headers = [(":method", "POST"), (":scheme", "http"),
                       (":path", draw(st.sampled_from([SERVICE + "ModelInfer", SERVICE + "X",
                                                       "/", ""]))),
                       (":authority", "x"), ("content-type", draw(st.sampled_from(
                           ["application/grpc", "text/plain", ""]))), ("te", "trailers")]
            if draw(st.booleans()):
                headers.append(("grpc-timeout", draw(st.sampled_from(["1S", "0m", "99999999H",
                                                                      "x", "-1S"]))))
            if draw(st.booleans()):
                headers.append(("grpc-encoding", draw(st.sampled_from(["gzip", "identity",
                                                                       "zstd", ""]))))
            f = h2frame.HeadersFrame(fid)
            f.data = encoder.encode(draw(st.permutations(headers)))
            f.flags = set(draw(st.lists(st.sampled_from(["END_STREAM", "END_HEADERS"]),
                                        max_size=2, unique=True)))
        elif kind == "data":
            f = h2frame.DataFrame(fid)
            body = draw(st.one_of(st.just(b"\x00" + len(good_request()).to_bytes(4, "big") +
                                          good_request()), st.binary(max_size=40)))
            f.data = body
            if draw(st.booleans()):
                f.flags.add("END_STREAM")
        elif kind == "window":
            f = h2frame.WindowUpdateFrame(fid, window_increment=draw(st.integers(0, (1 << 31) - 1)))
        elif kind == "rst":
            f = h2frame.RstStreamFrame(fid, error_code=draw(st.integers(0, 13)))
        elif kind == "ping":
            f = h2frame.PingFrame(0, opaque_data=draw(st.binary(min_size=8, max_size=8)))
        elif kind == "priority":
            f = h2frame.PriorityFrame(fid, depends_on=draw(st.integers(0, 7)),
                                      stream_weight=draw(st.integers(0, 255)))
        elif kind == "continuation":
            f = h2frame.ContinuationFrame(fid)
            f.data = draw(st.binary(max_size=20))
        elif kind == "goaway":
            f = h2frame.GoAwayFrame(0, last_stream_id=sid, error_code=draw(st.integers(0, 13)))
        elif kind == "settings":
            f = h2frame.SettingsFrame(0, settings={draw(st.integers(1, 8)):
                                                   draw(st.integers(0, (1 << 32) - 1))})
        else:
            out.append(draw(st.binary(min_size=1, max_size=30)))
            continue
        out.append(_on_stream(f.serialize(), sid))
    return b"".join(out)


def _on_stream(frame: bytes, sid: int) -> bytes:
    """The frame with its header's stream id set (hyperframe refuses some)."""
    return frame[:5] + sid.to_bytes(4, "big") + frame[9:]


def test_raw_http2_frames(target):
    channel = grpc.insecure_channel(f"127.0.0.1:{target.grpc_port}")
    _correct_grpc_infer(channel)
    fds_before = open_fds(target.proc.pid)
    seen = [0]

    @seed(SEED)
    @settings(max_examples=max(1, COUNT // 2), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(frames())
    def one(data):
        with socket.create_connection(("127.0.0.1", target.grpc_port), timeout=5) as sock:
            try:
                sock.sendall(PREFACE + data)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):  # until the server closes (or times out)
                    pass
            except (ConnectionError, socket.timeout):
                pass
        seen[0] += 1
        if seen[0] % 50 == 0:
            _correct_grpc_infer(channel)

    one()
    _correct_grpc_infer(channel)
    channel.close()
    target.check_alive_and_correct()
    assert open_fds(target.proc.pid) <= fds_before + 4
