"""The Cython engine through Python: token ownership, batching, completion
path, GIL release."""

import asyncio
import gc
import sys
import threading
import time

import numpy as np
import pytest

from pyserver.engine import CompletionQueue, ModelStats, Scheduler, gather, gather_batch, now_ns
from pyserver.kernel.errors import Code, ServerError


class Item:
    def __init__(self, n):
        self.n = n


def make(config=None, **kw):
    stats, cq = ModelStats(), CompletionQueue()
    cfg = {"max_batch_size": 8}
    cfg.update(config or {})
    cfg.update(kw)
    return Scheduler.dynamic(cfg, stats, cq), stats, cq


def test_objects_round_trip_with_their_references():
    sched, stats, cq = make()
    items = [Item(i) for i in range(5)]
    before = [sys.getrefcount(x) for x in items]
    for x in items:
        sched.enqueue(x, 1)
    del x
    assert [sys.getrefcount(x) for x in items] == [b + 1 for b in before]
    batch = sched.next_batch()
    assert [x.n for x in batch.requests] == [0, 1, 2, 3, 4]
    assert batch.batch_size == 5 and len(batch) == 5
    del batch
    gc.collect()
    assert [sys.getrefcount(x) for x in items] == before


def test_queue_full_raises_server_error_and_keeps_no_reference():
    sched, _, _ = make(default_queue_policy={"max_queue_size": 1})
    a, b = Item(1), Item(2)
    sched.enqueue(a, 1)
    before = sys.getrefcount(b)
    with pytest.raises(ServerError) as err:
        sched.enqueue(b, 1)
    assert err.value.code == Code.UNAVAILABLE
    assert err.value.message == "Exceeds maximum queue size"
    assert sys.getrefcount(b) == before


def test_bad_config_is_invalid_arg():
    with pytest.raises(ServerError) as err:
        make(preferred_batch_size=[16])
    assert err.value.code == Code.INVALID_ARG


def test_completion_returns_batch_once_and_stats_count():
    sched, stats, cq = make(preferred_batch_size=[2], max_queue_delay_microseconds=10_000_000)
    sched.enqueue(Item(1), 1)
    sched.enqueue(Item(2), 1)
    batch = sched.next_batch()
    t = now_ns()
    sched.complete(batch, t, t + 100, t + 300, t + 600)
    assert cq.wait(1.0)
    [(obj, code, msg)] = cq.drain()
    assert obj is batch and code == 0 and msg is None
    assert cq.drain() == []
    snap = stats.snapshot()
    assert snap["execution_count"] == 1 and snap["inference_count"] == 2
    assert snap["inference_stats"]["success"]["count"] == 2
    assert snap["inference_stats"]["compute_infer"]["ns"] == 400
    assert snap["batch_stats"][0]["batch_size"] == 2


def test_cancel_and_stop_complete_with_codes():
    sched, stats, cq = make(preferred_batch_size=[4], max_queue_delay_microseconds=10_000_000)
    a, b = Item(1), Item(2)
    rid = sched.enqueue(a, 1)
    sched.enqueue(b, 1)
    assert sched.cancel(rid)
    sched.stop()
    got = cq.drain()
    assert [(o.n, c) for o, c, _ in got] == [(1, int(Code.CANCELLED)), (2, int(Code.UNAVAILABLE))]
    assert sched.next_batch() is None
    assert stats.snapshot()["failure_reasons"]["CANCELED"] == 1


def test_expired_request_rejected_with_triton_text():
    sched, _, cq = make(preferred_batch_size=[4], max_queue_delay_microseconds=10_000_000,
                        default_queue_policy={"default_timeout_microseconds": 20_000})
    sched.enqueue(Item(1), 1)
    t = threading.Thread(target=sched.next_batch)
    t.start()
    assert cq.wait(5.0)
    [(obj, code, msg)] = cq.drain()
    assert code == int(Code.UNAVAILABLE) and msg == "Request timeout expired"
    sched.stop()
    t.join(5)
    assert not t.is_alive()


def test_batch_forms_within_its_delay():
    # Generous margins: the batch must not come before the delay, nor
    # (on a loaded 2-core box) absurdly after it.
    sched, _, _ = make(preferred_batch_size=[8], max_queue_delay_microseconds=50_000)
    start = time.monotonic()
    sched.enqueue(Item(1), 1)
    batch = sched.next_batch()
    waited = time.monotonic() - start
    assert len(batch) == 1
    assert 0.045 <= waited < 2.0


def test_enqueue_says_whether_the_loops_batching_wait_still_holds():
    # The event loop asks for a batch after an enqueue only when the request
    # may end the wait try_next_batch() reported (its timer asks at the end).
    sched, _, _ = make(preferred_batch_size=[3], max_queue_delay_microseconds=10_000_000)
    items = [Item(k) for k in range(4)]
    sched.enqueue(items[0], 1)
    assert not sched.wait_holds  # no one was told to wait
    assert sched.try_next_batch() is None and sched.next_due_ns
    sched.enqueue(items[1], 1)
    assert sched.wait_holds  # 2 of the preferred 3
    sched.enqueue(items[2], 1)
    assert not sched.wait_holds  # the preferred size: a batch forms now
    assert len(sched.try_next_batch()) == 3
    sched.enqueue(items[3], 1)
    assert not sched.wait_holds  # that evaluation sent a batch
    sched.stop()


def test_delay_scheduler_hook():
    sched, _, _ = make(delay_scheduler_count=3)
    out = []
    t = threading.Thread(target=lambda: out.append(sched.next_batch()))
    t.start()
    sched.enqueue(Item(1), 1)
    time.sleep(0.05)
    assert not out
    sched.enqueue(Item(2), 1)
    sched.enqueue(Item(3), 1)
    t.join(5)
    assert len(out[0]) == 3


def test_next_batch_releases_the_gil():
    """Another Python thread keeps running while an instance blocks in C++."""
    sched, _, _ = make(preferred_batch_size=[8], max_queue_delay_microseconds=10_000_000)
    counter = 0
    stop = threading.Event()

    def spin():
        nonlocal counter
        while not stop.is_set():
            counter += 1

    instance = threading.Thread(target=sched.next_batch)
    instance.start()
    time.sleep(0.05)
    spinner = threading.Thread(target=spin)
    spinner.start()
    time.sleep(0.3)
    seen = counter
    stop.set()
    spinner.join()
    sched.stop()
    instance.join(5)
    # Were the GIL held by the blocked instance, the spinner could not run.
    assert seen > 10_000


def test_completion_wait_releases_the_gil():
    cq = CompletionQueue()
    ticks = []

    def tick():
        for _ in range(20):
            ticks.append(time.monotonic())
            time.sleep(0.005)

    t = threading.Thread(target=tick)
    t.start()
    assert cq.wait(0.3) is False
    t.join()
    assert len(ticks) == 20


def test_event_loop_is_woken_once_per_batch():
    async def main():
        loop = asyncio.get_running_loop()
        sched, _, cq = make(preferred_batch_size=[4], max_queue_delay_microseconds=10_000_000)
        wakeups = 0
        done = asyncio.Event()
        got = []

        def on_ready():
            nonlocal wakeups
            wakeups += 1
            for obj, code, _ in cq.drain():
                got.extend(obj.requests)
            if len(got) == 16:
                done.set()

        loop.add_reader(cq.fd, on_ready)

        def instance():
            while (batch := sched.next_batch()) is not None:
                t = now_ns()
                sched.complete(batch, t, t, t, t)

        th = threading.Thread(target=instance)
        th.start()
        for i in range(16):
            sched.enqueue(Item(i), 1)
        await asyncio.wait_for(done.wait(), 5)
        sched.stop()
        th.join(5)
        loop.remove_reader(cq.fd)
        assert sorted(x.n for x in got) == list(range(16))
        assert wakeups <= 4  # 4 batches of 4: at most one wake-up each
        assert cq.signal_count <= 4

    asyncio.run(main())


def test_pass_through_scheduler():
    stats, cq = ModelStats(), CompletionQueue()
    sched = Scheduler.pass_through(stats, cq)
    sched.enqueue(Item(1), 4)
    sched.enqueue(Item(2), 4)
    b = sched.next_batch()
    assert [x.n for x in b.requests] == [1] and b.batch_size == 4
    assert stats.snapshot()["pending_count"] == 1


class _Pending:
    def __init__(self, arrays, batch_size):
        self.arrays = arrays
        self.batch_size = batch_size


def test_gather_batch_is_each_input_concatenated():
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float16, np.int8, np.uint64, np.bool_):
        rows = [1, 3, 2]
        requests = [_Pending({"A": rng.integers(0, 2, (r, 4, 2)).astype(dtype),
                              "B": rng.integers(0, 9, (r,)).astype(dtype)}, r) for r in rows]
        batched = gather_batch(requests)
        assert list(batched) == ["A", "B"]
        for name in ("A", "B"):
            expected = np.concatenate([p.arrays[name] for p in requests])
            assert batched[name].dtype == expected.dtype
            np.testing.assert_array_equal(batched[name], expected)
    big = [_Pending({"X": np.full((1, 40000), i, np.float32)}, 1) for i in range(3)]  # copied
    np.testing.assert_array_equal(gather_batch(big)["X"][:, 0], [0, 1, 2])  # without the GIL


def test_gather_batch_leaves_objects_and_strided_sources_to_the_caller():
    objects = [_Pending({"S": np.array([b"x"], dtype=object)}, 1) for _ in range(2)]
    assert gather_batch(objects) is None
    strided = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]
    assert gather_batch([_Pending({"A": strided}, 2), _Pending({"A": strided}, 2)]) is None
    with pytest.raises(ValueError):  # rows that do not fit the first one's shape
        gather_batch([_Pending({"A": np.ones((1, 2))}, 1), _Pending({"A": np.ones((1, 5))}, 1)])
    with pytest.raises(KeyError):  # a batch's requests share their inputs
        gather_batch([_Pending({"A": np.ones(1)}, 1), _Pending({"B": np.ones(1)}, 1)])


def test_gather_copies_back_to_back():
    parts = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 3), np.float32)]
    out = np.empty((3, 3), np.float32)
    assert gather(parts, out) == 36
    np.testing.assert_array_equal(out, np.concatenate(parts))
    with pytest.raises(ValueError):
        gather(parts, np.empty((2, 3), np.float32))
    # Row-major order only: a Fortran-ordered or strided source is refused,
    # not copied in its memory order.
    with pytest.raises(BufferError):
        gather([np.asfortranarray(parts[0])], out)
    with pytest.raises(BufferError):
        gather([np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]], out)


def test_a_completion_spin_that_catches_only_after_its_worth_scores_as_a_miss():
    """A completion that comes inside the spin but later than kSpinPaysNs
    (100 µs: what a sleep and wake-up cost, twice over) was caught at more
    CPU than the sleep it saved: such spins stop, as a batching delay the
    loop would sit through does."""
    import threading

    from pyserver.engine.completion import CompletionSpin

    stats, cq = ModelStats(), CompletionQueue()
    sched = Scheduler.pass_through(stats, cq)
    spin = CompletionSpin()
    caught = 0
    for _ in range(20):
        if not spin.spinning:
            break
        sched.enqueue(Item(1), 1)
        batch = sched.next_batch()
        later = threading.Timer(0.002, sched.complete, (batch, 1, 2, 3, 4))
        later.start()
        caught += spin.wait(cq, 0.5)  # caught, 2 ms in
        later.join()
        cq.drain()
    assert not spin.spinning and caught >= 3


def test_a_completion_spin_stops_for_completions_that_do_not_come_within_it():
    """The event loop's spin for a lone request's completion, per model
    (CompletionSpin): a model slower than the spin stops being spun for, one
    wait in 16 still probes, and a caught completion brings the spin back."""
    from pyserver.engine.completion import CompletionSpin

    stats, cq = ModelStats(), CompletionQueue()
    spin = CompletionSpin()
    assert spin.spinning  # no evidence yet
    misses = 0
    while spin.spinning:
        assert spin.wait(cq, 0.0005) is False
        misses += 1
        assert misses < 20
    assert misses >= 3
    # Off: the next 15 waits return at once (each would spin 0.2 s).
    t0 = time.monotonic()
    assert not any(spin.wait(cq, 0.2) for _ in range(15))
    assert time.monotonic() - t0 < 0.15
    # A completion waiting: the next probe catches it, and catches turn it on.
    sched = Scheduler.pass_through(stats, cq)
    sched.enqueue(Item(1), 1)
    sched.complete(sched.next_batch(), 1, 2, 3, 4)
    waits = 1
    while not spin.wait(cq, 0.2):
        waits += 1
        assert waits <= 16
    for _ in range(64):
        if spin.spinning:
            break
        spin.wait(cq, 0.2)  # a probe among them catches it again
    assert spin.spinning
    assert len(cq.drain()) == 1
