# cython: language_level=3
"""Model schedulers: the dynamic batcher and the pass-through scheduler.

Requests enter as Python objects (their reference travels through csrc as a
token); instances receive them back as a ``Batch``. Which object stands for a
request is up to the caller: the engine never looks inside.
"""
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF
from libc.stdint cimport uintptr_t

from pyserver.engine.status cimport StatusCode, check_status


cdef class Batch:
    """A batch taken by an instance: ``requests`` in batch order;
    ``outputs``, once it has run, when the event loop is to cut them per
    request (``model.cut_outputs``) as it answers."""

    @property
    def batch_size(self):
        return self.c.batch_size

    @property
    def sequence(self):
        return self.c.sequence

    @property
    def dequeue_ns(self):
        return self.c.dequeue_ns

    def enqueue_ns(self):
        return [r.enqueue_ns for r in self.c.requests]

    def __len__(self):
        return self.c.requests.size()


cdef QueuePolicy _policy(dict p):
    cdef QueuePolicy q
    q.timeout_action = TimeoutAction.kDelay if p.get("timeout_action") == "DELAY" else TimeoutAction.kReject
    q.default_timeout_us = p.get("default_timeout_microseconds", 0)
    q.allow_timeout_override = p.get("allow_timeout_override", False)
    q.max_queue_size = p.get("max_queue_size", 0)
    return q


cdef inline BatchTimes _batch_times(uint64_t start, uint64_t input_end, uint64_t output_start,
                                    uint64_t end) noexcept:
    cdef BatchTimes times
    times.compute_start_ns = start
    times.compute_input_end_ns = input_end
    times.compute_output_start_ns = output_start
    times.compute_end_ns = end
    return times


cdef class BatchStrategy:
    """A custom batching rule for ``Scheduler.dynamic`` (csrc's
    BatchStrategy); requests queued under it carry a view it reads."""


cdef inline void _fill_info(RequestInfo& info, uint32_t batch_size, uint64_t priority,
                            uint64_t timeout_us, uint64_t shape_key) noexcept:
    """What every enqueue tells the scheduler of a request."""
    info.batch_size = batch_size
    # A level beyond the model's is its default level, as in Triton
    # (PriorityQueue::LevelFor); beyond uint32 too (0: the default).
    info.priority = <uint32_t>priority if priority <= 0xFFFFFFFF else 0
    info.timeout_us = timeout_us
    info.shape_key = shape_key


cdef class Scheduler:
    """A model's request queue. Create with ``Scheduler.dynamic`` or
    ``Scheduler.pass_through``."""

    def __init__(self):
        raise TypeError("use Scheduler.dynamic() or Scheduler.pass_through()")

    @staticmethod
    def dynamic(dict config, ModelStats stats, CompletionQueue completions,
                BatchStrategy strategy=None):
        """``config`` keys follow config.pbtxt's dynamic_batching fields:
        max_batch_size, preferred_batch_size, max_queue_delay_microseconds,
        priority_levels, default_priority_level, default_queue_policy,
        priority_queue_policy {level: policy}, preserve_ordering; plus ours:
        enforce_equal_shapes, eager, delay_scheduler_count,
        idle_spin_microseconds, wait_spin_microseconds. ``strategy``:
        custom batching; each request is then enqueued with its view."""
        cdef DynamicBatcherConfig c
        cdef Scheduler self = Scheduler.__new__(Scheduler)
        c.max_batch_size = config.get("max_batch_size", 1)
        for size in config.get("preferred_batch_size", ()):
            c.preferred_batch_sizes.push_back(size)
        c.max_queue_delay_us = config.get("max_queue_delay_microseconds", 0)
        c.priority_levels = config.get("priority_levels", 0)
        c.default_priority_level = config.get("default_priority_level", 0)
        c.default_policy = _policy(config.get("default_queue_policy") or {})
        for level, policy in (config.get("priority_queue_policy") or {}).items():
            c.priority_policies[level] = _policy(policy)
        c.preserve_ordering = config.get("preserve_ordering", False)
        c.enforce_equal_shapes = config.get("enforce_equal_shapes", False)
        c.eager = config.get("eager", False)
        c.delay_scheduler_count = config.get("delay_scheduler_count", 0)
        c.idle_spin_us = config.get("idle_spin_microseconds", 50)
        c.wait_spin_us = config.get("wait_spin_microseconds", 200)
        if strategy is not None:
            c.strategy = strategy.c
        check_status(DynamicBatchScheduler.Create(c, stats.c, completions.c, &self.c))
        self.stats = stats
        self.completions = completions
        return self

    @staticmethod
    def sequence(dict config, ModelStats stats, CompletionQueue completions):
        """Triton's sequence batcher. ``config`` keys: model_name,
        max_batch_size, instance_count, max_sequence_idle_microseconds,
        strategy ("direct" or "oldest"), max_candidate_sequences,
        preferred_batch_size, max_queue_delay_microseconds,
        minimum_slot_utilization, preserve_ordering, iterative. Requests need ``correlation_id`` and
        ``sequence_flags`` at enqueue."""
        cdef SequenceBatcherConfig c
        cdef Scheduler self = Scheduler.__new__(Scheduler)
        c.model_name = config.get("model_name", "").encode()
        c.max_batch_size = config.get("max_batch_size", 0)
        c.instance_count = config.get("instance_count", 1)
        c.max_sequence_idle_us = config.get("max_sequence_idle_microseconds", 1000000)
        c.oldest = config.get("strategy", "direct") == "oldest"
        c.max_candidate_sequences = config.get("max_candidate_sequences", 0)
        for size in config.get("preferred_batch_size", ()):
            c.preferred_batch_sizes.push_back(size)
        c.max_queue_delay_us = config.get("max_queue_delay_microseconds", 0)
        c.minimum_slot_utilization = config.get("minimum_slot_utilization", 0.0)
        c.preserve_ordering = config.get("preserve_ordering", False)
        c.iterative = config.get("iterative", False)
        check_status(SequenceBatchScheduler.Create(c, stats.c, completions.c, &self.c))
        self.stats = stats
        self.completions = completions
        return self

    @staticmethod
    def pass_through(ModelStats stats, CompletionQueue completions, bint preserve_ordering=False):
        cdef Scheduler self = Scheduler.__new__(Scheduler)
        self.c.reset(new PassThroughScheduler(stats.c, completions.c, preserve_ordering))
        self.stats = stats
        self.completions = completions
        return self

    def __dealloc__(self):
        if self.c.get() != NULL:
            # Fails what is still queued into the completion queue (which
            # owns those references from then on) and frees instances.
            with nogil:
                self.c.get().Stop()

    def enqueue(self, object request, uint32_t batch_size=0, uint64_t priority=0,
                uint64_t timeout_us=0, uint64_t shape_key=0, uint64_t correlation_id=0,
                uint32_t sequence_flags=0, str correlation_label=None, uintptr_t view=0):
        """Queues ``request``; returns its id (for ``cancel``) and sets
        ``wait_holds`` (the last try_next_batch()'s wait still stands: the
        loop's drivers need not be asked now). Raises ServerError when the
        queue refuses it (full, stopping). ``view``:
        the address of what the model's BatchStrategy reads of the request,
        kept alive by ``request`` while it is queued."""
        cdef RequestInfo info
        _fill_info(info, batch_size, priority, timeout_us, shape_key)
        info.view = <const void*>view
        if correlation_id:  # sequence models only
            info.correlation_id = correlation_id
            info.sequence_flags = sequence_flags
            if correlation_label is not None:
                info.correlation_label = correlation_label.encode()
        return self._enqueue(request, info)

    cdef uint64_t enqueue_request(self, object request, uint32_t batch_size, uint64_t priority,
                                  uint64_t timeout_us, uint64_t shape_key) except? 0:
        """``enqueue`` as a C call, for a request that is not in a
        sequence and has no BatchStrategy view (engine/admission.pyx)."""
        cdef RequestInfo info
        _fill_info(info, batch_size, priority, timeout_us, shape_key)
        return self._enqueue(request, info)

    cdef uint64_t _enqueue(self, object request, RequestInfo& info) except? 0:
        cdef uint64_t rid = 0
        cdef cbool holds = False
        cdef Status st
        Py_INCREF(request)
        info.token = <Token><uintptr_t><PyObject*>request
        # GIL kept: Enqueue only takes the queue lock for an O(1) push, and
        # csrc never waits for the GIL, so this cannot deadlock; releasing it
        # here would hand the GIL to a busy instance thread on every request.
        st = self.c.get().EnqueueForTaker(info, &rid, &holds)
        self.wait_holds = holds
        if not st.ok():
            Py_DECREF(request)
            check_status(st)
        return rid

    def next_batch(self):
        """Blocks, GIL released, until a batch is ready for this instance.
        Returns None once the scheduler is stopped."""
        cdef Batch batch = Batch.__new__(Batch)
        cdef bint got
        with nogil:
            got = self._wait_batch(batch)
        return self._hand_over(batch, got)

    cpdef object try_next_batch(self):
        """A batch if one is ready now, else None; never waits (for an
        instance the event loop drives). The pass-through and dynamic
        schedulers hand batches out this way; the sequence batcher does not.
        Without a batch, ``next_due_ns`` says when a batching delay ends."""
        cdef Batch batch = Batch.__new__(Batch)
        return self._hand_over(batch, self.c.get().TryNextBatch(&batch.c, &self.next_due_ns))

    def park_instances(self, bint parked):
        """While parked, instance threads take no batches and arrivals do
        not wake them: the event loop takes them with try_next_batch()."""
        with nogil:
            self.c.get().ParkInstances(parked)

    cdef bint _wait_batch(self, Batch batch) noexcept nogil:
        cdef bint got = self.c.get().NextBatch(&batch.c)
        if got:
            self._meet_spinning_loop(batch)
        return got

    cdef void _meet_spinning_loop(self, Batch batch) noexcept nogil:
        if batch.c.after_idle:
            # Low load: the event loop is about to release the GIL and spin
            # for this batch's completion; wait for that rather than sleep on
            # a held GIL (see CompletionQueue::SpinUntilWaiter).
            self.c.get().completions().SpinUntilWaiter(30000)

    cdef object _hand_over(self, Batch batch, bint got):
        if not got:
            return None
        # Now that this thread holds the GIL again and can run the batch,
        # let it absorb what queued while it waited for the GIL.
        self.c.get().TopUp(&batch.c)
        cdef list requests = []
        for r in batch.c.requests:
            obj = <object><PyObject*><uintptr_t>r.token
            Py_DECREF(obj)  # the queue's reference; `obj` holds its own
            requests.append(obj)
        batch.requests = requests
        return batch

    def complete_and_next(self, Batch batch, uint64_t compute_start_ns,
                          uint64_t compute_input_end_ns, uint64_t compute_output_start_ns,
                          uint64_t compute_end_ns, int code=0, str message=""):
        """``complete`` then ``next_batch`` in one call, with the GIL released
        across both: the event loop finds the GIL free when it picks up the
        completion, and this thread takes it back only once it has new work.
        When the next batch was ready at once the loop is not woken yet: the
        caller starts that batch, then calls ``release_held_signal()``
        (Scheduler::CompleteAndNext)."""
        cdef BatchTimes times = _batch_times(compute_start_ns, compute_input_end_ns,
                                             compute_output_start_ns, compute_end_ns)
        cdef Status st = Status(<StatusCode>code, message.encode("utf-8"))
        cdef Batch nxt = Batch.__new__(Batch)
        cdef Token token = <Token><uintptr_t><PyObject*>batch
        cdef bint got
        cdef cbool held = False  # a held batch is never after_idle
        Py_INCREF(batch)  # travels with the token to the completion queue
        with nogil:
            got = self.c.get().CompleteAndNext(batch.c, times, token, st, &nxt.c, &held)
            if got:
                self._meet_spinning_loop(nxt)
        return self._hand_over(nxt, got)

    cpdef release_held_signal(self):
        """Wakes the event loop for a completion complete_and_next held back
        (nothing when none is held: one atomic load). The GIL stays held:
        an eventfd write does not block."""
        self.c.get().completions().ReleaseHeldSignal()

    def complete(self, Batch batch, uint64_t compute_start_ns, uint64_t compute_input_end_ns,
                 uint64_t compute_output_start_ns, uint64_t compute_end_ns,
                 int code=0, str message=""):
        """Records the batch's statistics and hands ``batch`` to the
        completion queue (in dequeue order under preserve_ordering)."""
        cdef BatchTimes times = _batch_times(compute_start_ns, compute_input_end_ns,
                                             compute_output_start_ns, compute_end_ns)
        cdef Status st = Status(<StatusCode>code, message.encode("utf-8"))
        Py_INCREF(batch)
        self.c.get().CompleteBatch(batch.c, times, <Token><uintptr_t><PyObject*>batch, st)

    cpdef record(self, Batch batch, uint64_t compute_start_ns, uint64_t compute_input_end_ns,
                 uint64_t compute_output_start_ns, uint64_t compute_end_ns,
                 int code=0, str message=""):
        """``complete``'s statistics only: the caller answers the batch's
        requests itself (not under preserve_ordering)."""
        cdef BatchTimes times = _batch_times(compute_start_ns, compute_input_end_ns,
                                             compute_output_start_ns, compute_end_ns)
        cdef Status st = Status(<StatusCode>code, message.encode("utf-8"))
        self.c.get().RecordBatch(batch.c, times, st)

    def cancel(self, uint64_t request_id):
        """Fails a still-queued request as CANCELLED; False if not queued."""
        return self.c.get().Cancel(request_id)

    def end_sequence(self, uint64_t correlation_id):
        """An iterative sequence's request was released for good: its slot
        goes to the next sequence. False when no such sequence is active."""
        return self.c.get().EndSequence(correlation_id)

    def stop(self):
        with nogil:
            self.c.get().Stop()

    @property
    def queued_count(self):
        return self.c.get().QueuedCount()
