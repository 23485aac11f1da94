"""backends/python/loop_driver.py: what the event loop sends a Python-model worker
and in which order it answers, with the scheduler and the worker faked."""

import asyncio
import socket
import threading
import time

import pytest

from pyserver.backends.base import BatchOutcome
from pyserver.backends.python import loop_driver
from pyserver.backends.python.channel import LOAD_ALONE, LOAD_BUSY, LOAD_LOW
from pyserver.backends.python.loop_driver import MAX_GROUP, WorkerLoopDriver
from pyserver.engine.worker_relay import GroupSender, ResultReader
from pyserver.kernel.errors import Code, ServerError


class FakeBatch:
    def __init__(self, n):
        self.n = n
        self.requests = [f"r{n}"]


class FakeScheduler:
    next_due_ns = 0  # a batching delay's end, when it holds the queue back

    def __init__(self, events):
        self.queue = []
        self.events = events
        self.held = False  # a batching delay runs: no batch yet

    @property
    def queued_count(self):
        return len(self.queue)

    def try_next_batch(self):
        if self.held:
            self.next_due_ns = 123_456
            return None
        self.next_due_ns = 0
        return self.queue.pop(0) if self.queue else None

    def complete(self, batch, *outcome):
        self.events.append(("answered", batch.n, BatchOutcome(*outcome).code))


class FakeConfig:
    def __init__(self, dynamic_batching):
        self.dynamic_batching = dynamic_batching

    def HasField(self, name):
        return name == "dynamic_batching" and self.dynamic_batching


class FakeRequests:
    inflight = 0  # requests the server holds, over every model


class FakeContext:
    def __init__(self):
        self.requests = FakeRequests()


class DeclinedResults:
    """ModelVersion.batch_results here: always the model's own steps."""

    @staticmethod
    def finish(batch, results, start_ns, output_ns):
        return False


class FakeSibling:
    """Another instance's driver, as a driver sees it: its batches in flight."""

    def __init__(self):
        self.batches = []


class FakeModel:
    name = "m"
    tracing = False
    batch_timer = None
    batch_results = DeclinedResults()

    def __init__(self, events, drivers, max_batch_size=0):
        self.scheduler = FakeScheduler(events)
        # the siblings of the driver under test (which the fixture puts
        # first): free unless a test gives them a batch in flight
        self.loop_drivers = [None] + [FakeSibling() for _ in range(drivers - 1)]
        self.events = events
        self.max_batch_size = max_batch_size
        self.config = FakeConfig(max_batch_size > 0)
        self.context = FakeContext()

    def wake_when_due(self):
        if self.scheduler.next_due_ns:
            self.events.append(("wake at", self.scheduler.next_due_ns))

    def requests_outcome(self, requests, results, t_start, t_output=None):
        return BatchOutcome(t_start, t_start, t_start, t_start)

    def failed_batch(self, t_start, err):  # as ModelVersion's: any error fails the batch
        if isinstance(err, ServerError):
            return BatchOutcome(t_start, t_start, t_start, t_start, int(err.code), err.message)
        return BatchOutcome(t_start, t_start, t_start, t_start, int(Code.INTERNAL), str(err))

    def finish_on_loop(self, batch, outcome):  # as ModelVersion's without a server
        self.scheduler.complete(batch, *outcome)


class FakeBackend:
    """A worker that is always free; its replies are queued by the test."""

    def __init__(self, events):
        self.events = events
        self.replies = []
        self.mine, self.theirs = socket.socketpair()
        self.worker = object()

    limit = None  # group_limit: as asked
    # every group through send_batches and every message through
    # on_main_message, unless a test sets its own
    plain_sender = None
    plain_results = None
    start_watch = None  # "auto" scheduling off unless a test sets one

    def take_worker(self):
        return self.worker

    def group_limit(self, limit):
        return limit if self.limit is None else min(limit, self.limit)

    def release_worker(self):
        pass

    def main_fd(self, worker):
        return self.mine.fileno()

    def send_batches(self, worker, batches, load=LOAD_BUSY):
        self.events.append(("sent", [r[0] for r in batches]))
        self.load = load

    def drain_main(self, worker):
        out, self.replies = self.replies, []
        return out

    def on_main_message(self, worker, msg, pending):
        if msg[0] == "fail":
            raise ServerError(Code.INTERNAL, msg[1])
        if msg[0] == "query":
            self.events.append(("asked", pending))
            return None
        return [{}] * len(pending)

    @staticmethod
    def batch_start(msg, default):
        return default

    def note_group_start(self, msg, sent_ns):
        self.events.append(("started", msg[0], sent_ns))


class FakeInstance:
    name = "m_0"

    def __init__(self, backend):
        self.backend = backend


@pytest.fixture
def driver():
    """driver(instances) -> (WorkerLoopDriver, its model, its backend, the
    events they record); each is detached and closed after the test."""
    made = []

    def make(drivers=1, max_batch_size=0):
        events = []
        mv = FakeModel(events, drivers, max_batch_size)
        backend = FakeBackend(events)
        d = WorkerLoopDriver(mv, FakeInstance(backend), asyncio.new_event_loop())
        mv.loop_drivers[0] = d
        made.append(d)
        return d, mv, backend, events

    yield make
    for d in made:
        d.detach()
        d.loop.close()
        d.backend.mine.close()
        d.backend.theirs.close()


@pytest.mark.parametrize("drivers, queued, taken", [(1, 10, 10), (2, 10, 5), (3, 10, 4),
                                                     (2, 1, 1), (1, 100, MAX_GROUP)])
def test_a_free_worker_gets_its_share_of_the_queue_in_one_message(drivers, queued, taken, driver):
    d, mv, backend, events = driver(drivers)
    mv.scheduler.queue = [FakeBatch(i) for i in range(queued)]
    d.dispatch()
    assert events == [("sent", [f"r{i}" for i in range(taken)])]
    assert mv.scheduler.queued_count == queued - taken
    d.dispatch()  # busy: nothing more goes to it
    assert len(events) == 1


@pytest.mark.parametrize("busy, taken", [(0, 4), (1, 5), (2, 10)])
def test_a_busy_siblings_share_is_not_kept_for_it(busy, taken, driver):
    """The share is split among the instances free now: one whose worker
    is busy takes what is queued when it is free again."""
    d, mv, backend, events = driver(3)
    for sibling in mv.loop_drivers[1:1 + busy]:
        sibling.batches.append(FakeBatch(99))
    mv.scheduler.queue = [FakeBatch(i) for i in range(10)]
    d.dispatch()
    _end_of_iteration(d)
    assert events == [("sent", [f"r{i}" for i in range(taken)])]


def test_beside_a_busy_sibling_the_group_forms_at_the_iteration_end(driver):
    # Sent at once, each request the loop reads would go alone to the free
    # instance's worker (woken per request) while the busy one works.
    d, mv, backend, events = driver(2)
    mv.loop_drivers[1].batches.append(FakeBatch(99))
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    assert events == []
    mv.scheduler.queue.append(FakeBatch(1))
    d.dispatch()
    assert events == []
    _end_of_iteration(d)
    assert events == [("sent", ["r0", "r1"])]


def test_a_sibling_that_is_free_does_not_hold_the_group_back(driver):
    d, mv, backend, events = driver(2)
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    assert events == [("sent", ["r0"])]


def test_a_batch_answered_beside_a_busy_sibling_answers_before_the_next_group(driver):
    d, mv, backend, events = driver(2)
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    mv.loop_drivers[1].batches.append(FakeBatch(99))
    mv.scheduler.queue = [FakeBatch(1), FakeBatch(2)]
    backend.replies = [("result", 0, [], 0)]
    d._on_readable()
    assert events == [("sent", ["r0"]), ("answered", 0, 0)]
    _end_of_iteration(d)
    assert events[2:] == [("sent", ["r1", "r2"])]


def test_each_batch_is_answered_as_its_reply_comes_and_the_next_group_goes_first(driver):
    d, mv, backend, events = driver()
    mv.scheduler.queue = [FakeBatch(i) for i in range(3)]
    d.dispatch()
    mv.scheduler.queue = [FakeBatch(i) for i in range(3, 5)]  # queued meanwhile
    backend.replies = [("result", 0, [], 0), ("fail", "boom", 0)]
    d._on_readable()
    assert events[1:] == [("answered", 0, 0), ("answered", 1, int(Code.INTERNAL))]
    assert d.batches
    backend.replies = [("query", "cancelled", 0)]  # a question about batch 2
    d._on_readable()
    assert events[3:] == [("asked", ["r2"])]
    del events[3]
    backend.replies = [("result", 0, [], 0)]
    d._on_readable()
    # The worker gets the next group before batch 2's answer goes out.
    assert events[3:] == [("sent", ["r3", "r4"]), ("answered", 2, 0)]
    backend.replies = [("result", 0, [], 0), ("result", 0, [], 0)]
    d._on_readable()
    assert events[5:] == [("answered", 3, 0), ("answered", 4, 0)]
    assert not d.batches


def test_a_groups_first_answer_reports_its_start_once_when_watched(driver):
    """"auto" scheduling: the backend hears of each group's first result or
    failure, with the group's send time; a question comes first unnoticed."""
    d, mv, backend, events = driver()
    backend.start_watch = object()
    mv.scheduler.queue = [FakeBatch(i) for i in range(2)]
    d.dispatch()
    sent_ns = d._t_start
    backend.replies = [("query", "cancelled", 0), ("result", 0, [], 0), ("result", 0, [], 0)]
    d._on_readable()
    assert [e for e in events if e[0] == "started"] == [("started", "result", sent_ns)]
    backend.start_watch = None  # unwatched (pinned, or already left): not reported
    mv.scheduler.queue = [FakeBatch(2)]
    d.dispatch()
    backend.replies = [("result", 0, [], 0)]
    d._on_readable()
    assert len([e for e in events if e[0] == "started"]) == 1


def test_detach_fails_every_batch_in_flight(driver):
    d, mv, backend, events = driver()
    mv.scheduler.queue = [FakeBatch(i) for i in range(2)]
    d.dispatch()
    d.detach()
    assert events[1:] == [("answered", 0, int(Code.UNAVAILABLE)),
                          ("answered", 1, int(Code.UNAVAILABLE))]
    assert not d.batches


def test_stop_waits_for_the_batch_in_flight_then_detaches(driver):
    """stop() from another thread, the loop running: the batch in the
    worker is answered (not failed), then the driver detaches; with none in
    flight it returns at once."""
    d, mv, backend, events = driver()
    loop = d.loop
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    try:
        mv.scheduler.queue = [FakeBatch(0)]
        loop.call_soon_threadsafe(d.dispatch)
        stopper = threading.Thread(target=d.stop, args=(10,))
        time.sleep(0.05)
        stopper.start()
        time.sleep(0.2)
        assert stopper.is_alive() and not d._stopped  # waiting on the batch in flight

        def answer():
            backend.replies = [("result", 0, [], 0)]
            d._on_readable()

        loop.call_soon_threadsafe(answer)
        stopper.join(5)
        assert not stopper.is_alive() and d._stopped
        assert ("answered", 0, 0) in events  # answered, not failed by the detach
        started = time.monotonic()
        d.stop(10)  # nothing in flight: no wait
        assert time.monotonic() - started < 1
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)


def test_max_group_is_a_sane_bound():
    assert 1 < loop_driver.MAX_GROUP <= 64


@pytest.mark.parametrize("drivers, queued, size, inflight, load", [
    (1, 1, 1, 1, LOAD_ALONE), (1, 1, 1, 2, LOAD_LOW), (2, 1, 1, 1, LOAD_ALONE),
    (2, 1, 1, 2, LOAD_LOW), (1, 1, 5, 5, LOAD_ALONE), (1, 1, 5, 10, LOAD_LOW),
    # more requests elsewhere in the server than the batch holds: the loop's
    # work, from which the next batch comes (a light client at c16)
    (1, 1, 1, 5, LOAD_BUSY), (2, 1, 1, 3, LOAD_BUSY), (1, 1, 5, 16, LOAD_BUSY),
    (1, 3, 1, 3, LOAD_BUSY), (2, 2, 1, 2, LOAD_BUSY)])
def test_a_lone_batch_tells_the_worker_the_load_is_low(drivers, queued, size, inflight, load,
                                                       driver):
    """A group of one with nothing left queued and few other requests in
    the server: the worker then spins for its next message (a client's
    round trip away) rather than sleeping; with no other request in the
    server either, only while such spins pay."""
    d, mv, backend, events = driver(drivers)
    mv.context.requests.inflight = inflight
    mv.scheduler.queue = [FakeBatch(i) for i in range(queued)]
    for batch in mv.scheduler.queue:
        batch.requests = [f"r{batch.n}.{k}" for k in range(size)]
    d.dispatch()
    assert backend.load == load


def test_the_backend_can_hold_groups_to_one_batch(driver):
    """Large tensors (PythonBackend.group_limit): one batch per message."""
    d, mv, backend, events = driver()
    backend.limit = 1
    mv.scheduler.queue = [FakeBatch(i) for i in range(3)]
    d.dispatch()
    assert events == [("sent", ["r0"])]


def test_a_batching_delay_brings_the_loop_back_when_it_ends(driver):
    d, mv, backend, events = driver()
    mv.scheduler.queue = [FakeBatch(0)]
    mv.scheduler.held = True
    d.dispatch()
    assert events == [("wake at", 123_456)]  # nothing sent: the model's timer is armed
    mv.scheduler.held = False
    d.dispatch()  # the timer fired: the batch is formed now
    assert events[1:] == [("sent", ["r0"])]


def test_no_low_load_spin_for_a_worker_behind_a_batching_delay(driver):
    # its next batch is a delay away: the worker's spin would only burn a core
    d, mv, backend, events = driver()
    mv.batch_timer = object()
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    assert events == [("sent", ["r0"])] and backend.load == LOAD_BUSY


def _end_of_iteration(d):
    """Runs what the driver's loop has ready (its call_soon callbacks)."""
    d.loop.run_until_complete(asyncio.sleep(0))


def test_with_more_in_flight_than_a_batch_holds_the_batch_forms_at_the_iteration_end(driver):
    # The loop is what limits the rate then: what it reads in the rest of
    # the iteration joins the batch.
    d, mv, backend, events = driver(max_batch_size=4)
    mv.context.requests.inflight = 4
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    assert events == []
    mv.scheduler.queue.append(FakeBatch(1))
    d.dispatch()  # a second arrival in the same iteration: still one send
    assert events == []
    _end_of_iteration(d)
    assert events == [("sent", ["r0", "r1"])]
    _end_of_iteration(d)
    assert events == [("sent", ["r0", "r1"])]


@pytest.mark.parametrize("max_batch_size, inflight", [(4, 3), (0, 100)])
def test_fewer_in_flight_or_no_batching_sends_at_once(max_batch_size, inflight, driver):
    d, mv, backend, events = driver(max_batch_size=max_batch_size)
    mv.context.requests.inflight = inflight
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    assert events == [("sent", ["r0"])]


def test_a_send_left_for_the_iteration_end_does_not_outlive_a_detach(driver):
    d, mv, backend, events = driver(max_batch_size=4)
    mv.context.requests.inflight = 8
    mv.scheduler.queue = [FakeBatch(0)]
    d.dispatch()
    d.detach()
    _end_of_iteration(d)
    assert events == []


class FakeGroupSender(GroupSender):
    """backend.plain_sender: sends a group on its own."""

    def __init__(self, events):
        self.events = events

    def send(self, worker, batches, load):
        self.events.append(("sent alone", [r[0] for r in batches], load))


class FakeResultReader(ResultReader):
    """backend.plain_results: reads a "result" message on its own."""

    def __init__(self, events):
        self.events = events

    def read(self, worker, msg):
        self.events.append(("read", msg[1]))
        if msg[1] == "bad":  # a result that cannot be read fails its batch
            raise ServerError(Code.INTERNAL, "unreadable")
        return [{}]


def test_plain_groups_and_results_go_through_the_backends_sender_and_reader(driver):
    """Where the backend hands the relay a sender and a reader for plain
    groups and results, a group is sent by the one (not send_batches) and
    a "result" message read by the other (not on_main_message); questions
    and failures still go to the backend; a result it cannot read fails
    only its batch."""
    d, mv, backend, events = driver()
    backend.plain_sender = FakeGroupSender(events)
    backend.plain_results = FakeResultReader(events)
    d = WorkerLoopDriver(mv, FakeInstance(backend), d.loop)
    mv.loop_drivers[0] = d
    mv.scheduler.queue = [FakeBatch(i) for i in range(4)]
    d.dispatch()
    assert events == [("sent alone", ["r0", "r1", "r2", "r3"], LOAD_BUSY)]
    backend.replies = [("result", 7, b"", 11), ("query", "cancelled", 0), ("fail", "boom", 12),
                       ("result", "bad", b"", 13), ("result", 8, b"", 14)]
    d._on_readable()
    assert events[1:] == [("read", 7), ("answered", 0, 0), ("asked", ["r1"]),
                          ("answered", 1, int(Code.INTERNAL)), ("read", "bad"),
                          ("answered", 2, int(Code.INTERNAL)), ("read", 8),
                          ("answered", 3, 0)]
    assert not d.batches


def test_a_message_that_is_not_a_tuple_fails_only_its_batch(driver):
    """Whatever the worker sends about the oldest batch, the relay answers
    it: a message it cannot read (here None) fails that batch through the
    backend's own error, and the next message is read as usual."""
    d, mv, backend, events = driver()
    backend.start_watch = object()  # "auto" scheduling: the start is not taken from it
    mv.scheduler.queue = [FakeBatch(i) for i in range(2)]
    d.dispatch()
    backend.replies = [None, ("result", 0, [], 0)]
    d._on_readable()
    assert [e for e in events if e[0] == "answered"] == [("answered", 0, int(Code.INTERNAL)),
                                                        ("answered", 1, 0)]
    assert [e for e in events if e[0] == "started"] == [("started", "result", d._t_start)]
    assert not d.batches
