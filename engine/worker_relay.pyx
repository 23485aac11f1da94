# cython: language_level=3
"""The server's side of a Python model instance's worker channel, compiled:
a group of batches sent (``GroupSender``), a result read (``ResultReader``),
and the event loop's relay between them (``WorkerRelay``): take a group of
batches from the scheduler, send it, read the worker's answers as its
socket becomes readable, finish each batch and send the next group.

backends/python/loop_driver.py's ``WorkerLoopDriver`` subclasses the relay
with everything rare, in Python: watching the worker's socket, a worker that
is down or dies, a group that could not be written, stopping. That module's
docstring says why the loop relays at all; this one exists because the
cycle written in Python was about two dozen Python frames per batch of one
request, 11 % of the loop's CPU with add_sub at c64 over gRPC (perf, 2
cores). Every rule stays where it was: the scheduler forms the batches, the
backend decides which worker takes them and judges its worker's messages
(``on_main_message``), the channel frames them (``Channel.send_exec``),
``BatchResults`` finishes a batch or declines to the model's own steps.
"""

from libc.stdint cimport uint32_t, uint64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from pyserver.engine.region_io cimport read_results

import collections
import logging

from pyserver.engine.ipc import LOAD_ALONE, LOAD_BUSY, LOAD_LOW
from pyserver.engine.region_io import pack_batches

log = logging.getLogger("pyserver")


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef inline double _monotonic() noexcept:
    # time.monotonic()'s clock, without a call into Python
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cpdef uint64_t batch_start(tuple reply, uint64_t default):
    """When the worker started the batch ``reply`` answers (a "result" or
    "fail" message's last field; its clock is the engine's,
    CLOCK_MONOTONIC), else ``default``."""
    kind = reply[0]
    if kind == "result" or kind == "fail":
        return reply[-1]
    return default


cdef class GroupSender:
    """Batches (lists of pending requests) into a worker as one "exec"
    message: their inputs packed into its input region
    (region_io.pack_batches), the worker's books noted (a batch more
    outstanding each, progress now), the message framed and sent
    (Channel.send_exec). One per Python-backend model (what pack_batches
    takes, its name and version); its blocking path and the event loop's
    relay both send through it."""

    def __init__(self, dict codes, code_of, int bytes_code, all_outputs, state_outputs,
                 str model_name, str version):
        self.codes = codes
        self.code_of = code_of
        self.bytes_code = bytes_code
        self.all_outputs = all_outputs
        self.state_outputs = state_outputs
        self.model_name = model_name
        self.version = version

    cpdef list pack(self, worker, list batches):
        """The message's groups, the batches' inputs written (pack_batches)."""
        return pack_batches(worker.inp, batches, self.codes, self.code_of, self.bytes_code,
                            self.all_outputs, self.state_outputs)

    cpdef send_packed(self, worker, list groups, uint32_t load):
        """Sends what pack() made (OSError where the worker is gone);
        ``load``: ipc.LOAD_*, how busy the server is (the worker's spin for
        its next message follows it)."""
        worker.outstanding += len(groups)
        worker.progress = _monotonic()
        worker.main.send_exec(worker.inp.size, groups, self.model_name, self.version, load)

    cpdef send(self, worker, list batches, uint32_t load):
        self.send_packed(worker, self.pack(worker, batches), load)


cdef class ResultReader:
    """A worker's ("result", out_size, encoded, started_ns) message read
    into each request's result (region_io.read_results), the worker's books
    noted on the way: its progress (now), a batch fewer outstanding. One
    per Python-backend model (``dtypes``, ``error_of``, ``again`` as for
    read_results); its blocking path and the event loop's relay both read
    results through it."""

    def __init__(self, dict dtypes, object error_of, object again):
        self.dtypes = dtypes
        self.error_of = error_of
        self.again = again

    cpdef list read(self, worker, tuple reply):
        worker.progress = _monotonic()
        worker.outstanding -= 1
        region = worker.out
        if reply[1] > region.size:  # the worker grew it
            region.follow(reply[1])
        return read_results(region.mm, reply[2], self.dtypes, self.error_of, self.again)


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
        # what sends a group and reads a "result" message where nothing
        # else is to be done with them; None: the backend's send_batches
        # and on_main_message do it all
        self._sender = self.backend.plain_sender
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
        self._idle_waiter = None

    def dispatch(self):
        """Sends what is queued to the worker if this instance is free: at
        once; or at the end of this loop iteration while the server holds
        more requests than a batch of this model holds, or another instance
        of the model is busy.

        Then the loop is what limits the rate, and the requests it reads in
        the rest of the iteration join the group: fewer worker round trips,
        less loop and worker work per request. Otherwise every request
        waits on this group, and sending at once answers sooner.

        bench/python_backend.py (wrk HTTP, h2load gRPC, 2 cores), against
        sending at once. More in flight than a batch holds (--batching, 2
        alternated pairs of 2 rounds): c64 1.09x (HTTP) and 1.15x (gRPC)
        infer/s, c128 1.01x and 1.12x, c16 0.97x (the same code path there:
        noise). Deferring at c16 as well cost 15-25 %; an unbatched model's
        groups gained nothing (-6 to +4 %), so they do not wait for that.
        A busy sibling (--instances 2, 3 rounds): c16 1.17x (HTTP) and
        1.33x (gRPC) infer/s unbatched, 1.26x and 0.99x batched, at
        0.79-0.97x the CPU per inference; c64 (2 rounds) 0.93-0.98x over
        HTTP, 0.99-1.27x over gRPC; c1 level. A free instance beside a busy
        one otherwise took each request as it came, alone: a worker woken
        per request."""
        self._dispatch()

    cdef _dispatch(self):
        if self.batches or self._stopped:
            return
        if (self._fill_from and self._requests.inflight >= self._fill_from) \
                or self._sibling_busy():
            if not self._send_scheduled:
                self._send_scheduled = True
                self.loop.call_soon(self._send_at_iteration_end)
            return
        self._send_queued()

    cdef bint _sibling_busy(self):
        """Whether another instance of the model has a group in flight."""
        return self._free_siblings() < len(self.mv.loop_drivers) - 1

    cdef Py_ssize_t _free_siblings(self) except -1:
        """How many other instances of the model have no group in flight."""
        cdef list drivers = self.mv.loop_drivers
        cdef Py_ssize_t free = 0
        if len(drivers) == 1:
            return 0
        for driver in drivers:
            if driver is not self and not driver.batches:
                free += 1
        return free

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
        cdef Py_ssize_t share, limit, i
        share = -(-scheduler.queued_count // (1 + self._free_siblings()))
        # the backend's bound matters only to a share of more than one
        limit = 1 if share <= 1 else min(share, self.backend.group_limit(self._max_group))
        cdef list group = []
        for i in range(limit):
            # asked even with nothing queued: that ends the scheduler's
            # report of a wait, after which an arrival asks again (enqueue)
            batch = scheduler.try_next_batch()
            if batch is None:
                if not group and scheduler.next_due_ns:  # a batching delay holds it back
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
        cdef list batches = [b.requests for b in group]
        cdef int load = self._load(group)
        try:
            if self._sender is not None:
                self._sender.send(worker, batches, load)
            else:
                backend.send_batches(worker, batches, load)
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

    cdef int _load(self, list group):
        """How busy the server is as ``group`` leaves (ipc.LOAD_*): low,
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
        if len(group) != 1 or self._scheduler.queued_count or mv.batch_timer is not None:
            return LOAD_BUSY
        requests = self._requests
        if requests is None:
            return LOAD_LOW
        cdef Py_ssize_t sent = len(group[0].requests)
        cdef Py_ssize_t others = requests.inflight - sent
        if others <= 0:
            return LOAD_ALONE
        return LOAD_LOW if others <= sent else LOAD_BUSY

    def _on_readable(self):
        """The worker's socket is readable: each message that has all
        arrived answers (or asks about) the oldest batch in flight."""
        worker = self._worker
        backend = self.backend
        batches = self.batches
        cdef ResultReader results_of = self._results
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
            # (anything but a tuple goes to on_main_message, which fails the batch)
            kind = msg[0] if type(msg) is tuple and len(<tuple>msg) else None
            if self._start_unseen and kind is not None and kind != "query":
                # "auto" scheduling: its start's wait
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
        if not self.batches and self._idle_waiter is not None:
            self._idle()
