"""pyserver.engine.ipc: the bounded spin the Python backend's worker waits
with for its next batch, and the policy that stops it where it does not
pay."""

import socket
import threading
import time


def test_spin_readable_returns_when_data_arrives_or_time_is_up():
    from pyserver.engine.ipc import spin_readable

    a, b = socket.socketpair()
    try:
        t0 = time.perf_counter()
        # 2 ms, nothing comes (it may end sooner on a busy machine: a spin
        # stops once its thread was descheduled)
        assert spin_readable(a.fileno(), 2_000_000) is False
        assert time.perf_counter() - t0 < 1.0
        timer = threading.Timer(0.001, lambda: b.send(b"x"))
        timer.start()
        # It comes well before 2 s; a spin also ends once its thread is
        # descheduled (the timer's start may do that), so look again.
        deadline = time.perf_counter() + 5
        while not spin_readable(a.fileno(), 2_000_000_000):
            assert time.perf_counter() < deadline
        timer.join()
        assert a.recv(1) == b"x"
        b.close()
        assert spin_readable(a.fileno(), 1_000_000_000) is True  # hang-up: the read tells
    finally:
        a.close()


def test_spin_policy_stops_spinning_when_nothing_comes_within_it():
    from pyserver.engine.ipc import SpinPolicy

    policy = SpinPolicy(2_000_000)
    a, b = socket.socketpair()
    try:
        assert policy.spinning and policy.max_ns == 2_000_000
        misses = 0
        while policy.spinning:
            assert policy.wait_readable(a.fileno()) is False
            misses += 1
            assert misses < 20
        assert misses >= 3
        # Off: most waits do not spin at all, one in 16 probes (32 spins of
        # 2 ms would burn 64 ms of this thread's CPU; CPU, as a busy machine
        # stretches wall time without spinning more).
        t0 = time.thread_time()
        assert not any(policy.wait_readable(a.fileno()) for _ in range(32))
        assert time.thread_time() - t0 < 0.03
        # A probe catches a message that is there, and the spin comes back.
        b.send(b"x")
        calls = 1
        while not policy.wait_readable(a.fileno()):
            calls += 1
            assert calls <= 16
    finally:
        a.close()
        b.close()


def test_spin_policy_stops_spinning_when_its_catches_come_too_late_to_pay():
    from pyserver.engine.ipc import SpinPolicy

    # Each message comes 2 ms into a spin (a client's round trip at c1, at
    # this test's scale): caught, but later than the 0.5 ms a spin may last
    # and still pay, so spinning stops all the same. (csrc's
    # AdaptiveSpin.CatchesLaterThanItPaysStopIt checks the rule itself, with
    # no clock.)
    policy = SpinPolicy(2_000_000_000, 500_000)
    assert policy.pay_ns == 500_000
    a, b = socket.socketpair()
    go = threading.Semaphore(0)

    def sender():
        while go.acquire() and b.fileno() >= 0:
            time.sleep(0.002)
            b.send(b"x")

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    try:
        waits = late = 0
        while policy.spinning:
            go.release()
            # False only where a busy machine cut the spin short (spin.h):
            # a miss either way
            late += policy.wait_readable(a.fileno())
            assert a.recv(1) == b"x"
            waits += 1
            assert waits < 20  # caught (where the machine lets it spin), yet it stops
        assert waits >= 3
        # Off: a probe spins no longer than pay_ns (not max_ns: 2 s).
        t0 = time.monotonic()
        assert not any(policy.wait_readable(a.fileno()) for _ in range(32))
        assert time.monotonic() - t0 < 1.0
    finally:
        a.close()
        b.close()
        go.release()


def test_spin_policy_pay_defaults_to_the_whole_spin():
    from pyserver.engine.ipc import SPIN_PAYS_NS, SpinPolicy

    assert SpinPolicy(300_000).pay_ns == 300_000  # any catch within the spin pays
    assert SpinPolicy(300_000, SPIN_PAYS_NS).pay_ns == SPIN_PAYS_NS < 300_000
    assert SpinPolicy(10_000, SPIN_PAYS_NS).pay_ns == 10_000  # never more than the spin


def test_spin_policy_keeps_spinning_while_messages_come_within_it():
    from pyserver.engine.ipc import SpinPolicy

    policy = SpinPolicy(2_000_000_000)
    a, b = socket.socketpair()
    try:
        for _ in range(20):
            b.send(b"x")  # there when the spin starts: caught at once
            assert policy.wait_readable(a.fileno()) is True
            assert a.recv(1) == b"x"
        assert policy.spinning
    finally:
        a.close()
        b.close()


def test_a_worker_alone_in_the_server_spins_only_while_it_pays():
    from pyserver.backends.python import channel
    from pyserver.engine.ipc import SPIN_PAYS_NS

    assert channel.spin_after(channel.LOAD_BUSY, 300_000, 300_000) == (None, None)
    assert channel.spin_after(channel.LOAD_LOW, 0, 300_000) == (300_000, None)
    assert channel.spin_after(channel.LOAD_ALONE, 0, 300_000) == (300_000, SPIN_PAYS_NS)
