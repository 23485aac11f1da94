"""The driver of a Python model instance whose batches the event loop
relays to its worker process, with no thread of its own (the Python
backend's loop_driver(); it speaks this backend's IPC, so it lives here).

For a model instance that executes in another process (a Python-backend
worker), an instance thread only relays: it wakes when the worker answers,
takes the GIL from the event loop, completes the batch and sends the next
one. On a small machine that relay is most of a request's latency (measured
on 2 cores, add_sub at c16: the worker waited ~250 µs per request for its
next batch, of ~75 µs it worked). Here the event loop sends a batch to the
worker as soon as the scheduler forms it, and reads the answer when the
worker's socket becomes readable: the loop is awake anyway under load, so no
thread is woken either way.

With dynamic batching the csrc scheduler still decides every batch
(preferred sizes, max_batch_size, priorities, queue policies); when it holds
requests back for a batching delay, the model's batch_timer (a timerfd on
the loop, engine/timer.pyx) brings the loop back as the delay ends. While
the server holds more requests than a batch takes, a free worker's next
batch is formed at the end of the loop iteration, so that what the loop
reads meanwhile joins it (dispatch).

Anything unusual (the worker down or restarting, or gone mid-batch) is left
to the blocking code on an executor thread, so its waits never hold up the
loop.
"""

from __future__ import annotations

import collections
import logging
import os
import threading

from pyserver.backends.base import BatchOutcome, ExecutionDriver, running_loop
from pyserver.backends.python.channel import LOAD_ALONE, LOAD_BUSY, LOAD_LOW
from pyserver.engine import now_ns
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")


# At most this many batches go to a worker in one message (see dispatch).
MAX_GROUP = 32


class WorkerLoopDriver(ExecutionDriver):
    """One instance's batches, a group at a time, from the event loop thread.

    What is queued when the worker is free goes to it in one message: the
    worker still runs each batch as its own execute() call and answers each
    as it ends, but the send, the worker's wake-up and the loop's reads are
    paid once per group rather than once per request. Each instance takes
    its share of the queue (queued / the instances free now), so a group
    never keeps work from an idle sibling instance for long."""

    def __init__(self, mv, instance, loop):
        self.mv = mv
        self.instance = instance
        self.backend = instance.backend
        self.loop = loop
        self.batches = collections.deque()  # in the worker, not yet answered, in order
        # stop()'s wait for no batch in flight, set from the loop; None while
        # nobody waits (an Event cleared and set per group cost the loop 1.7 µs)
        self._idle_waiter: threading.Event | None = None
        self._worker = None  # the worker whose socket is watched
        self._watch_fd = -1  # our duplicate of its descriptor (see _watch)
        self._t_start = 0  # when the group in flight was sent
        self._start_unseen = False  # its first answer not read yet (note_group_start)
        self._stopped = False
        # A dynamically batched model's batch waits for the end of the loop
        # iteration while the server holds this many requests or more (see
        # dispatch); 0: never.
        self._requests = mv.context.requests  # the server's count in flight
        self._fill_from = mv.max_batch_size if (
            self._requests is not None and mv.max_batch_size > 0
            and mv.config.HasField("dynamic_batching")) else 0
        self._send_scheduled = False
        self._finish_results = mv.batch_results.finish  # the common case, compiled

    # -- the loop thread ----------------------------------------------------------

    def _take_group(self) -> list:
        """This instance's share of what is queued: split evenly among the
        instances free to take work now, this one included (at least one
        batch, at most MAX_GROUP, or what the backend allows). A busy
        sibling takes what is queued when it is free again, so a share kept
        for it would only wait."""
        scheduler = self.mv.scheduler
        drivers = self.mv.loop_drivers
        free = 1 if len(drivers) == 1 else sum(1 for d in drivers if not d.batches)
        share = -(-scheduler.queued_count // max(free, 1))
        group = []
        for _ in range(min(max(share, 1), self.backend.group_limit(MAX_GROUP))):
            batch = scheduler.try_next_batch()
            if batch is None:
                if not group:
                    self.mv.wake_when_due()
                break
            group.append(batch)
        return group

    def dispatch(self) -> None:
        """Sends what is queued to the worker if this instance is free: at
        once, or, with more requests in flight than a batch holds, at the
        end of this loop iteration.

        With that many in flight the loop is what limits the rate, and the
        requests it reads in the rest of the iteration join the batch: fewer
        worker round trips, less loop work per request. With fewer, every
        request waits on this batch, and sending at once answers sooner.
        bench/python_backend.py --batching (wrk HTTP, h2load gRPC, 2 cores,
        2 alternated pairs of 2 rounds, against sending at once): c64 1.09x
        (HTTP) and 1.15x (gRPC) infer/s, c128 1.01x and 1.12x, c16 0.97x
        (the same code path there: noise). Deferring at c16 as well cost
        15-25 %; an unbatched model's groups gained nothing (-6 to +4 %), so
        it never defers."""
        if self.batches or self._stopped:
            return
        if self._fill_from:
            if self._requests.inflight >= self._fill_from:
                if not self._send_scheduled:
                    self._send_scheduled = True
                    self.loop.call_soon(self._send_at_iteration_end)
                return
        self._send_queued()

    def _send_at_iteration_end(self) -> None:
        self._send_scheduled = False
        if not self.batches and not self._stopped:
            self._send_queued()

    def _send_queued(self) -> None:
        group = self._take_group()
        if not group:
            return
        self.batches.extend(group)
        self._t_start = now_ns()
        backend = self.backend
        self._start_unseen = backend.start_watch is not None
        worker = backend.take_worker()
        if worker is None:  # down, restarting: the blocking path waits for it
            self.loop.run_in_executor(None, self._run_blocking, group)
            return
        try:
            backend.send_batches(worker, [b.requests for b in group], self._load(group))
        except OSError:  # it died just now
            self._unwatch()
            self.loop.run_in_executor(None, self._fail_exited, group, worker)
            return
        except Exception as err:  # the group could not be written
            backend.release_worker()
            self._finish_all(self.mv.failed_batch(self._t_start, err))
            return
        if worker is not self._worker:
            self._watch(worker)

    def _load(self, group: list) -> int:
        """How busy the server is as ``group`` leaves (channel.LOAD_*): low,
        with nothing else queued, no batching delay that keeps the next
        batch back longer than the worker's spin for it would last, and no
        more requests elsewhere in the server than the batch holds (at low
        concurrency the next ones are a client's round trip away); alone,
        with no other request in the server at all. Anything more is under
        load: the other requests are the loop's work, and the worker's next
        batch comes as the loop gets through them, so a low-load spin there
        holds a core the loop and the clients need (a light client at c16
        on `dynamic_batching { }`, which forms one batch of all that is
        queued: over HTTP 1.27x the infer/s at 0.61x the CPU per inference
        with this rule, bench/python_backend.py --batching; level without
        batching and under perf_analyzer)."""
        mv = self.mv
        if len(group) != 1 or mv.scheduler.queued_count or mv.batch_timer is not None:
            return LOAD_BUSY
        requests = self._requests
        if requests is None:
            return LOAD_LOW
        sent = len(group[0].requests)
        others = requests.inflight - sent
        if others <= 0:
            return LOAD_ALONE
        return LOAD_LOW if others <= sent else LOAD_BUSY

    def _on_readable(self) -> None:
        worker = self._worker
        backend = self.backend
        batches = self.batches
        mv = self.mv
        try:
            messages = backend.drain_main(worker)  # one read per wake-up
        except EOFError:
            self._unwatch()
            if batches:  # they stay in flight until _fail_exited ends them
                self.loop.run_in_executor(None, self._fail_exited, list(batches), worker)
            return
        for msg in messages:
            if not batches:
                log.error("python model '%s' instance '%s': a message from its worker with no "
                          "batch in it: %r", mv.name, self.instance.name, msg[:1])
                continue
            batch = batches[0]
            if self._start_unseen and msg[0] != "query":  # "auto" scheduling: its start's wait
                self._start_unseen = False
                backend.note_group_start(msg, self._t_start)
            outcome = None
            try:
                results = backend.on_main_message(worker, msg, batch.requests)
            except OSError:  # answering its question: it is gone
                continue  # the EOF follows
            except Exception as err:  # the batch failed in the worker
                outcome = mv.failed_batch(backend.batch_start(msg, self._t_start), err)
            else:
                if results is None:
                    continue  # a question about the batch, answered
            start_ns = backend.batch_start(msg, self._t_start)
            output_ns = now_ns()
            batches.popleft()
            if not batches:
                backend.release_worker()
                # The next group goes to the worker before this batch's
                # answers go out: writing an answer to a client on loopback
                # runs the client's side of TCP and may hand it the core, and
                # the worker would idle meanwhile. (When dispatch waits for
                # the iteration's end, the answers go first.)
                self.dispatch()
            if outcome is not None:
                mv.finish_on_loop(batch, outcome)
            elif not self._finish_results(batch, results, start_ns, output_ns):
                mv.finish_on_loop(batch, mv.requests_outcome(batch.requests, results, start_ns,
                                                              output_ns))
            if not self.batches:
                self._idle()

    def _finish_all(self, outcome: BatchOutcome) -> None:
        """Every batch in flight ends with ``outcome`` (a failure)."""
        group = list(self.batches)
        self.batches.clear()
        for batch in group:
            self.mv.finish_on_loop(batch, outcome)
        self._done()

    def _done(self) -> None:
        self.dispatch()
        if not self.batches:
            self._idle()

    def _idle(self) -> None:
        """No batch in flight: a stop() waiting for that goes on."""
        waiter, self._idle_waiter = self._idle_waiter, None
        if waiter is not None:
            waiter.set()

    def _watch(self, worker) -> None:
        # A duplicate descriptor is watched, so that the worker's own socket
        # may be closed by whoever restarts it while the loop still watches:
        # the number the loop knows stays ours until _unwatch closes it.
        self._unwatch()
        fd = os.dup(self.backend.main_fd(worker))
        self.loop.add_reader(fd, self._on_readable)
        self._worker = worker
        self._watch_fd = fd

    def _unwatch(self) -> None:
        fd, self._watch_fd = self._watch_fd, -1
        self._worker = None
        if fd >= 0:
            self.loop.remove_reader(fd)
            os.close(fd)

    def detach(self) -> None:
        """No more batches; the socket is no longer watched (the backend may
        then talk to its worker directly, e.g. to finalize it). Batches still
        in the worker fail; its worker stays reserved, so closing the
        backend ends the process rather than finalizing it."""
        self._stopped = True
        self._unwatch()
        if self.batches:
            self._finish_all(self.mv.failed_batch(self._t_start, ServerError(
                Code.UNAVAILABLE, f"model '{self.mv.name}' was unloaded while it executed "
                                  "this request")))

    def stop(self, timeout: float) -> None:
        """From a thread other than the loop's: lets the batches in flight
        end (their answers arrive through the loop), then detaches."""
        loop = self.loop
        if not loop.is_running() or running_loop() is loop:
            self.detach()
            return

        def wait_for_idle(idle):
            if self.batches:
                self._idle_waiter = idle
            else:
                idle.set()

        def detach(detached):
            self.detach()
            detached.set()

        # each step on the loop, this thread waiting for its end
        for step in (wait_for_idle, detach):
            done = threading.Event()
            try:
                loop.call_soon_threadsafe(step, done)
            except RuntimeError:  # closed meanwhile
                self.detach()
                return
            finished = done.wait(timeout)
        if not finished:  # the loop did not detach in time: from here
            self.detach()

    # -- executor threads -------------------------------------------------------

    def _run_blocking(self, group: list) -> None:
        for batch in group:
            self._complete_off_loop(batch, self.mv.execute_requests(self.instance, batch))
        self._back_on_loop(group)

    def _fail_exited(self, group: list, worker) -> None:
        error = self.backend.exited_error(worker, sum(len(b.requests) for b in group))
        self.backend.release_worker()
        outcome = self.mv.failed_batch(self._t_start, error)
        for batch in group:
            self._complete_off_loop(batch, outcome)
        self._back_on_loop(group)

    def _complete_off_loop(self, batch, outcome: BatchOutcome) -> None:
        """Through the completion queue (thread-safe)."""
        mv = self.mv
        if mv.tracing:
            mv.stamp_traces(batch, outcome)
        mv.scheduler.complete(batch, *outcome)

    def _back_on_loop(self, group: list) -> None:
        """The group is done: the loop takes the next one."""
        def done():
            for batch in group:
                try:
                    self.batches.remove(batch)
                except ValueError:  # _on_readable already let go of it
                    pass
            self._done()

        try:
            self.loop.call_soon_threadsafe(done)
        except RuntimeError:  # the loop is closed: nothing more runs here
            self.batches.clear()
            self._idle()
