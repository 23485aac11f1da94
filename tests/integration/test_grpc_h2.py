"""Raw HTTP/2 against the gRPC port (the h2 package as a client): the cases
grpcio never sends. Malformed bodies, unknown methods and encodings, bad
frames, an HTTP/1.1 client, RST_STREAM, interleaved streams, oversized
headers, deadlines, GOAWAY and clients that stop reading: each gets a clear
answer, nothing leaks, and the server keeps serving."""

import socket
import struct
import time
import zlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from pyserver._proto import message_class
from pyserver.testing import write_add_sub
from tests.integration.test_grpc import SLOW, start_grpc  # noqa: F401 (fixture)

pytest.importorskip("h2")
import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.settings  # noqa: E402

INFER = "/inference.GRPCInferenceService/ModelInfer"
A = np.arange(16, dtype=np.float32).reshape(1, 16)


def infer_message(model="add_sub", n=16, shape=(1, 16)) -> bytes:
    req = message_class("inference.ModelInferRequest")(model_name=model)
    values = np.arange(n, dtype=np.float32).tobytes()
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=list(shape))
        req.raw_input_contents.append(values)
    return req.SerializeToString()


def frame(msg: bytes, compressed=False) -> bytes:
    return struct.pack(">BI", 1 if compressed else 0, len(msg)) + msg


class Client:
    """A blocking HTTP/2 client over one socket, for protocol tests."""

    def __init__(self, port, settings=None, ack=True):
        self.ack = ack  # grant the server more window as its data arrives
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.flush()
        self.events = []
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path=INFER, body=b"", headers=(), end=True, content_type="application/grpc",
                method="POST"):
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"), (":path", path),
                (":authority", "localhost"), ("te", "trailers"),
                ("content-type", content_type), *headers]
        self.conn.send_headers(sid, hdrs, end_stream=end and not body)
        self.flush()
        if body:
            self.send_body(sid, body, end)
        return sid

    def send_body(self, sid, body, end=True):
        """DATA within the server's flow-control windows."""
        view = memoryview(body)
        while view:
            window = min(self.conn.local_flow_control_window(sid),
                         self.conn.max_outbound_frame_size)
            if window == 0:
                seen = len(self.events)
                assert self.pump(lambda: any(isinstance(e, (h2.events.WindowUpdated,
                                                            h2.events.RemoteSettingsChanged))
                                             for e in self.events[seen:]))
                continue
            chunk, view = view[:window], view[window:]
            self.conn.send_data(sid, bytes(chunk), end_stream=end and not view)
            self.flush()

    def pump(self, until, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not until():
            if self.closed:
                return False
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                return until()
            for event in self.conn.receive_data(data):
                self.events.append(event)
                if isinstance(event, h2.events.DataReceived) and self.ack:
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            self.flush()
        return True

    def ended(self, sid):
        return lambda: any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset))
                           and e.stream_id == sid for e in self.events)

    def result(self, sid, timeout=10.0):
        """(headers dict incl. trailers, body bytes, reset event or None)."""
        assert self.pump(self.ended(sid), timeout), self.events
        headers, body, reset = {}, b"", None
        for e in self.events:
            if getattr(e, "stream_id", None) != sid:
                continue
            if isinstance(e, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                headers.update(dict(e.headers))
            elif isinstance(e, h2.events.DataReceived):
                body += e.data
            elif isinstance(e, h2.events.StreamReset):
                reset = e
        return headers, body, reset

    def close(self):
        self.sock.close()


def grpc_status(headers):
    return int(headers["grpc-status"]), headers.get("grpc-message", "")


@pytest.fixture
def srv(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="slow", extra=SLOW)
    return start_grpc(tmp_path)


def still_serving(s):
    client = grpcclient.InferenceServerClient(s.grpc_url)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for t in inputs:
        t.set_data_from_numpy(A)
    np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), 2 * A)
    client.close()


def open_streams(s):
    return s.run(lambda: sum(c.open_streams for c in s.grpc._connections))


def test_a_well_formed_call(srv):
    c = Client(srv.grpc.port)
    headers, body, _ = c.result(c.request(body=frame(infer_message())))
    assert headers[":status"] == "200"
    assert headers["content-type"] == "application/grpc"
    assert grpc_status(headers) == (0, "")
    flag, length = struct.unpack(">BI", body[:5])
    assert flag == 0 and length == len(body) - 5
    resp = message_class("inference.ModelInferResponse").FromString(body[5:])
    np.testing.assert_array_equal(np.frombuffer(resp.raw_output_contents[0], np.float32),
                                  2 * np.arange(16, dtype=np.float32))
    # our settings: bounded streams and header lists
    settings = [e for e in c.events if isinstance(e, h2.events.RemoteSettingsChanged)][0]
    changed = settings.changed_settings
    assert changed[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS].new_value == 1000
    assert changed[h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE].new_value == 16384
    c.close()


def test_unknown_method_and_service(srv):
    c = Client(srv.grpc.port)
    for path in ("/inference.GRPCInferenceService/Nope", "/other.Service/Call", "/"):
        headers, body, _ = c.result(c.request(path=path, body=frame(b"")))
        assert headers[":status"] == "200" and body == b""
        assert grpc_status(headers) == (12, f"Method not found: {path}")
    c.close()
    still_serving(srv)


def test_body_and_length_prefix_disagree(srv):
    c = Client(srv.grpc.port)
    msg = infer_message()
    # longer than its prefix: the extra bytes start a second message
    headers, _, _ = c.result(c.request(body=frame(msg) + b"\0\0\0\0\x05abc"))
    assert grpc_status(headers) == (13, "more than one request message for a unary call")
    # a few stray bytes: the stream ends inside a message prefix
    headers, _, _ = c.result(c.request(body=frame(msg) + b"\0\0"))
    assert grpc_status(headers) == (13, "the request ended inside a gRPC message")
    # shorter than its prefix
    headers, _, _ = c.result(c.request(body=struct.pack(">BI", 0, 1000) + msg))
    assert grpc_status(headers) == (13, "the request ended inside a gRPC message")
    # no message at all
    headers, _, _ = c.result(c.request(body=b""))
    assert grpc_status(headers) == (13, "a unary call needs exactly one request message")
    # a bad compression flag
    headers, _, _ = c.result(c.request(body=b"\x07" + frame(msg)[1:]))
    assert grpc_status(headers)[0] == 13
    # bytes that are not a ModelInferRequest: the client's mistake (#27)
    headers, _, _ = c.result(c.request(body=frame(b"\x0a\xff\x01")))
    assert grpc_status(headers)[0] == 3
    headers, _, _ = c.result(c.request(body=frame(msg)))
    assert grpc_status(headers) == (0, "")  # the connection is fine
    c.close()
    assert open_streams(srv) == 0


def test_encodings(srv):
    c = Client(srv.grpc.port)
    msg = infer_message()
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    body = gz.compress(msg) + gz.flush()
    headers, _, _ = c.result(c.request(body=frame(body, True),
                                       headers=[("grpc-encoding", "gzip")]))
    assert grpc_status(headers) == (0, "")
    headers, _, _ = c.result(c.request(body=frame(zlib.compress(msg), True),
                                       headers=[("grpc-encoding", "deflate")]))
    assert grpc_status(headers) == (0, "")
    headers, _, _ = c.result(c.request(body=frame(msg, True)))  # flag without an encoding
    assert grpc_status(headers) == (13, "compressed message received without grpc-encoding")
    headers, _, _ = c.result(c.request(body=frame(b"not gzip", True),
                                       headers=[("grpc-encoding", "gzip")]))
    assert grpc_status(headers)[0] == 13
    headers, _, _ = c.result(c.request(body=frame(msg), headers=[("grpc-encoding", "snappy")]))
    assert grpc_status(headers) == (12, "Compression algorithm 'snappy' is not supported")
    assert headers["grpc-accept-encoding"] == "identity,deflate,gzip"
    c.close()


def test_not_grpc_requests(srv):
    c = Client(srv.grpc.port)
    headers, _, _ = c.result(c.request(body=frame(infer_message()), content_type="text/plain"))
    assert headers[":status"] == "415"
    headers, _, _ = c.result(c.request(method="GET", end=True))
    assert headers[":status"] == "405"
    c.close()
    still_serving(srv)


def test_bad_frames_close_only_that_connection(srv):
    good = Client(srv.grpc.port)
    bad = Client(srv.grpc.port)
    # a DATA frame on stream 0 is a connection error (PROTOCOL_ERROR)
    bad.sock.sendall(struct.pack(">I", 4)[1:] + b"\x00\x00" + struct.pack(">I", 0) + b"oops")
    assert bad.pump(lambda: any(isinstance(e, h2.events.ConnectionTerminated)
                                for e in bad.events) or bad.closed)
    terminated = [e for e in bad.events if isinstance(e, h2.events.ConnectionTerminated)]
    assert not terminated or terminated[0].error_code != 0
    bad.close()
    # garbage instead of the client preface
    raw = socket.create_connection(("127.0.0.1", srv.grpc.port), timeout=5)
    raw.sendall(b"\x00" * 64)
    assert raw.recv(4096) is not None  # a GOAWAY, then the close
    raw.close()
    headers, _, _ = good.result(good.request(body=frame(infer_message())))
    assert grpc_status(headers) == (0, "")
    good.close()
    still_serving(srv)


def test_http1_client_on_the_grpc_port(srv):
    raw = socket.create_connection(("127.0.0.1", srv.grpc.port), timeout=5)
    raw.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        chunk = raw.recv(4096)
        if not chunk:
            break
        data += chunk
    assert b"HTTP/1.1 200" not in data  # closed, not served
    raw.close()
    still_serving(srv)


def test_ping_is_answered(srv):
    c = Client(srv.grpc.port)
    c.conn.ping(b"12345678")
    c.flush()
    assert c.pump(lambda: any(isinstance(e, h2.events.PingAckReceived) for e in c.events))
    c.close()


def test_interleaved_streams_split_across_frames(srv):
    c = Client(srv.grpc.port)
    bodies = {}
    for i in range(12):
        req = message_class("inference.ModelInferRequest")(model_name="add_sub", id=str(i))
        for name in ("INPUT0", "INPUT1"):
            req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
            req.raw_input_contents.append(np.full(16, i, np.float32).tobytes())
        sid = c.request(body=b"", end=False)
        bodies[sid] = frame(req.SerializeToString())
    # feed every stream 7 bytes at a time, round robin
    offset = 0
    while any(offset < len(b) for b in bodies.values()):
        for sid, body in bodies.items():
            piece = body[offset:offset + 7]
            if piece:
                c.conn.send_data(sid, piece, end_stream=offset + 7 >= len(body))
        offset += 7
        c.flush()
    Response = message_class("inference.ModelInferResponse")
    for sid in bodies:
        headers, body, _ = c.result(sid)
        assert grpc_status(headers) == (0, "")
        resp = Response.FromString(body[5:])
        i = int(resp.id)
        np.testing.assert_array_equal(np.frombuffer(resp.raw_output_contents[0], np.float32),
                                      np.full(16, 2 * i, np.float32))
    c.close()


def test_oversized_headers_reset_the_stream(srv):
    c = Client(srv.grpc.port)
    sid = c.request(body=frame(infer_message()), headers=[("x-big", "v" * 20000)])
    _, _, reset = c.result(sid)
    assert reset is not None
    headers, _, _ = c.result(c.request(body=frame(infer_message())))
    assert grpc_status(headers) == (0, "")
    c.close()


def test_rst_stream_cancels_the_call(srv):
    c = Client(srv.grpc.port)
    sid = c.request(body=frame(infer_message("slow")))
    time.sleep(0.2)
    assert open_streams(srv) == 1
    c.conn.reset_stream(sid)
    c.flush()
    for _ in range(100):
        if open_streams(srv) == 0:
            break
        time.sleep(0.02)
    assert open_streams(srv) == 0
    headers, _, _ = c.result(c.request(body=frame(infer_message())))
    assert grpc_status(headers) == (0, "")
    c.close()


def test_grpc_timeout_header(srv):
    c = Client(srv.grpc.port)
    start = time.monotonic()
    headers, _, _ = c.result(c.request(body=frame(infer_message("slow")),
                                       headers=[("grpc-timeout", "150m")]))
    assert grpc_status(headers) == (4, "Deadline Exceeded")
    assert time.monotonic() - start < 2.0
    # a malformed timeout is ignored, as grpc does
    headers, _, _ = c.result(c.request(body=frame(infer_message()),
                                       headers=[("grpc-timeout", "soon")]))
    assert grpc_status(headers) == (0, "")
    c.close()


def test_clients_that_stop_reading(tmp_path, start_grpc):  # noqa: F811
    n = 4 * 1024 * 1024  # 16 MiB per output
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="big", size=n, max_batch_size=0)
    s = start_grpc(tmp_path)
    msg = frame(infer_message("big", n, (n,)))

    # 1: never opens its flow-control window beyond the first 64 KiB
    stingy = Client(s.grpc.port, ack=False)
    stingy.request(body=msg)
    # 2: opens the window wide and then never reads the socket
    deaf = Client(s.grpc.port, ack=False)
    deaf.conn.increment_flow_control_window(2**31 - 1 - 65535)
    deaf.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
    deaf.flush()
    assert deaf.pump(lambda: any(isinstance(e, h2.events.SettingsAcknowledged)
                                 for e in deaf.events))
    deaf.request(body=msg)
    time.sleep(1.0)
    still_serving(s)  # others are served meanwhile
    pending = s.run(lambda: sum(c.pending_bytes for c in s.grpc._connections))
    assert pending > 0  # the unsent responses wait with us, bounded by their size
    stingy.close()
    deaf.close()
    for _ in range(200):
        if len(s.grpc._connections) == 0:
            break
        time.sleep(0.02)
    assert len(s.grpc._connections) == 0
    still_serving(s)


def test_goaway_on_stop(srv):
    c = Client(srv.grpc.port)
    headers, _, _ = c.result(c.request(body=frame(infer_message())))
    assert grpc_status(headers) == (0, "")
    srv.call(srv.grpc.stop(5))
    assert c.pump(lambda: any(isinstance(e, h2.events.ConnectionTerminated)
                              for e in c.events))
    goaway = [e for e in c.events if isinstance(e, h2.events.ConnectionTerminated)][0]
    assert goaway.error_code == 0
    assert goaway.last_stream_id == 1
    c.close()
