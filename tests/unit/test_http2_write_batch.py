"""http2.WriteBatch: the answers a connection's calls get in one turn of the
event loop leave in one transport write; a lone call's answer at once."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import pytest

http2 = pytest.importorskip("pyserver.engine.protocol.http2")

PATH = b"/test.Service/Echo"


class Transport:
    """What the connection writes, one entry per write() call."""

    def __init__(self):
        self.writes: list[bytes] = []

    def write(self, data):
        self.writes.append(bytes(data))

    def is_closing(self):
        return False

    def close(self):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


def open_calls(conn, client, count: int) -> list[int]:
    ids = []
    for i in range(count):
        sid = client.get_next_available_stream_id()
        client.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", PATH.decode()),
                                  (":authority", "localhost"), ("content-type", "application/grpc"),
                                  ("te", "trailers")])
        client.send_data(sid, grpc_message(b"call %d" % i), end_stream=True)
        ids.append(sid)
    conn.data_received(client.data_to_send())
    return ids


def answers(client, writes: list[bytes]) -> dict[int, tuple[bytes, str]]:
    """stream id -> (response message, grpc-status) from what was written."""
    data, status = {}, {}
    for chunk in writes:
        for event in client.receive_data(chunk):
            if isinstance(event, h2.events.DataReceived):
                data[event.stream_id] = data.get(event.stream_id, b"") + event.data
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.TrailersReceived):
                status[event.stream_id] = dict(event.headers)[b"grpc-status"].decode()
    return {sid: (data.get(sid, b"")[5:], status.get(sid)) for sid in status}


def start(loop, write_batch):
    streams = []
    conn = http2.Connection({PATH: (http2.UNARY, lambda stream, msg: streams.append((stream, msg)))})
    conn.write_batch = write_batch
    transport = Transport()
    conn.connection_made(transport)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    conn.data_received(client.data_to_send())
    answers(client, transport.writes)  # our SETTINGS and their ACK
    transport.writes.clear()
    return conn, client, transport, streams


def test_answers_of_one_turn_leave_in_one_write():
    loop = asyncio.new_event_loop()
    try:
        conn, client, transport, streams = start(loop, http2.WriteBatch(loop))
        ids = open_calls(conn, client, 3)
        transport.writes.clear()
        for stream, msg in streams:
            stream.respond(b"echo " + msg)
        assert transport.writes == []  # held until the loop's turn ends
        loop.run_until_complete(asyncio.sleep(0))
        assert len(transport.writes) == 1
        got = answers(client, transport.writes)
        assert got == {sid: (b"echo call %d" % i, "0") for i, sid in enumerate(ids)}
    finally:
        loop.close()


def test_a_lone_call_is_answered_at_once():
    loop = asyncio.new_event_loop()
    try:
        conn, client, transport, streams = start(loop, http2.WriteBatch(loop))
        (sid,) = open_calls(conn, client, 1)
        transport.writes.clear()
        streams[0][0].respond(b"alone")
        assert len(transport.writes) == 1  # nothing else could join it
        assert answers(client, transport.writes) == {sid: (b"alone", "0")}
    finally:
        loop.close()


def test_without_a_write_batch_each_answer_is_its_own_write():
    loop = asyncio.new_event_loop()
    try:
        conn, client, transport, streams = start(loop, None)
        ids = open_calls(conn, client, 3)
        transport.writes.clear()
        for stream, msg in streams:
            stream.respond(b"echo " + msg)
        assert len(transport.writes) == 3
        assert set(answers(client, transport.writes)) == set(ids)
    finally:
        loop.close()


def test_a_connection_gone_before_the_turn_ends_is_skipped():
    loop = asyncio.new_event_loop()
    try:
        conn, client, transport, streams = start(loop, http2.WriteBatch(loop))
        open_calls(conn, client, 2)
        transport.writes.clear()
        streams[0][0].respond(b"a")
        conn.close()  # the client went away with the answer still held
        loop.run_until_complete(asyncio.sleep(0))
        assert transport.writes == []
    finally:
        loop.close()
