"""A model version's instances and the driver that feeds one from its own
thread (the other drivers: model/inline.py, backends/python/loop_driver.py)."""

from __future__ import annotations

import threading
from time import thread_time_ns

from pyserver.backends.base import BatchOutcome, Capability, ExecutionDriver, capabilities_of
from pyserver.engine import now_ns
from pyserver.kernel.errors import Code


class ModelInstance:
    """One instance of a model version: its backend object, its name, and
    the rate limiter's hold on it; an ExecutionDriver feeds it batches."""

    __slots__ = ("model", "name", "backend", "capabilities", "rate_limit", "placement")

    def __init__(self, model, name: str, backend, placement=None):
        self.model = model
        self.name = name
        self.backend = backend
        # its host policy (runtime/host_policy.Placement), or None: anywhere
        self.placement = placement
        self.capabilities = capabilities_of(backend)
        # --rate-limit=execution_count: (limiter, id) while its group lists
        # resources, held for each batch it executes
        self.rate_limit = None


class ThreadDriver(ExecutionDriver):
    """An instance's own thread: waits in the scheduler for a batch (GIL
    released), runs it, completes it and waits for the next in one call."""

    def __init__(self, model, instance: ModelInstance):
        self.model = model
        self.instance = instance
        self.thread = threading.Thread(target=self._run, name=f"instance:{instance.name}",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float) -> None:
        if self.thread.is_alive():
            self.thread.join(timeout=timeout)

    def _run(self):
        model = self.model
        instance = self.instance
        if instance.placement:  # as Triton's instance thread: its CPUs and memory node
            instance.placement.apply_to_thread()
        scheduler = model.scheduler
        # Backends that implement Triton's execute(requests) API take the
        # batch as separate requests; the others take gathered tensors.
        if Capability.TAKES_REQUESTS in instance.capabilities:
            execute = model.execute_requests
        else:
            execute = model.execute_batch
        batch = scheduler.next_batch()  # blocks in C++ with the GIL released
        inline = model.inline  # told how cheap each batch is (model/inline.py)
        release = scheduler.release_held_signal
        try:
            while batch is not None:
                if instance.rate_limit is not None:
                    release()  # the limiter may keep it waiting
                    outcome = self._execute_limited(execute, batch)
                elif inline is None:
                    outcome = execute(instance, batch)
                else:
                    cpu_ns = thread_time_ns()
                    outcome = execute(instance, batch)
                    inline.observe(thread_time_ns() - cpu_ns)
                # The execution released the last batch's completion as it
                # started (see complete_and_next); this covers a failure before.
                release()
                if model.tracing:
                    model.stamp_traces(batch, outcome)
                if model.iterative:
                    model.end_iterations(batch.requests)
                # Completes this batch and waits for the next, GIL released.
                batch = scheduler.complete_and_next(batch, *outcome)
        finally:
            # A thread that dies holding a wake-up would strand every
            # completion behind it (the queue is not empty, so no push signals).
            release()

    def _execute_limited(self, execute, batch) -> BatchOutcome:
        """Runs a batch once the rate limiter grants this instance its
        resources (waiting with the GIL released), then gives them back."""
        instance = self.instance
        limiter, limit_id = instance.rate_limit
        if not limiter.acquire(limit_id):  # the server is stopping
            t = now_ns()
            return BatchOutcome(t, t, t, t, int(Code.UNAVAILABLE),
                                "Server is stopping, scheduler for model has stopped accepting "
                                "new inference requests")
        try:
            return execute(instance, batch)
        finally:
            limiter.release(limit_id)
