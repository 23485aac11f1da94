"""A cheap in-process model run on the event loop's own thread.

For a model whose batches take tens of µs (add_sub or a small MLP on ONNX
Runtime's CPU provider), handing each batch to an instance thread costs more
than running it: the thread is woken (a futex), takes the GIL from the event
loop, and its completion wakes the loop again (an eventfd). Measured on 2
cores, ONNX add_sub over HTTP at c16: 6.8-7.8k infer/s through instance
threads, ~10k run inline, with 30% less CPU per request.

The loop takes the batch at the end of the loop iteration in which requests
arrived, so what arrived together is batched together (the csrc scheduler
still forms the batch: preferred sizes, max_batch_size, priorities, queue
policies, the batching delay, whose end the model's batch_timer brings the
loop back for), runs it and answers it at once. It does so only while the model
stays cheap, because an inline batch holds up every connection on the loop
while it runs. The instance threads stay, parked in the scheduler
(Scheduler.park_instances), and take over when batches get expensive; back
on threads, the model returns to the loop once its batches are cheap again.

Config: ``parameters { key: "pyserver_inline_execution" value { string_value:
"off" } }`` keeps a model on its threads ("auto", the default, lets it move).
"""

from __future__ import annotations

import collections
import logging
import threading

from pyserver.backends.base import Capability, ExecutionDriver, running_loop
from pyserver.engine.batch_execution import DirectRoute, InlineBatches
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")

INLINE_PARAMETER = "pyserver_inline_execution"

# A model moves to the loop when one of its last SAMPLES batches took less
# than CHEAP_NS of its instance thread's CPU time (CPU time, not wall time:
# waiting for the GIL held by the busy loop says nothing about the model).
# It goes back to its threads when the average inline batch, wall time,
# passes COSTLY_NS: then the loop would stall its connections for that long.
# A batch counts for at most OUTLIER_NS there: one batch stretched by the
# loop thread losing its core for milliseconds (a busy shared machine, a
# sampling profiler stopping the process) must not send a cheap model back;
# batches that are all costly still do, within 6 of them. Each return to
# the threads makes the next move wait for 4x as many thread batches (up to
# MAX_WAIT), so a model on the edge does not swing back and forth at every
# few batches.
CHEAP_NS = 200_000
COSTLY_NS = 1_000_000
OUTLIER_NS = 2 * COSTLY_NS
SAMPLES = 8
MAX_WAIT = 8192


def inline_setting(config) -> str:
    """The config's pyserver_inline_execution value: "auto" or "off"."""
    params = config.parameters
    if INLINE_PARAMETER not in params:
        return "auto"
    value = params[INLINE_PARAMETER].string_value.strip().lower()
    if value not in ("auto", "off"):
        raise ServerError(Code.INVALID_ARG,
                          f"model '{config.name}': parameter '{INLINE_PARAMETER}' must be "
                          f"\"auto\" or \"off\", got \"{params[INLINE_PARAMETER].string_value}\"")
    return value


def can_inline(mv) -> bool:
    """Whether ``mv`` may run on the event loop: every instance's backend is
    in-process on the CPU (Capability.RUNS_INLINE), no sequences, and
    nothing needs the completion queue's ordering (preserve_ordering) or a
    response stream, and no host policy places an instance (--host-policy:
    it runs on its instance threads, which the policy pins, not on the
    loop). A batching delay is kept by the model's batch_timer."""
    if not mv.instances or inline_setting(mv.config) == "off":
        return False
    if mv.sequence is not None or mv.decoupled:
        return False
    if mv.config.dynamic_batching.preserve_ordering:
        return False
    if any(i.placement for i in mv.instances):  # a host policy places it: its own threads
        return False
    return all(Capability.RUNS_INLINE in i.capabilities for i in mv.instances)


class InlineInstance(ExecutionDriver):
    """Runs ``mv``'s batches on the loop while they are cheap (see module)."""

    def __init__(self, mv, loop):
        self.mv = mv
        self.instance = mv.instances[0]
        self.loop = loop
        self.inline = False  # True: threads parked, the loop runs every batch
        self.cheap = False  # set by an instance thread: recent batches were cheap
        self._samples = collections.deque(maxlen=SAMPLES)
        self._observed = 0  # thread batches since the model last left the loop
        self._wait = SAMPLES  # thread batches to see before it moves to the loop
        # runs the batches of a plain model (engine/batch_execution.pyx) and
        # keeps every model's inline batches' average wall time
        self._batches = InlineBatches(mv.scheduler, self.instance.backend.execute, mv,
                                      mv.context.answer, mv.max_batch_size > 0,
                                      COSTLY_NS, OUTLIER_NS)
        self._scheduled = False
        self._stopped = False
        self.moves = 0  # between the loop and the threads, either way
        self._spin_s = mv.low_load_spin_s
        # held while batches run on the loop (stop waits for it); a lock
        # rather than an Event: taking and releasing one costs ~0.1 µs, an
        # Event's set and clear ~2 µs, per drain
        self._running = threading.Lock()

    # -- instance threads -------------------------------------------------------

    def observe(self, cpu_ns: int) -> None:
        """An instance thread ran a batch in ``cpu_ns`` of its CPU time."""
        samples = self._samples
        samples.append(cpu_ns)
        self._observed += 1
        if self._observed >= self._wait and min(samples) < CHEAP_NS:
            self.cheap = True

    # -- the loop thread ----------------------------------------------------------

    def dispatch(self) -> None:
        """After an enqueue: run what is queued at the end of this loop
        iteration, once the model is on the loop."""
        if not self.inline:
            if not self.cheap or self._stopped:
                return
            self._move(inline=True)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if not self.inline or self._stopped:
            return
        mv = self.mv
        running = self._running
        running.acquire()
        try:
            # compiled for a plain model; traced batches take the general path
            costly = self._batches.run() if mv.plain_batches and not mv.tracing \
                else self._drain_each()
            if costly:
                self._move(inline=False)  # the threads take what is left
            else:
                mv.wake_when_due()
        finally:
            running.release()

    def _drain_each(self) -> bool:
        """The batches ready now, through the model's general path; True when
        they became costly."""
        mv = self.mv
        scheduler = mv.scheduler
        instance = self.instance
        note = self._batches.note
        while True:
            batch = scheduler.try_next_batch()
            if batch is None:
                return False
            outcome = mv.execute_batch(instance, batch)
            mv.finish_on_loop(batch, outcome)
            if note(outcome.end_ns - outcome.start_ns):
                return True

    def _move(self, inline: bool) -> None:
        mv = self.mv
        self.inline = inline
        self.moves += 1
        log.debug("model '%s' version %s: %s", mv.name, mv.version,
                  "batches run on the event loop" if inline else
                  f"batches back on the instance threads (average "
                  f"{self._batches.average_ns / 1e3:.0f} µs "
                  "on the loop)")
        if inline:
            self._batches.reset()
            mv.low_load_spin_s = 0.0  # completions come from this thread, not the queue
        else:
            self.cheap = False
            self._samples.clear()
            self._observed = 0
            self._wait = min(self._wait * 4, MAX_WAIT)
            mv.low_load_spin_s = self._spin_s
        mv.scheduler.park_instances(inline)

    def direct_route(self) -> DirectRoute | None:
        """What runs the model's plain requests as they are read while it is
        on the loop (engine/batch_execution.pyx DirectRoute), or None where
        every request must queue: dynamic batching (the batcher forms its
        batches), inputs that are not all plain (fixed shape, no reshape,
        required), BYTES tensors, or batches that are not plain."""
        mv = self.mv
        if not mv.plain_batches or mv.config.HasField("dynamic_batching"):
            return None
        tensors = (*mv.inputs.values(), *mv.outputs.values())
        if mv.plain_spec is None or any(s.datatype == "BYTES" for s in tensors):
            return None
        return DirectRoute(self._batches, self, self._running, mv.plain_spec,
                           [(s.name, s.numpy_dtype) for s in mv.inputs.values()],
                           [(s.name, s.datatype) for s in mv.outputs.values()],
                           mv.name, mv.version_str)

    def leave_loop(self) -> None:
        """From the loop: its direct runs became costly; back to the threads."""
        if self.inline:
            self._move(inline=False)

    def release(self) -> None:
        """From any thread: back to the instance threads for good (the model
        is unloading: they take what is still queued)."""
        self._stopped = True
        if self.inline:
            self._move(inline=False)

    def stop(self, timeout: float) -> None:
        """No more inline batches (the scheduler is stopped first); waits for
        the one running on the loop, if called from another thread."""
        self._stopped = True
        if running_loop() is not self.loop and self._running.acquire(timeout=timeout):
            self._running.release()
