# cython: language_level=3
"""The event loop's relay to a Python model instance's worker process, its
common cycle compiled: take a group of batches from the scheduler, send it,
read the worker's answers as its socket becomes readable, finish each batch
and send the next group.

backends/python/loop_driver.py's ``WorkerLoopDriver`` subclasses it with
everything rare, in Python: watching the worker's socket, a worker that is
down or dies, a group that could not be written, stopping. That module's
docstring says why the loop relays at all; this one exists because the
cycle written in Python was about two dozen Python frames per batch of one
request, 11 % of the loop's CPU with add_sub at c64 over gRPC (perf, 2
cores). Every rule stays where it was: the scheduler forms the batches,
the backend packs and sends them and judges its worker's messages
(``on_main_message``), ``ResultReader`` reads a result, ``BatchResults``
finishes a batch or declines to the model's own steps.
"""

from libc.stdint cimport uint64_t

from pyserver.engine.region_io cimport batch_start

import collections
import logging

log = logging.getLogger("pyserver")


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef class WorkerRelay:
    """One instance's batches, a group at a time, from the event loop
    thread (see WorkerLoopDriver). ``max_group``: at most this many batches
    in one message to the worker."""

    def __init__(self, mv, instance, loop, Py_ssize_t max_group):
        self.mv = mv
        self.instance = instance
        self.backend = instance.backend
        self.loop = loop
        self.batches = collections.deque()  # in the worker, not yet answered, in order
        self._worker = None  # the worker whose socket is watched
        self._t_start = 0  # when the group in flight was sent
        self._start_unseen = False  # its first answer not read yet (note_group_start)
        self._stopped = False
        self._scheduler = mv.scheduler
        self._finish = mv.batch_results  # the common case of a batch's end
        # what reads a "result" message when nothing else is to be done
        # with it; None: the backend's on_main_message does it all
        self._results = self.backend.plain_results
        # A dynamically batched model's batch waits for the end of the loop
        # iteration while the server holds this many requests or more (see
        # dispatch); 0: never.
        self._requests = mv.context.requests  # the server's count in flight
        self._fill_from = mv.max_batch_size if (
            self._requests is not None and mv.max_batch_size > 0
            and mv.config.HasField("dynamic_batching")) else 0
        self._max_group = max_group
        self._send_scheduled = False

    def dispatch(self):
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
        self._dispatch()

    cdef _dispatch(self):
        if self.batches or self._stopped:
            return
        if self._fill_from and self._requests.inflight >= self._fill_from:
            if not self._send_scheduled:
                self._send_scheduled = True
                self.loop.call_soon(self._send_at_iteration_end)
            return
        self._send_queued()

    def _send_at_iteration_end(self):
        self._send_scheduled = False
        if not self.batches and not self._stopped:
            self._send_queued()

    cdef list _take_group(self):
        """This instance's share of what is queued: split evenly among the
        instances free to take work now, this one included (at least one
        batch, at most max_group, or what the backend allows). A busy
        sibling takes what is queued when it is free again, so a share kept
        for it would only wait."""
        scheduler = self._scheduler
        cdef list drivers = self.mv.loop_drivers
        cdef Py_ssize_t free = 1, share, limit, i
        if len(drivers) != 1:
            free = 0
            for driver in drivers:
                if not driver.batches:
                    free += 1
        share = -(-scheduler.queued_count // max(free, 1))
        limit = min(max(share, 1), self.backend.group_limit(self._max_group))
        cdef list group = []
        for i in range(limit):
            batch = scheduler.try_next_batch()
            if batch is None:
                if not group:
                    self.mv.wake_when_due()
                break
            group.append(batch)
        return group

    cdef _send_queued(self):
        cdef list group = self._take_group()
        if not group:
            return
        self.batches.extend(group)
        self._t_start = NowNs()
        backend = self.backend
        self._start_unseen = backend.start_watch is not None
        worker = backend.take_worker()
        if worker is None:  # down, restarting: the blocking path waits for it
            self.loop.run_in_executor(None, self._run_blocking, group)
            return
        try:
            backend.send_batches(worker, [b.requests for b in group],
                                 self._load(group))
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

    def _on_readable(self):
        """The worker's socket is readable: each message that has all
        arrived answers (or asks about) the oldest batch in flight."""
        worker = self._worker
        backend = self.backend
        batches = self.batches
        results_of = self._results
        cdef uint64_t start_ns
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
                          "batch in it: %r", self.mv.name, self.instance.name, msg[:1])
                continue
            batch = batches[0]
            kind = msg[0]
            if self._start_unseen and kind != "query":  # "auto" scheduling: its start's wait
                self._start_unseen = False
                backend.note_group_start(msg, self._t_start)
            outcome = None
            results = None
            start_ns = self._t_start
            try:
                start_ns = batch_start(msg, start_ns)
                if kind == "result" and results_of is not None:
                    results = results_of.read(worker, msg)
                else:
                    results = backend.on_main_message(worker, msg, batch.requests)
                    if results is None:
                        continue  # a question about the batch, answered
            except OSError:  # answering its question: it is gone
                continue  # the EOF follows
            except Exception as err:  # the batch failed in the worker
                outcome = self.mv.failed_batch(start_ns, err)
            self._finish_batch(batch, results, outcome, start_ns)

    cdef _finish_batch(self, object batch, object results, object outcome, uint64_t start_ns):
        """The oldest batch in flight is answered: with ``results`` (each
        request's), or ``outcome`` (its failure)."""
        cdef uint64_t output_ns = NowNs()
        self.batches.popleft()
        if not self.batches:
            self.backend.release_worker()
            # The next group goes to the worker before this batch's answers
            # go out: writing an answer to a client on loopback runs the
            # client's side of TCP and may hand it the core, and the worker
            # would idle meanwhile. (When dispatch waits for the iteration's
            # end, the answers go first.)
            self._dispatch()
        if outcome is not None:
            self.mv.finish_on_loop(batch, outcome)
        elif not self._finish.finish(batch, results, start_ns, output_ns):
            mv = self.mv
            mv.finish_on_loop(batch, mv.requests_outcome(batch.requests, results,
                                                         start_ns, output_ns))
        if not self.batches:
            self._idle()
