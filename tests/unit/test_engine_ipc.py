"""pyserver.engine.ipc: the bounded spin the Python backend's worker waits
with for its next batch."""


def test_spin_readable_returns_when_data_arrives_or_time_is_up():
    import socket
    import threading
    import time

    from pyserver.engine.ipc import spin_readable

    a, b = socket.socketpair()
    try:
        t0 = time.perf_counter()
        assert spin_readable(a.fileno(), 2_000_000) is False  # 2 ms, nothing comes
        assert time.perf_counter() - t0 >= 0.0019
        timer = threading.Timer(0.001, lambda: b.send(b"x"))
        timer.start()
        assert spin_readable(a.fileno(), 2_000_000_000) is True  # comes well before 2 s
        timer.join()
        assert a.recv(1) == b"x"
        b.close()
        assert spin_readable(a.fileno(), 1_000_000_000) is True  # hang-up: the read tells
    finally:
        a.close()
