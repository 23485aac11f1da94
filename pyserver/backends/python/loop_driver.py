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

import os
import threading

from pyserver.backends.base import BatchOutcome, ExecutionDriver, running_loop
from pyserver.engine.worker_relay import WorkerRelay
from pyserver.kernel.errors import Code, ServerError

# At most this many batches go to a worker in one message (see dispatch).
MAX_GROUP = 32


class WorkerLoopDriver(WorkerRelay, ExecutionDriver):
    """One instance's batches, a group at a time, from the event loop thread.

    What is queued when the worker is free goes to it in one message: the
    worker still runs each batch as its own execute() call and answers each
    as it ends, but the send, the worker's wake-up and the loop's reads are
    paid once per group rather than once per request. Each instance takes
    its share of the queue (queued / the instances free now), so a group
    never keeps work from an idle sibling instance for long.

    The cycle (dispatch, the group taken and sent, the worker's answers read
    and each batch finished) is engine/worker_relay.pyx's ``WorkerRelay``;
    what is here is what it hands back: the socket watched, a worker down or
    gone, a group that could not be written, stopping."""

    def __init__(self, mv, instance, loop):
        WorkerRelay.__init__(self, mv, instance, loop, MAX_GROUP)
        self._watch_fd = -1  # our duplicate of the worker's descriptor (see _watch)

    # -- the loop thread ----------------------------------------------------------

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
