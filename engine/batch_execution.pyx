# cython: language_level=3
"""A plain model's batches, run with no Python frame of ours on the way.

"Plain" is ModelVersion's call (model/version.py ``plain_batches``): no
implicit state, no batch inputs or outputs, not iterative, and a server that
answers the batch (the event loop cuts its outputs per request). For such a
model one batch is: its inputs gathered, its backend's ``execute`` called,
its outputs' batch dimension checked, four timestamps taken (``run_plain``,
which instance threads call too). On the event loop, ``InlineBatches`` runs
every batch its scheduler has ready that way, records it and answers it. In
Python that walk cost ~3 µs per batch around a ~4 µs ONNX Runtime run (ONNX
add_sub submitted and answered in process: 13.2 against 10.2 µs a request);
with engine/settle.pyx, over gRPC at c64 the loop's CPU per inference fell
to 0.81x (docs/PERFORMANCE_LOG.md, issue #28).

The model keeps every rule whose outcome is an error text (its
``_check_outputs`` and ``batch_error`` are called only when something is
wrong) and the general gather (``_gather_each``).
"""

from libc.stdint cimport uint32_t, uint64_t

from pyserver.engine.batcher cimport Batch, Scheduler
from pyserver.engine.stats cimport FailureReason, ModelStats
from pyserver.engine.types cimport PendingRequest

from pyserver.engine.memory import gather_batch
from pyserver.kernel.errors import Code, ServerError


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef struct Outcome:
    uint64_t start_ns
    uint64_t input_end_ns
    uint64_t output_start_ns
    uint64_t end_ns
    int code


cpdef object gather_inputs(list requests, object gather_each):
    """A batch's inputs by name: a lone request's own arrays (no copy), the
    batch's rows gathered in C, or ``gather_each(requests)`` where the C
    gather declines (BYTES, not row-major)."""
    if len(requests) == 1:
        return (<PendingRequest>requests[0]).arrays
    batched = gather_batch(requests)
    if batched is None:
        return gather_each(requests)
    return batched


cdef int _check_rows(dict outputs, uint64_t total, model) except -1:
    """Every output of a batch of ``total`` rows has them: else the model's
    error (``_check_outputs``, Triton's text)."""
    for value in outputs.values():
        if value.ndim == 0 or value.shape[0] != total:
            model._check_outputs(outputs, total)
    return 0


cdef str _run(Batch batch, object execute, object model, Scheduler scheduler, bint batching,
              Outcome* out):
    """Runs ``batch``; fills ``out``. Returns the failure's message, or None."""
    cdef list requests = batch.requests
    cdef uint64_t total
    cdef object outputs
    out.start_ns = NowNs()
    out.code = 0
    try:
        inputs = gather_inputs(requests, model._gather_each)
        out.input_end_ns = NowNs()
        # ready to run (the backend releases the GIL now): wake the loop for
        # the previous batch's answers (an instance thread's held signal)
        scheduler.release_held_signal()
        outputs = execute(inputs)
        out.output_start_ns = NowNs()
        if batching:
            _check_rows(<dict?>outputs, batch.c.batch_size, model)
        batch.outputs = outputs
        batch.model = model
        out.end_ns = NowNs()
        return None
    except Exception as err:  # the model failed: this batch only
        out.end_ns = NowNs()
        out.input_end_ns = out.output_start_ns = out.end_ns
        code, message = model.batch_error(err)
        out.code = code
        return message


def run_plain(Batch batch, execute, model, Scheduler scheduler, bint batching):
    """One batch of a plain model on the calling thread: ``(start, input
    end, output start, end, code, message)``, what BatchOutcome holds. On
    success ``batch.outputs`` and ``batch.model`` are set for the cut."""
    cdef Outcome out
    message = _run(batch, execute, model, scheduler, batching, &out)
    return (out.start_ns, out.input_end_ns, out.output_start_ns, out.end_ns, out.code,
            message or "")


cdef class InlineBatches:
    """A plain model's ready batches run on the event loop's thread, each
    recorded in its statistics and answered (``answer(batch, code,
    message)``: Server.resolve_now) as it ends; model/inline.py decides when.

    It keeps the inline batches' average wall time too (every inline batch
    counts, through ``run`` or ``note``): past ``costly_ns`` the model goes
    back to its threads. A batch counts for at most ``outlier_ns``."""

    def __init__(self, Scheduler scheduler, execute, model, answer, bint batching,
                 uint64_t costly_ns, uint64_t outlier_ns):
        self.scheduler = scheduler
        self.execute = execute
        self.model = model
        self.answer = answer
        self.batching = batching
        self.costly_ns = costly_ns
        self.outlier_ns = outlier_ns
        self._average_ns = 0.0

    @property
    def average_ns(self):
        return self._average_ns

    def reset(self):
        self._average_ns = 0.0

    cpdef bint note(self, uint64_t wall_ns):
        """Counts one inline batch; True once the average is costly."""
        if wall_ns > self.outlier_ns:
            wall_ns = self.outlier_ns
        self._average_ns += (wall_ns - self._average_ns) * 0.125
        return self._average_ns > self.costly_ns

    def run(self):
        """Runs, records and answers every batch ready now. True when they
        became costly (the model then goes back to its threads, which take
        what is left), False once none is ready."""
        cdef Scheduler scheduler = self.scheduler
        cdef Batch batch
        cdef Outcome out
        cdef str message
        while True:
            found = scheduler.try_next_batch()
            if found is None:
                return False
            batch = <Batch>found
            message = _run(batch, self.execute, self.model, scheduler, self.batching, &out)
            scheduler.record(batch, out.start_ns, out.input_end_ns, out.output_start_ns,
                             out.end_ns, out.code, message or "")
            self.answer(batch, out.code, message)
            if self.note(out.end_ns - out.start_ns):
                return True


cdef class DirectRoute(PlainModel):
    """A plain request to a model on the loop, run as it is read: no queue,
    no future, no request or response object (a protocol's decoder checks
    it against ``inputs`` and answers from the outputs ``run`` returns).

    Such a request would have been queued alone and run by ``InlineBatches``
    at the end of the loop's turn (a model without dynamic batching forms
    no batch of several): the same run, recorded the same way, with no
    queue time. ``ready()`` says whether that holds now: the model is on the
    loop (``driver``, its InlineInstance: ``inline``, ``_stopped``,
    ``leave_loop()``), no inline drain of it is under way (the driver's
    ``running`` lock, held across every run on the loop, is free), nothing
    of it is queued (that would run first), and its batches are not being
    traced."""

    def __init__(self, InlineBatches batches, driver, running, PlainSpec spec, list inputs,
                 list outputs, model_name, version):
        """``spec``, ``inputs``, ``outputs``, the names: see PlainModel."""
        PlainModel.__init__(self, spec, inputs, outputs, model_name, version)
        self.batches = batches
        self.driver = driver
        self.running = running

    cdef bint ready(self):
        driver = self.driver
        # running held: an inline drain is under way on this thread (answering
        # one of its batches may bring the next request here) and will take
        # a queued request in turn; or stop() waits for the loop's batches
        return driver.inline and not driver._stopped and not self.running.locked() and \
            self.batches.scheduler.c.get().QueuedCount() == 0 and not self.batches.model.tracing

    cpdef object run(self, dict feed, uint32_t batch_size, uint64_t received_ns):
        """Runs one request (``feed``: its inputs by name, checked; read at
        ``received_ns``): its outputs by name, every one of the model's.
        Raises the model's batch error (ServerError) when the run fails."""
        cdef InlineBatches batches = self.batches
        cdef ModelStats stats = batches.scheduler.stats
        cdef uint64_t start, output_start, end
        cdef dict outputs
        running = self.running
        running.acquire()
        self.runs += 1
        try:
            start = NowNs()
            try:
                outputs = <dict?>batches.execute(feed)
                output_start = NowNs()
                for name in self.output_names:
                    if name not in outputs:
                        raise ServerError(Code.INTERNAL, f"model '{self.model_name}' gave no "
                                                         f"output '{name}'")
                if self.spec.c.get().batching():
                    _check_rows(outputs, batch_size, batches.model)
            except Exception as err:
                end = NowNs()
                # BACKEND, as stats.FAILURE_REASONS orders them
                stats.c.get().RecordFailure(end - received_ns, <FailureReason><int>2)
                code, message = batches.model.batch_error(err)
                self._note(end - start)
                raise ServerError(Code(code), message) from None
            end = NowNs()
            # as Scheduler::RecordBatch records a batch of one with no wait
            # (a model that does not batch counts it as one row)
            stats.c.get().RecordExecution(batch_size or 1, 0, output_start - start,
                                          end - output_start)
            stats.c.get().RecordSuccess(end - received_ns, 0, 0, output_start - start,
                                        end - output_start)
            self._note(end - start)
            return outputs
        finally:
            running.release()

    cdef int _note(self, uint64_t wall_ns) except -1:
        if self.batches.note(wall_ns):
            self.driver.leave_loop()
        return 0


cdef class NamedRun:
    """A backend's ``execute`` over a runtime call that returns its outputs
    as a list: ``run(names, feed, options)`` → ``{name: output}``, the
    Python frames of a wrapper method saved per batch. Where ``run`` raises,
    ``fallback(names, feed, options)`` runs the batch again (ONNX Runtime:
    the pybind session's run, then the Python session's, whose errors read
    as users know them)."""

    cdef object run
    cdef list names
    cdef object options
    cdef object fallback

    def __init__(self, run, list names, options, fallback):
        self.run = run
        self.names = names
        self.options = options
        self.fallback = fallback

    def __call__(self, dict feed):
        cdef list names = self.names
        try:
            results = self.run(names, feed, self.options)
        except Exception:
            results = self.fallback(names, feed, self.options)
        return dict(zip(names, results))
