"""A loaded model version: its config, request validation, its scheduler in
the engine, and the instance workers that execute batches.

The request path through here:
  Server.submit -> ModelVersion.submit (validate, enqueue into csrc)
  instance thread: Scheduler.next_batch (GIL released) -> gather -> backend
                   -> scatter into per-request responses -> Scheduler.complete
  event loop: CompletionQueue fd readable -> futures resolved (Server)
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np

from pyserver._proto import ModelConfig
from pyserver.backends._common import instance_placement
from pyserver.backends.base import ANSWERED_LATER, RESCHEDULED, BatchOutcome, Capability, running_loop
from pyserver.config import backend_name, config_to_json
from pyserver.engine import (
    Batch,
    CompletionQueue,
    ModelStats,
    Scheduler,
    gather,
    now_ns,
)
from pyserver.engine.admission import Route
from pyserver.engine.batch_execution import gather_inputs, run_plain
from pyserver.engine.batch_results import BatchResults
from pyserver.engine.completion import CompletionSpin
from pyserver.engine.plain_spec import PlainModel
from pyserver.engine.request_path import RequestPath
from pyserver.engine.timer import DueTimer
from pyserver.kernel import dtypes
from pyserver.kernel.context import ServerContext
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.flags import bool_word
from pyserver.kernel.types import (
    InferRequest,
    InferResponse,
    InferTensor,
    PendingRequest,
    RequestedOutput,
)
from pyserver.model.classification import classify, load_labels
from pyserver.model.custom_batching import load_strategy
from pyserver.model.inline import InlineInstance, can_inline, inline_setting
from pyserver.model.instance import ModelInstance, ThreadDriver
from pyserver.model.ragged import BatchShaping
from pyserver.model.sequence import NOT_ITERATIVE, Reschedule, SequenceControls
from pyserver.runtime.tracing import Tracer

log = logging.getLogger("pyserver")

# Our opt-in batching policy: parameters { key: "pyserver_batching" value { string_value: "eager" } }
EAGER_PARAMETER = "pyserver_batching"
# An unloading model's queue gets this long without progress before what is
# left in it fails.
QUEUE_STALL_S = 1.0


def _gather_rows(name: str, parts: list) -> np.ndarray:
    """One input of a batch: the requests' arrays one after the other along
    the batch dimension (in C, GIL released for large ones)."""
    if parts[0].dtype == np.object_:
        return np.concatenate(parts)
    out = np.empty((sum(a.shape[0] for a in parts),) + parts[0].shape[1:], dtype=parts[0].dtype)
    try:
        gather(parts, out)
    except BufferError:  # a source not in row-major order
        gather([np.ascontiguousarray(a) for a in parts], out)
    return out


def _outputs_of(result) -> dict | None:
    """The outputs in a backend's per-request result (None: it failed)."""
    if type(result) is tuple:
        return result[0]
    return result if type(result) is dict else None


class TensorSpec:
    """One input or output as the config declares it (wire datatype, dims
    without the batch dimension)."""

    __slots__ = ("name", "datatype", "dims", "numpy_dtype", "variable", "ragged",
                 "optional", "reshape")

    def __init__(self, proto, is_input: bool):
        self.name = proto.name
        self.datatype = dtypes.config_to_wire(dtypes.config_type_name(proto.data_type))
        self.dims = tuple(int(d) for d in proto.dims)
        self.numpy_dtype = dtypes.WIRE_TO_NUMPY[self.datatype]
        self.variable = -1 in self.dims
        self.ragged = bool(is_input and proto.allow_ragged_batch)
        self.optional = bool(is_input and proto.optional)
        self.reshape = tuple(int(d) for d in proto.reshape.shape) if proto.HasField("reshape") else None

    def matches(self, dims) -> bool:
        if len(dims) != len(self.dims):
            return False
        for want, got in zip(self.dims, dims):
            if want != -1 and want != got:
                return False
        return True

    def metadata(self, batching: bool) -> dict:
        shape = ([-1] if batching else []) + list(self.dims)
        return {"name": self.name, "datatype": self.datatype, "shape": shape}


class ModelVersion:
    """One version of a model, loaded and serving."""

    ensemble = None  # an EnsemblePlan for platform "ensemble": no instances of its own
    route = None  # the compiled common case of a new request (start(); engine/admission.pyx)
    first_response_by_stream = False  # a decoupled model's first-response histogram
    loop_drivers: list = []  # the drivers the event loop dispatches to (set by start)
    drivers: list = []  # every instance's driver (set by start)
    inline = None  # an InlineInstance while the model may run on the event loop
    batch_timer = None  # a DueTimer: the loop's drivers ask again as a batching delay ends

    def __init__(self, name: str, version: int, config: ModelConfig, version_dir: str,
                 context: ServerContext, batch_strategy: str | None = None):
        """``batch_strategy``: the custom batching library to load
        (model/custom_batching.py finds it)."""
        self.name = name
        self.version = version
        self.version_str = str(version)
        self.config = config
        self.version_dir = version_dir
        self.backend_name = backend_name(config)
        self.platform = config.platform or config.backend
        self.max_batch_size = int(config.max_batch_size)
        self.inputs = {t.name: TensorSpec(t, True) for t in config.input}
        self.outputs = {t.name: TensorSpec(t, False) for t in config.output}
        self.output_order = [t.name for t in config.output]
        self._all_outputs = [RequestedOutput(n) for n in self.output_order]
        self.required_inputs = [n for n, s in self.inputs.items() if not s.optional]
        self.has_optional = any(s.optional for s in self.inputs.values())
        self._enforced = [n for n, s in self.inputs.items() if s.variable and not s.ragged]
        # allow_ragged_batch, batch_input, batch_output (checked here)
        shaping = BatchShaping(config)
        if (shaping.inputs or shaping.outputs) and self.backend_name == "tensorrt":
            raise ServerError(Code.UNSUPPORTED,
                              f"unable to load model '{name}': batch_input and batch_output are "
                              "supported for onnxruntime and pytorch models, not tensorrt")
        self._shaping = shaping if shaping.active else None
        self.enforce_shapes = bool(self._enforced) or self.has_optional
        # Decoupled models answer 0..N times per request, through a
        # ResponseStream in place of the request's future (Server.submit_stream).
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        inline_setting(config)  # a bad value fails the load
        # The server's services (its completion queue, tracer, rate limiter,
        # the callback that answers a batch the loop ran): handed down.
        self.context = context
        completions = context.completions
        self.stats = ModelStats()
        # Stateful models: sequence_batching's controls (csrc schedules).
        self.sequence = SequenceControls(config, str(Path(version_dir).parent)) \
            if config.HasField("sequence_batching") else None
        self.has_implicit_state = bool(self.sequence is not None and self.sequence.states)
        # Iterative sequences: requests its model reschedules run again.
        self.iterative = self.sequence is not None and self.sequence.iterative
        self._reschedule = Reschedule(self) if self.iterative else None
        self._strategy = None if batch_strategy is None else load_strategy(
            batch_strategy, name, version, str(Path(version_dir).parent),
            config_to_json(config), self.output_order)
        # Only the dynamic batcher consults it (Triton loads it all the same).
        self._batch_viewer = self._strategy if config.HasField("dynamic_batching") else None
        self.scheduler = self._make_scheduler(completions)
        # How long the event loop may spin for this model's completion when
        # it is the only request in flight: the batching delay plus a short
        # execution; a slower model simply completes through the fd,
        delay_us = self.config.dynamic_batching.max_queue_delay_microseconds \
            if self.config.HasField("dynamic_batching") else 0
        self.low_load_spin_s = min(delay_us, 1000) / 1e6 + 100e-6
        # and is not spun for once such spins keep missing it
        self.completion_spin = CompletionSpin()
        self.instances: list[ModelInstance] = []
        # instance_group { passive: true }: loaded (and warmed up) but given
        # no work, as Triton keeps them
        self.passive_instances: list[ModelInstance] = []
        # Request validation (every rule and text) and the cut of outputs
        # into responses, compiled (engine/request_path.pyx).
        self._path = RequestPath(name, self.version_str, self.inputs, self.outputs,
                                 self.max_batch_size, self._all_outputs, self._output_tensor,
                                 dtypes.numpy_to_wire, self.required_inputs, self._enforced,
                                 self.enforce_shapes)
        self.labels = load_labels(str(Path(version_dir).parent), config)
        self.load_duration_s = 0.0
        self.tracing = False  # set by the server while tracing may be on
        self._config_json = None
        # A plain model's batches run compiled (engine/batch_execution.pyx):
        # nothing to do beyond gather, execute and the cut the server makes
        # as it answers (implicit state is fed and kept around the run).
        self.plain_batches = not self.has_implicit_state and not self.iterative \
            and self._shaping is None and context.answer is not None
        # every input has fixed dims, no reshape, is required and not ragged:
        # the plain case's rules (engine/plain_spec.pyx); else None
        self.plain_spec = self._path.plain

    # -- setup ---------------------------------------------------------------

    def _make_scheduler(self, completions: CompletionQueue) -> Scheduler:
        if self.sequence is not None:
            return Scheduler.sequence(self.sequence.scheduler_config(self.config), self.stats,
                                      completions)
        if not self.config.HasField("dynamic_batching"):
            return Scheduler.pass_through(self.stats, completions, False)
        db = self.config.dynamic_batching
        policy_names = {0: "REJECT", 1: "DELAY"}

        def policy(p):
            return {
                "timeout_action": policy_names.get(p.timeout_action, "REJECT"),
                "default_timeout_microseconds": p.default_timeout_microseconds,
                "allow_timeout_override": p.allow_timeout_override,
                "max_queue_size": p.max_queue_size,
            }

        params = self.config.parameters
        eager = EAGER_PARAMETER in params and params[EAGER_PARAMETER].string_value == "eager"
        delay_hook = int(os.environ.get("TRITONSERVER_DELAY_SCHEDULER", "0") or 0)
        return Scheduler.dynamic({
            "max_batch_size": self.max_batch_size,
            "preferred_batch_size": list(db.preferred_batch_size),
            "max_queue_delay_microseconds": db.max_queue_delay_microseconds,
            "priority_levels": db.priority_levels,
            "default_priority_level": db.default_priority_level,
            "default_queue_policy": policy(db.default_queue_policy),
            "priority_queue_policy": {int(k): policy(v) for k, v in db.priority_queue_policy.items()},
            "preserve_ordering": db.preserve_ordering,
            "enforce_equal_shapes": self.enforce_shapes,
            "eager": eager,
            "delay_scheduler_count": delay_hook,
        }, self.stats, completions, self._batch_viewer)

    def healthy(self) -> bool:
        """False while any instance's backend reports itself down (e.g. a
        Python backend worker being restarted)."""
        for instance in self.instances:
            check = getattr(instance.backend, "healthy", None)
            if check is not None and not check():
                return False
        return True

    def add_instance(self, name: str, backend, group=None, placement=None):
        """``group``: the instance's instance_group (a passive one's instances
        load but take no work); ``placement``: its host policy
        (runtime/host_policy.Placement; its thread runs under it). Under
        --rate-limit=execution_count an instance whose group lists
        rate_limiter resources registers with the server's limiter
        (ServerError with Triton's text when they cannot work)."""
        instance = ModelInstance(self, name, backend, placement)
        if group is not None and group.passive:
            self.passive_instances.append(instance)
            return
        self.instances.append(instance)  # first: a failed load closes it
        attach = getattr(backend, "attach", None)
        if attach is not None:  # backends that answer on their own (decoupled, BLS)
            attach(self)
        rate_limiter = self.context.rate_limiter
        if rate_limiter is not None and group is not None and group.rate_limiter.resources:
            _, device = instance_placement(self.config, name)
            needs = [(r.name, getattr(r, "global"), r.count) for r in group.rate_limiter.resources]
            instance.rate_limit = (rate_limiter, rate_limiter.add_instance(
                needs, device, group.rate_limiter.priority))

    def start(self):
        """Starts the instances: on threads, or driven by the running event
        loop where they can be (see backends/python/loop_driver.py)."""
        if any(Capability.OUT_OF_PROCESS in i.capabilities for i in self.instances):
            # Its work happens in another process that needs a core of its
            # own: the event loop spinning for the answer only takes it away
            # (Python add_sub, HTTP c1: ~1.25x the throughput without the spin).
            self.low_load_spin_s = 0.0
        loop = running_loop()
        tracer = self.context.tracer
        # Loaded while tracing is on (set at startup, or before a poll or
        # explicit load): its batches stamp their traces too.
        self.tracing = bool(tracer is not None and tracer.active)
        # a batch a loop driver's backend answered per request, finished in one call
        self.batch_results = BatchResults(self, self._path.responses, self._other_result,
                                          self.scheduler)
        loop_drivers = []
        drivers = []
        # Rate-limited instances wait for resources: on their own threads.
        limited = any(i.rate_limit is not None for i in self.instances)
        if loop is not None and not limited and can_inline(self):
            self.inline = InlineInstance(self, loop)
            loop_drivers.append(self.inline)
            drivers.append(self.inline)
        for instance in self.instances:
            if loop is not None and not limited and self._loop_drivable(instance):
                driver = instance.backend.loop_driver(self, instance, loop)
                loop_drivers.append(driver)
            else:
                driver = ThreadDriver(self, instance)
            drivers.append(driver)
        self.loop_drivers = loop_drivers
        self.drivers = drivers
        # What Server.submit does for a plain request, in one compiled call:
        # open unless requests need more than validation and the queue.
        if len(loop_drivers) == 1:
            dispatch = loop_drivers[0].dispatch
        else:
            dispatch = self.dispatch if loop_drivers else None
        self.route = Route(self, self._path.validate, self._path.answer, self.scheduler,
                           dispatch,
                           not self.decoupled and self.ensemble is None and self.sequence is None
                           and self._batch_viewer is None)
        # PYSERVER_DIRECT_RUN=0: every request queues (the alternative
        # bench/perf_analyzer.py measures direct runs against)
        if self.inline is not None and self.route.open and bool_word(
                os.environ.get("PYSERVER_DIRECT_RUN", "1")) is not False:
            self.route.direct = self.inline.direct_route()
        # Plain requests read straight into their queue entries (PlainPending;
        # PYSERVER_PLAIN_RECORDS=0: as InferRequests, the alternative
        # bench/perf_analyzer.py measures).
        if self.route.open and bool_word(
                os.environ.get("PYSERVER_PLAIN_RECORDS", "1")) is not False:
            self.route.records = self._plain_model()
        if loop_drivers and self.config.dynamic_batching.max_queue_delay_microseconds:
            self.batch_timer = DueTimer(loop, self.dispatch)
        for driver in drivers:
            driver.start()

    def _plain_model(self) -> PlainModel | None:
        """The model as the protocols read and answer its plain records
        (engine/plain_spec.pyx PlainModel), or None where some request must
        be an InferRequest: inputs that are not plain, BYTES, batches that
        are not plain (model/version.py plain_batches), or a backend that
        reads its requests' InferRequests (a Triton C backend). A backend
        that answers per request (Python: Capability.TAKES_PLAIN_RECORDS)
        types its outputs by their arrays; the others' batch outputs are cut
        by RequestPath.scatter, typed by the config."""
        if self.plain_spec is None or not self.plain_batches:
            return None
        tensors = (*self.inputs.values(), *self.outputs.values())
        if any(s.datatype == "BYTES" for s in tensors):
            return None
        kinds = {Capability.TAKES_REQUESTS in i.capabilities for i in self.instances}
        if kinds == {True}:  # per request, each of them through region_io
            if not all(Capability.TAKES_PLAIN_RECORDS in i.capabilities
                       for i in self.instances):
                return None
            respond, by_arrays = self._path.plain_response, True
        elif kinds == {False}:  # gathered batches, cut by RequestPath.scatter
            respond, by_arrays = self._path.plain_answer, False
        else:
            return None
        return PlainModel(self.plain_spec, [(s.name, s.numpy_dtype) for s in self.inputs.values()],
                          [(s.name, s.datatype) for s in self.outputs.values()], self.name,
                          self.version_str, respond, by_arrays)

    def _loop_drivable(self, instance: ModelInstance) -> bool:
        """Whether the event loop drives ``instance``: its backend offers a
        loop driver (a Python model that is not decoupled), and no sequence
        batching or preserve_ordering (whose order the completion queue
        keeps). Dynamic batching is the scheduler's either way: the loop
        takes what it forms, and batch_timer brings the loop back as a
        batching delay ends."""
        if self.sequence is not None or self.config.dynamic_batching.preserve_ordering:
            return False
        # PYSERVER_LOOP_DRIVEN_BATCHING=0: dynamic batching on instance
        # threads, as before (the alternative bench/perf_analyzer.py measures)
        if self.config.HasField("dynamic_batching") and bool_word(
                os.environ.get("PYSERVER_LOOP_DRIVEN_BATCHING", "1")) is False:
            return False
        return Capability.LOOP_DRIVEN in instance.capabilities

    def dispatch(self):
        """The event loop's instances take what is queued (after an enqueue,
        or as a batching delay ends)."""
        for driver in self.loop_drivers:
            driver.dispatch()

    def wake_when_due(self) -> None:
        """After a loop driver's try_next_batch() gave no batch: when a
        batching delay holds requests back (scheduler.next_due_ns),
        dispatch() runs again as it ends. When they are all the server has
        in flight, the loop has nothing else to do until then: the timer
        spins its end rather than pay the loop's wake-up from sleep (~45 µs
        here) on top of the delay."""
        timer = self.batch_timer
        due_ns = self.scheduler.next_due_ns
        if timer is not None and due_ns:
            requests = self.context.requests
            timer.arm(due_ns, requests is not None
                      and requests.inflight == self.scheduler.queued_count)

    def stop(self, deadline: float | None = None):
        """Lets queued requests run while they make progress (an unload or a
        reload waits for the requests in flight, as Triton's does), fails
        what is left, lets running batches finish, joins instances.

        With a ``deadline`` (a time.monotonic() value: the server's exit
        timeout has passed) nothing more runs: the queue fails at once, the
        instances get until then to finish the batch they hold, then are
        closed (a Python model's worker is killed, without finalize, as
        Triton exits then without unloading) and an instance thread stuck in
        a model is left behind."""
        if self.inline is not None:
            self.inline.release()  # the instance threads take what is queued
        if running_loop() is None and deadline is None:
            self._drain_queue(QUEUE_STALL_S)
        self.scheduler.stop()
        # the custom batching library is finalized now that no batch forms
        self._strategy = self._batch_viewer = None
        if deadline is not None:
            # the requests were answered already: no batch is waited for
            for instance in self.instances + self.passive_instances:
                kill = getattr(instance.backend, "kill", None)
                if kill is not None:
                    kill()
        for driver in self.drivers:
            driver.stop(timeout=30 if deadline is None else
                        max(0.0, deadline - time.monotonic()))
        self._close_batch_timer()
        for instance in self.instances + self.passive_instances:
            close = getattr(instance.backend, "close", None)
            if close is not None:
                close()
        for instance in self.instances + self.passive_instances:
            if instance.rate_limit is not None:
                limiter, limit_id = instance.rate_limit
                limiter.remove_instance(limit_id)
                instance.rate_limit = None

    def _close_batch_timer(self) -> None:
        timer, self.batch_timer = self.batch_timer, None
        if timer is None:
            return
        loop = timer.loop
        if running_loop() is loop or loop.is_closed():
            timer.close()  # its reader is the loop's: removed on its thread
        else:
            loop.call_soon_threadsafe(timer.close)

    def _drain_queue(self, stall_s: float) -> None:
        scheduler = self.scheduler
        left = scheduler.queued_count
        progress = time.monotonic()
        while left:
            time.sleep(0.001)
            now_left = scheduler.queued_count
            if now_left < left:
                left, progress = now_left, time.monotonic()
            elif time.monotonic() - progress > stall_s:
                return

    # -- metadata ------------------------------------------------------------

    def metadata(self, versions: list[str]) -> dict:
        batching = self.max_batch_size > 0
        return {
            "name": self.name,
            "versions": versions,
            "platform": self.platform,
            "inputs": [s.metadata(batching) for s in self.inputs.values()],
            "outputs": [s.metadata(batching) for s in self.outputs.values()],
        }

    def config_json(self) -> dict:
        if self._config_json is None:
            self._config_json = config_to_json(self.config)
        return self._config_json

    # -- request path (event loop thread) ------------------------------------

    def submit(self, request: InferRequest, future, trace=None,
               validated: tuple | None = None) -> PendingRequest:
        """Queues a request; ``validated``: what validate() already
        returned for it (the response cache validates before its lookup)."""
        arrays, batch_size, shape_key = validated or self._path.validate(request)
        pending = PendingRequest(request, future, arrays, batch_size)
        pending.trace = trace  # before it is queued: an instance may take it at once
        viewer = self._batch_viewer  # (stop() may let it go from another thread)
        if viewer is not None:  # what the custom batching library reads
            pending.batch_view = view = viewer.view(pending)
            pending.id = self.scheduler.enqueue(pending, batch_size, request.priority,
                                                request.timeout_us, shape_key, view=view.address)
        elif self.sequence is None:
            pending.id = self.scheduler.enqueue(pending, batch_size, request.priority,
                                                request.timeout_us, shape_key)
        else:
            corr, flags, label = self.sequence.prepare(request, arrays, self.max_batch_size > 0)
            pending.id = self.scheduler.enqueue(pending, batch_size, request.priority,
                                                request.timeout_us, shape_key, corr, flags, label)
        return pending

    def validate(self, request: InferRequest):
        """Triton's checks and texts; returns (arrays by name, batch size,
        shape key for the equal-shape rule). Raises ServerError
        (engine/request_path.pyx holds every rule)."""
        return self._path.validate(request)

    # -- batch execution (instance threads) ----------------------------------

    def execute_batch(self, instance: ModelInstance, batch: Batch) -> BatchOutcome:
        """Runs one batch; returns its timestamps (and code, message on
        failure) for Scheduler.complete."""
        if self.plain_batches:  # the common case, compiled (engine/batch_execution.pyx)
            return BatchOutcome._make(run_plain(batch, instance.backend.execute, self,
                                                self.scheduler, self.max_batch_size > 0))
        t_start = now_ns()
        requests = batch.requests
        try:
            if self.has_implicit_state:
                self.sequence.feed_states(requests)
            inputs = self._gather_inputs(requests)
            t_input = now_ns()
            # The batch is ready to run (the backend releases the GIL now):
            # wake the loop for the previous batch's answers.
            self.scheduler.release_held_signal()
            outputs = instance.backend.execute(inputs)
            t_output = now_ns()
            if self.has_implicit_state:  # one row per request (a sequence batch)
                batching = self.max_batch_size > 0
                self.sequence.keep_states(requests, lambda i: {
                    name: value[i:i + 1] if batching else value for name, value in outputs.items()})
            if self.iterative or self.context.answer is None or self._shaping is not None:
                self._scatter_outputs(requests, outputs, batch.batch_size)
            else:
                # The event loop cuts them per request as it answers
                # (engine/settle.pyx Answers): the requests' objects live in its core's
                # caches (on this thread the cut took 4x its time there), and
                # this instance starts its next batch sooner. An iterative
                # model decides on its responses here (end_iterations); batch
                # outputs are cut here, by their requests' inputs.
                self._check_outputs(outputs, batch.batch_size)
                batch.outputs = outputs
                batch.model = self
            t_end = now_ns()
        except Exception as err:  # the model failed: fail this batch only
            return self.failed_batch(t_start, err)
        return BatchOutcome(t_start, t_input, t_output, t_end)

    def execute_requests(self, instance: ModelInstance, batch: Batch) -> BatchOutcome:
        """Runs one batch on a backend with Capability.TAKES_REQUESTS:
        ``backend.execute_requests(pending requests)`` returns one result per
        request: a dict of outputs, an (outputs, response parameters) tuple,
        or an exception, which fails that request only. An exception raised
        by the backend fails the whole batch."""
        t_start = now_ns()
        try:
            self.scheduler.release_held_signal()  # see execute_batch
            if self.has_implicit_state:
                self.sequence.feed_states(batch.requests)
            results = instance.backend.execute_requests(batch.requests)
            if self.has_implicit_state and len(results) == len(batch.requests):
                states = getattr(results, "states", None)
                self.sequence.keep_states(
                    batch.requests,
                    states.__getitem__ if states is not None else lambda i: _outputs_of(results[i]))
        except Exception as err:  # the model failed: fail this batch only
            return self.failed_batch(t_start, err)
        return self.requests_outcome(batch.requests, results, t_start)

    def requests_outcome(self, requests: list, results: list, t_start: int,
                         t_output: int | None = None) -> BatchOutcome:
        """Each request's response from its backend's result; the batch's
        times (what Scheduler.complete takes; ``t_output``: when the results
        were in hand, by default now)."""
        if t_output is None:
            t_output = now_ns()
        try:
            if len(results) != len(requests):
                raise ServerError(
                    Code.INTERNAL,
                    f"model '{self.name}' returned {len(results)} results for "
                    f"{len(requests)} requests")
            # outputs, (outputs, parameters), an error, or None (decoupled:
            # its responses go through its stream), compiled; the rest here
            self._path.responses(requests, results, self._other_result)
            t_end = now_ns()
        except Exception as err:
            return self.failed_batch(t_start, err)
        times = getattr(results, "times", None)
        if times is not None:  # the backend's own compute times (Triton's C backends)
            return BatchOutcome(t_start, times[1], times[2], t_end)
        return BatchOutcome(t_start, t_start, t_output, t_end)

    def _other_result(self, p: PendingRequest, result) -> None:
        """A request's result that is neither outputs, an error nor None."""
        if result is ANSWERED_LATER:  # its backend answers it (context.answer_late)
            p.response = result
        elif result is RESCHEDULED:  # released to run again
            if self.iterative:
                p.response = self._reschedule
            elif self.decoupled:  # after what it sent: through its stream
                p.response = None
                p.future.push(None, ServerError(Code.INVALID_ARG, NOT_ITERATIVE), True)
            else:
                p.response = ServerError(Code.INVALID_ARG, NOT_ITERATIVE)
        else:  # outputs in another mapping type
            p.response = self._request_response(p, dict(result), None)

    def end_iterations(self, requests: list) -> None:
        """Iterative sequences: a request its model released for good ends
        its sequence, and the sequence's slot goes to the next one."""
        correlation = self.sequence.correlation
        end = self.scheduler.end_sequence
        for p in requests:
            if type(p.response) is not Reschedule:
                corr = correlation(p.request)
                end(corr)
                self.sequence.forget(corr)

    def requeue(self, p: PendingRequest) -> int:
        """Queues a request its model rescheduled (an iterative sequence)
        again, in its sequence, without START; returns its queue id. A
        sequence that lost its slot meanwhile (idle for longer than
        max_sequence_idle_microseconds) starts again. Raises ServerError
        when the model stops."""
        request = p.request
        p.response = None
        request.parameters = {**request.parameters, "sequence_start": False}
        try:
            return self._enqueue_sequence(p)
        except ServerError as err:
            if err.code != Code.INVALID_ARG:  # anything but "must START"
                raise
        request.parameters["sequence_start"] = True
        return self._enqueue_sequence(p)

    def end_sequence_of(self, p: PendingRequest) -> None:
        """Ends the iterative sequence of a request that will not run again."""
        corr = self.sequence.correlation(p.request)
        self.scheduler.end_sequence(corr)
        self.sequence.forget(corr)

    def _enqueue_sequence(self, p: PendingRequest) -> int:
        request = p.request
        corr, flags, label = self.sequence.prepare(request, p.arrays, self.max_batch_size > 0)
        return self.scheduler.enqueue(p, p.batch_size, request.priority, request.timeout_us, 0,
                                      corr, flags, label)

    def _request_response(self, p: PendingRequest, outputs: dict, parameters) -> InferResponse:
        """One request's response from the outputs its backend produced for
        it: those it asked for (all, when it named none), in its order
        (engine/request_path.pyx)."""
        return self._path.response(p, outputs, parameters)

    def finish_on_loop(self, batch: Batch, outcome: BatchOutcome) -> None:
        """Records a batch the event loop ran and answers its requests, on
        the loop thread (a driver that runs on the loop calls this)."""
        if self.tracing:
            self.stamp_traces(batch, outcome)
        answer = self.context.answer
        if answer is None:  # no Server reads this model's completion queue
            self.scheduler.complete(batch, *outcome)
            return
        # Answered here rather than through the completion queue, which would
        # only signal this same thread (an eventfd write and read).
        self.scheduler.record(batch, *outcome)
        answer(batch, outcome.code, outcome.message)

    @staticmethod
    def stamp_traces(batch: Batch, times: tuple) -> None:
        """Adds the queue and compute timestamps to the traced requests."""
        names = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")
        for p, enqueued in zip(batch.requests, batch.enqueue_ns()):
            trace = p.trace
            if trace is not None:
                stamps = trace.get("timestamps")
                if stamps is not None:
                    stamps.append({"name": "QUEUE_START", "ns": enqueued})
                    stamps.extend({"name": n, "ns": t} for n, t in zip(names, times[:4]))
                Tracer.backend_inputs(trace, p.arrays)

    def memory_usage(self) -> list[dict]:
        """The statistics extension's memory_usage: what the backends
        reported their model and instances hold (Triton's C backends report
        it), summed by memory type and id. A backend's ``memory_usage()``
        gives (who reported, [(memory type name, id, bytes)]) parts; a part its
        instances share (the model's) counts once."""
        totals: dict = {}
        seen = set()
        for instance in self.instances + self.passive_instances:
            report = getattr(instance.backend, "memory_usage", None)
            if report is None:
                continue
            for owner, entries in report():
                if owner in seen:
                    continue
                seen.add(owner)
                for kind, device_id, size in entries:
                    totals[kind, device_id] = totals.get((kind, device_id), 0) + size
        return [{"type": kind, "id": device_id, "byte_size": size}
                for (kind, device_id), size in sorted(totals.items())]

    def failed_batch(self, t_start: int, err: Exception) -> BatchOutcome:
        t_end = now_ns()
        code, message = self.batch_error(err)
        return BatchOutcome(t_start, t_end, t_end, t_end, code, message)

    def batch_error(self, err: Exception) -> tuple[int, str]:
        """(code, message) that fail a batch for ``err``."""
        message = err.message if isinstance(err, ServerError) else f"{type(err).__name__}: {err}"
        log.debug("model '%s' failed a batch: %s", self.name, message)
        return (int(err.code) if isinstance(err, ServerError) else int(Code.INTERNAL)), message

    def _gather_inputs(self, requests: list[PendingRequest]) -> dict:
        if self._shaping is not None:  # ragged inputs, batch inputs
            return self._shaping.gather(requests, _gather_rows)
        return gather_inputs(requests, self._gather_each)  # in C when it can

    @staticmethod
    def _gather_each(requests: list[PendingRequest]) -> dict:
        """Each input's rows gathered in Python (BYTES, not row-major)."""
        return {name: _gather_rows(name, [p.arrays[name] for p in requests])
                for name in requests[0].arrays}

    def _output_tensor(self, out, value, datatype: str, batching: bool) -> InferTensor:
        """One requested output as sent back: as is, or its top-k entries when
        the client asked for classification."""
        k = out.parameters.get("classification") if out.parameters else None
        if k is not None:
            value = classify(out.name, value, k, self.labels.get(out.name), batching)
            return InferTensor(out.name, "BYTES", value.shape, value)
        return InferTensor(out.name, datatype, value.shape, value)

    def _scatter_outputs(self, requests: list[PendingRequest], outputs: dict, total: int):
        split = None
        if self._shaping is not None:  # batch outputs: shaped by their requests' inputs
            outputs = dict(outputs)
            split = self._shaping.split_outputs(requests, outputs)
        self._check_outputs(outputs, total)
        self._path.scatter(requests, outputs, total, split)

    def cut_outputs(self, requests: list[PendingRequest], outputs: dict, total: int):
        """Sets each request's response: its rows of the batch's outputs
        (checked by _check_outputs; no batch outputs), on the event loop."""
        self._path.scatter(requests, outputs, total)

    def _check_outputs(self, outputs: dict, total: int):
        batching = self.max_batch_size > 0
        for name, value in outputs.items():
            if batching and (value.ndim == 0 or value.shape[0] != total):
                raise ServerError(
                    Code.INTERNAL,
                    f"model '{self.name}' output '{name}' has batch dimension "
                    f"{value.shape[0] if value.ndim else 'none'}, expected {total}")
