"""An instance whose batches the event loop drives, with no thread of its own.

For a model instance that executes in another process (a Python-backend
worker) and takes each request as its own batch, an instance thread only
relays: it wakes when the worker answers, takes the GIL from the event loop,
completes the batch and sends the next one. On a small machine that relay is
most of a request's latency (measured on 2 cores, add_sub at c16: the worker
waited ~250 µs per request for its next batch, of ~75 µs it worked). Here the
event loop sends a batch to the worker as soon as the request is queued, and
reads the answer when the worker's socket becomes readable: the loop is
awake anyway under load, so no thread is woken either way.

Anything unusual (the worker down or restarting, or gone mid-batch) is left
to the blocking code on an executor thread, so its waits never hold up the
loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from pyserver.core.errors import Code, ServerError
from pyserver.engine import now_ns

log = logging.getLogger("pyserver")


def can_drive(mv, instance) -> bool:
    """Whether ``instance`` of ``mv`` runs on the event loop: its backend
    says it can (a Python model that is not decoupled) and each request is
    its own batch (no dynamic or sequence batching)."""
    if mv.sequence is not None or mv.config.HasField("dynamic_batching"):
        return False
    return bool(getattr(instance.backend, "loop_drivable", False))


class LoopDrivenInstance:
    """One instance's batches, one at a time, from the event loop thread."""

    def __init__(self, mv, instance, loop):
        self.mv = mv
        self.instance = instance
        self.backend = instance.backend
        self.loop = loop
        self.batch = None  # the batch in the worker, if any
        self.idle = threading.Event()  # no batch in flight (stop() waits for it)
        self.idle.set()
        self._worker = None  # the worker whose socket is watched
        self._watch_fd = -1  # our duplicate of its descriptor (see _watch)
        self._t_start = 0
        self._stopped = False

    # -- the loop thread ----------------------------------------------------------

    def dispatch(self) -> None:
        """Starts the next queued batch if this instance is free."""
        if self.batch is not None or self._stopped:
            return
        batch = self.mv.scheduler.try_next_batch()
        if batch is None:
            return
        self.batch = batch
        self.idle.clear()
        self._t_start = now_ns()
        backend = self.backend
        worker = backend.take_worker()
        if worker is None:  # down, restarting: the blocking path waits for it
            self.loop.run_in_executor(None, self._run_blocking, batch)
            return
        try:
            backend.send_batch(worker, batch.requests)
        except OSError:  # it died just now
            self._unwatch()
            self.loop.run_in_executor(None, self._fail_exited, batch, worker)
            return
        except Exception as err:  # the batch could not be written
            backend.release_worker()
            self._finish(batch, self.mv.failed_batch(self._t_start, err))
            return
        if worker is not self._worker:
            self._watch(worker)

    def _on_readable(self) -> None:
        worker = self._worker
        backend = self.backend
        read = True  # one read per wake-up; then what that read brought
        while True:
            batch = self.batch
            try:
                msg = backend.poll_main(worker, read)
                read = False
            except EOFError:
                self._unwatch()
                if batch is not None:
                    self.loop.run_in_executor(None, self._fail_exited, batch, worker)
                return
            if msg is None:
                return
            if batch is None:
                log.error("python model '%s' instance '%s': a message from its worker with no "
                          "batch in it: %r", self.mv.name, self.instance.name, msg[:1])
                continue
            try:
                results = backend.on_main_message(worker, msg, batch.requests)
            except OSError:  # answering its question: it is gone
                continue  # the EOF follows
            except Exception as err:  # the batch failed in the worker
                backend.release_worker()
                self._finish(batch, self.mv.failed_batch(self._t_start, err))
                continue
            if results is None:
                continue  # a question about the batch, answered
            backend.release_worker()
            self._finish(batch, self.mv.requests_outcome(batch.requests, results,
                                                         self._t_start))

    def _finish(self, batch, outcome: tuple) -> None:
        finish_on_loop(self.mv, batch, outcome)
        self._done()

    def _done(self) -> None:
        self.batch = None
        self.dispatch()
        if self.batch is None:
            self.idle.set()

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
        then talk to its worker directly, e.g. to finalize it). A batch still
        in the worker fails; its worker stays reserved, so closing the
        backend ends the process rather than finalizing it."""
        self._stopped = True
        self._unwatch()
        batch = self.batch
        if batch is not None:
            self._finish(batch, self.mv.failed_batch(self._t_start, ServerError(
                Code.UNAVAILABLE, f"model '{self.mv.name}' was unloaded while it executed "
                                  "this request")))

    def stop(self, timeout: float) -> None:
        """From a thread other than the loop's: lets the batch in flight end
        (its answer arrives through the loop), then detaches."""
        loop = self.loop
        if not loop.is_running() or running_loop() is loop:
            self.detach()
            return
        self.idle.wait(timeout)
        detached = threading.Event()

        def detach():
            self.detach()
            detached.set()

        try:
            loop.call_soon_threadsafe(detach)
        except RuntimeError:  # closed meanwhile
            self.detach()
            return
        if not detached.wait(timeout):
            self.detach()

    # -- executor threads -------------------------------------------------------

    def _run_blocking(self, batch) -> None:
        self._complete_off_loop(batch, self.mv.execute_requests(self.instance, batch))

    def _fail_exited(self, batch, worker) -> None:
        error = self.backend.exited_error(worker, len(batch.requests))
        self.backend.release_worker()
        self._complete_off_loop(batch, self.mv.failed_batch(self._t_start, error))

    def _complete_off_loop(self, batch, outcome: tuple) -> None:
        """Through the completion queue (thread-safe), then back to the loop."""
        mv = self.mv
        if mv.tracing:
            mv.stamp_traces(batch, outcome)
        mv.scheduler.complete(batch, *outcome)
        try:
            self.loop.call_soon_threadsafe(self._done)
        except RuntimeError:  # the loop is closed: nothing more runs here
            self.batch = None
            self.idle.set()


def finish_on_loop(mv, batch, outcome: tuple) -> None:
    """Records a batch the event loop ran (``outcome``: what
    execute_batch returns) and answers its requests, on the loop thread."""
    if mv.tracing:
        mv.stamp_traces(batch, outcome)
    server = mv.server
    if server is None:  # no Server reads this model's completion queue
        mv.scheduler.complete(batch, *outcome)
        return
    # Answered here rather than through the completion queue, which would
    # only signal this same thread (an eventfd write and read).
    mv.scheduler.record(batch, *outcome)
    if len(outcome) > 4:
        server.resolve_now(batch, outcome[4], outcome[5])
    else:
        server.resolve_now(batch, 0, None)


def running_loop():
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
