"""The Python backend's link to its workers: framed messages and shared
memory regions (pyserver/backends/python/channel.py)."""

import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from pyserver.backends.python import channel


def test_channel_frames_small_and_large_messages():
    a, b = socket.socketpair()
    left, right = channel.Channel(a), channel.Channel(b)
    big = os.urandom(300_000)  # larger than the receive buffer and the socket buffer
    messages = [("exec", 1, [("x", (2, 3))]), ("blob", big), ("empty",), ("tail", "é" * 10)]

    def send_all():
        for m in messages:
            left.send(m)

    sender = threading.Thread(target=send_all)
    sender.start()
    received = [right.recv() for _ in messages]
    sender.join()
    assert received == messages
    left.close()
    with pytest.raises(EOFError):
        right.recv()
    right.close()


def test_channel_many_messages_in_one_read():
    a, b = socket.socketpair()
    a.settimeout(30)  # a stuck exchange fails the test instead of hanging the run
    b.settimeout(30)
    left, right = channel.Channel(a), channel.Channel(b)
    sender = threading.Thread(target=lambda: [left.send(("n", i, "x" * (i % 97))) for i in range(500)])
    sender.start()
    assert [right.recv()[1] for _ in range(500)] == list(range(500))
    sender.join()
    left.close()
    right.close()


def _voluntary_switches(tid: int) -> int:
    status = open(f"/proc/self/task/{tid}/status").read()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
@pytest.mark.parametrize("split", [True, False])
def test_a_reader_waiting_on_a_channel_sleeps_while_its_peer_reads(split):
    """channel_pair(): a socket per direction. With one socket for both, the
    peer reading what this end wrote wakes this end's blocked reader for
    nothing, once per read (the worker between batches, woken as the server
    reads each answer): the case with one socket shows the test can tell."""
    if split:
        (a_read, a_write), (b_read, b_write) = channel.channel_pair()
        server = channel.Channel(a_read, send_sock=a_write)
        worker = channel.Channel(b_read, send_sock=b_write)
    else:
        a, b = socket.socketpair()
        server, worker = channel.Channel(a), channel.Channel(b)
    rounds = 200
    try:
        tid = []
        started = threading.Event()

        def blocked_reader():
            tid.append(threading.get_native_id())
            started.set()
            assert worker.recv() == ("exec", "last")

        reader = threading.Thread(target=blocked_reader)
        reader.start()
        started.wait(10)
        # The reader is asleep in recv once its switch count stops moving.
        before = _voluntary_switches(tid[0])
        for _ in range(100):
            threading.Event().wait(0.01)
            now = _voluntary_switches(tid[0])
            if now == before:
                break
            before = now
        for i in range(rounds):  # the worker answers (from another thread); the server reads
            worker.send(("result", i))
            assert server.recv() == ("result", i)
            threading.Event().wait(0.0002)  # let a woken reader run and sleep again
        woken = _voluntary_switches(tid[0]) - before
        server.send(("exec", "last"))
        reader.join(10)
        assert not reader.is_alive()
        if split:
            assert woken <= 5, f"the blocked reader woke {woken} times"
        else:
            assert woken >= rounds // 4
    finally:
        server.close()
        worker.close()


def test_a_two_socket_channel_ends_like_one():
    """A channel of two sockets: messages both ways, EOF when the peer
    closes, shutdown() wakes a blocked reader, send after close fails."""
    (a_read, a_write), (b_read, b_write) = channel.channel_pair()
    left = channel.Channel(a_read, send_sock=a_write)
    right = channel.Channel(b_read, send_sock=b_write)
    assert left.fileno() == a_read.fileno() != a_write.fileno()
    left.send(("ping", 1))
    assert right.recv() == ("ping", 1)
    right.send(("pong", b"x" * 200_000))  # larger than a socket buffer
    assert left.recv() == ("pong", b"x" * 200_000)
    got = []
    reader = threading.Thread(target=lambda: got.append(pytest.raises(EOFError, right.recv)))
    reader.start()
    right.shutdown()
    reader.join(10)
    assert not reader.is_alive() and got
    right.close()
    with pytest.raises(EOFError):
        left.recv()
    left.close()
    with pytest.raises(OSError):
        left.send(("late",))


@pytest.mark.parametrize("kind", ["memfd", "devshm", "file"])
def test_regions_grow_and_readers_follow(kind):
    if kind == "memfd" and not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create here")
    if kind == "devshm" and not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    fd = channel.create_fd(kind, "test")
    writer = channel.Region(fd, 4096, reserve=True)
    reader = channel.Region(os.dup(fd), 4096, reserve=False)
    data = np.arange(1000, dtype=np.float64)  # 8000 bytes: more than the region
    writer.ensure(64 + data.nbytes)
    assert writer.size >= 64 + data.nbytes
    writer.mm[64:64 + data.nbytes] = data.view(np.uint8)
    reader.follow(writer.size)
    view = np.frombuffer(reader.mm, np.float64, data.size, 64)
    np.testing.assert_array_equal(view, data)
    old_view = view
    writer.ensure(writer.size * 3)
    reader.follow(writer.size)
    np.testing.assert_array_equal(old_view, data)  # an array over the old mapping stays valid
    writer.close()
    reader.close()


def test_shm_kind_choice(monkeypatch):
    assert channel._choose_kind("file") == "file"
    assert channel._choose_kind("devshm") == "devshm"
    expected = "memfd" if hasattr(os, "memfd_create") else None
    if expected:
        assert channel._choose_kind("") == "memfd"
    monkeypatch.delattr(os, "memfd_create", raising=False)

    class Tiny:
        f_bavail, f_frsize = 10, 4096  # a 40 KiB /dev/shm, as in a default container

    monkeypatch.setattr(os, "statvfs", lambda path: Tiny())
    assert channel._choose_kind("") == "file"


def test_arena_hands_out_blocks_reuses_them_and_grows():
    fd = channel.create_fd("memfd" if hasattr(os, "memfd_create") else "file", "arena-test")
    arena = channel.Arena(channel.Region(fd, 4096, reserve=True))
    try:
        a, b, c = arena.alloc(100), arena.alloc(1), arena.alloc(64)
        assert (a, b, c) == (0, 128, 192)  # 64-byte aligned, packed
        arena.free([b])
        assert arena.alloc(10) == 128  # the hole is reused
        arena.free([a, 128, c])
        assert arena.in_use() == 0
        assert arena.alloc(4096) == 0  # freed blocks coalesced into the whole region
        big = arena.alloc(10_000)  # does not fit: the file grows
        assert big == 4096 and arena.region.size >= 4096 + 10_000
        arena.free([0, big])
        # tensors in, read back by a "peer" mapping of the same file
        data = np.arange(1000, dtype=np.float32)
        text = np.array([b"x", b"yz"], dtype=np.object_)
        encoded, offsets = arena.write([("f", 11, data), ("t", 13, text)])
        peer = channel.Region(fd, 4096, reserve=False)
        arrays = channel.read_tensors(peer, arena.region.size, encoded,
                                      {11: np.float32}, copy=True)
        np.testing.assert_array_equal(arrays["f"], data)
        assert arrays["t"].tolist() == [b"x", b"yz"]
        arena.free(offsets)
        assert arena.in_use() == 0
    finally:
        arena.region.close()


def test_arena_is_safe_from_many_threads():
    fd = channel.create_fd("memfd" if hasattr(os, "memfd_create") else "file", "arena-threads")
    arena = channel.Arena(channel.Region(fd, 4096, reserve=True))
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            size = int(rng.integers(1, 5000))
            start = arena.alloc(size)
            arena.region.mm[start:start + 1] = bytes([seed])
            if arena.region.mm[start] != seed:
                errors.append(start)
            arena.free([start])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and arena.in_use() == 0
    arena.region.close()


def test_drain_takes_every_message_that_has_arrived():
    a, b = socket.socketpair()
    left, right = channel.Channel(a), channel.Channel(b)
    try:
        assert right.drain() == []  # nothing yet: no wait, no error
        for i in range(5):
            left.send(("result", i))
        frame = struct.pack("<I", 100) + b"x" * 40  # a message cut short (its u32 length)
        a.sendall(frame)
        assert right.drain() == [("result", i) for i in range(5)]
        assert right.drain() == []  # the message cut short stays buffered
        left.close()
        a.close()
        with pytest.raises(EOFError):
            right.drain()
    finally:
        right.close()


def test_drain_gathers_a_message_larger_than_its_buffer_over_several_reads():
    a, b = socket.socketpair()
    left, right = channel.Channel(a), channel.Channel(b)
    big = ("blob", os.urandom(200_000))  # the reader's buffer starts at 64 KiB
    sender = threading.Thread(target=left.send, args=(big,))
    sender.start()
    got, deadline = [], time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got = right.drain()
    sender.join()
    assert got == [big]
    right.close()
    with pytest.raises(OSError):  # closed: never a read of whatever reuses its number
        right.drain()
    left.close()


def test_results_and_execs_arrive_as_the_same_tuples_framed_either_way():
    """send_result and send_exec frame what is in worker_wire's layout
    (bytes) without a pickle, anything else pickled; the reader gives the
    same tuple."""
    a, b = socket.socketpair()
    left, right = channel.Channel(a), channel.Channel(b)
    try:
        answers = [b"\x01\x00\x00\x00" + os.urandom(100), b"", [("err", "INTERNAL", "no")]]
        for i, encoded in enumerate(answers):
            left.send_result(4096 + i, encoded, 2**63 + i)
        left.send(("query", "cancelled", 0))  # the pickled kind, between them
        left.send_result(1, b"R", 0)
        expected = [("result", 4096 + i, e, 2**63 + i) for i, e in enumerate(answers)]
        expected += [("query", "cancelled", 0), ("result", 1, b"R", 0)]
        assert [right.recv() for _ in range(3)] == expected[:3]
        assert right.drain() == expected[3:]
        # the server's exec message: bytes batches framed so, tuples pickled
        groups = [os.urandom(70), b"", b"E" * 3]
        left.send_exec(2**40, groups, "módel", "1", 2)
        left.send_exec(64, [[("a", 0)]], "m", "7", 0)
        assert right.recv() == ("exec", 2**40, groups, "módel", "1", 2)
        assert right.recv() == ("exec", 64, [[("a", 0)]], "m", "7", 0)
    finally:
        left.close()
        right.close()


def test_send_reports_a_full_socket_buffer_by_blocking_not_dropping():
    """send_frame returns -EAGAIN on a full buffer: the rest then goes out
    with a blocking sendall, so a message is never cut."""
    from pyserver.engine.ipc import send_frame

    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        chunk = b"y" * 4096
        while (n := send_frame(a.fileno(), chunk)) > 0:
            assert n == len(chunk) + 4 or n < len(chunk) + 4  # whole, or cut by a full buffer
        assert n < 0 and -n in (11, 35)  # EAGAIN / EWOULDBLOCK
    finally:
        a.close()
        b.close()
    c, d = socket.socketpair()
    left, right = channel.Channel(c), channel.Channel(d)
    got = []
    reader = threading.Thread(target=lambda: got.extend(right.recv() for _ in range(200)))
    reader.start()
    for i in range(200):
        left.send(("m", i, b"z" * 3000))  # ~600 KB: more than the socket buffer holds
    reader.join(30)
    assert got == [("m", i, b"z" * 3000) for i in range(200)]
    left.close()
    right.close()


def test_send_after_close_fails_instead_of_writing_to_a_reused_descriptor():
    a, b = socket.socketpair()
    ch = channel.Channel(a)
    ch.close()
    c, d = socket.socketpair()  # likely reuses a's descriptor number
    try:
        with pytest.raises(OSError):
            ch.send(("late",))
        d.setblocking(False)
        with pytest.raises(BlockingIOError):
            d.recv(100)  # nothing arrived on the new pair
    finally:
        for s in (b, c, d):
            s.close()


def test_pack_inputs_and_read_copies_round_trip():
    """engine/region_io.pyx: a batch's inputs laid out 64-byte aligned in a
    region that grows for them, read back as fresh arrays."""
    from pyserver.engine.region_io import pack_inputs, read_copies

    fd = channel.create_fd("memfd" if hasattr(os, "memfd_create") else "file", "test")
    writer = channel.Region(fd, 4096, reserve=True)
    reader = channel.Region(os.dup(fd), 4096, reserve=False)
    big = np.arange(3000, dtype=np.float32).reshape(3, 1000)  # grows the region
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]  # not row-major
    names = np.array([b"a", b"bc"], dtype=np.object_)
    requests = [{"X": big, "Y": strided}, {"X": big[:1], "S": names, "C": np.array([7], np.int64)}]
    packed = pack_inputs(writer, requests, {"X": 11, "Y": 8, "S": 13}, lambda a: 9, 13)
    assert writer.size >= 12000
    (x0, y0), (x1, s1, c1) = packed
    assert x0 == ("X", 11, (3, 1000), 0, 3000, None)
    assert y0[:3] == ("Y", 8, (3, 2)) and y0[3] % 64 == 0 and y0[3] >= 12000
    assert s1[1] == 13 and s1[3] == -1 and s1[5] is names  # BYTES travel with the message
    assert c1[1] == 9  # typed by the callback: not a declared input
    dtypes = {11: np.dtype(np.float32), 8: np.dtype(np.int32), 9: np.dtype(np.int64)}
    reader.follow(writer.size)
    encoded = [(n, c, s, o, count * dtypes[c].itemsize if o >= 0 else 0, d)
               for n, c, s, o, count, d in (x0, y0, x1, s1, c1)]
    out = read_copies(reader.mm, encoded[:2], dtypes)
    np.testing.assert_array_equal(out["X"], big)
    np.testing.assert_array_equal(out["Y"], strided)
    assert out["X"].base is None  # a copy, not a view of the region
    out = read_copies(reader.mm, encoded[2:], dtypes)
    np.testing.assert_array_equal(out["X"], big[:1])
    assert out["S"] is names and out["C"].tolist() == [7]
    with pytest.raises(ValueError):  # a size that does not match the shape
        read_copies(reader.mm, [("Z", 11, (2,), 0, 4, None)], dtypes)
    writer.close()
    reader.close()
