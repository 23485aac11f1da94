"""Server: the protocol-neutral core every frontend talks to.

It owns the engine's completion queue (watched by the event loop: one
wake-up per batch at most), the models (through ModelManager) and the
server-wide settings, and offers health, metadata, infer, statistics,
repository control, logging and trace settings to the frontends. Frontends
only translate their wire format to and from these calls.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading

from pyserver._version import __version__
from pyserver.backends import DEFAULT_BACKEND_DIRECTORY
from pyserver.backends.base import ANSWERED_LATER, Capability
from pyserver.engine import Batch, CompletionQueue, now_ns
from pyserver.engine.admission import Admission, Ledger
from pyserver.engine.rate_limiter import RateLimiter
from pyserver.engine.settle import Answers
from pyserver.kernel.context import ServerContext
from pyserver.kernel.errors import Code, DecoupledModelError, ServerError, invalid_arg, not_running
from pyserver.kernel.types import InferRequest, InferResponse
from pyserver.model.ensemble import (
    decoupled_steps,
    run_ensemble,
    run_ensemble_stream,
    step_versions,
)
from pyserver.model.sequence import Reschedule
from pyserver.model.version import ModelVersion
from pyserver.repository import loader as repository
from pyserver.repository.manager import ModelManager
from pyserver.runtime.custom_metrics import CustomMetrics
from pyserver.runtime.device_memory import DeviceMemory
from pyserver.runtime.host_memory import DEFAULT_PINNED_POOL_BYTES, HostMemory
from pyserver.runtime.host_policy import SETTINGS as HOST_POLICY_SETTINGS
from pyserver.runtime.host_policy import HostPolicyError, check_setting
from pyserver.runtime.settings import LogSettings, TraceSettings
from pyserver.runtime.shared_memory import SharedMemoryManager
from pyserver.runtime.tracing import Tracer
from pyserver.server.response_cache import ServerResponseCache, cache_usable, submit_cached
from pyserver.server.response_stream import ResponseStream, ResponseWindow, end_stream

log = logging.getLogger("pyserver")

# What this build serves; the list grows as features land (Triton's full list
# adds sequence).
EXTENSIONS = ["classification", "sequence", "model_repository", "model_repository(unload_dependents)",
              "schedule_policy", "model_configuration", "system_shared_memory",
              "cuda_shared_memory", "binary_tensor_data", "parameters", "statistics", "trace",
              "logging"]

# Triton's answers to a settings update over the network that names a file.
NETWORK_LOG_FILE = "log file location can not be updated through network protocol"
NETWORK_TRACE_FILE = "trace file location can not be updated through network protocol"


class Server:
    """An inference server over one or more Triton model repositories.

    Use inside a running asyncio loop: ``await server.start()`` loads the
    models, ``await server.stop()`` drains and stops them.
    """

    def __init__(self, model_repository, *, server_id: str = "triton",
                 exit_on_error: bool = True, strict_readiness: bool = True,
                 model_load_thread_count: int = 4, model_load_retry_count: int = 0,
                 model_control_mode: str = "none",
                 load_models: list[str] | None = None, allow_client_shm: bool = False,
                 auto_complete_config: bool = True, default_max_batch_size: int = 4,
                 summary_latencies: bool = False, repository_poll_secs: float = 15,
                 model_config_name: str = "",
                 pinned_memory_pool_byte_size: int = DEFAULT_PINNED_POOL_BYTES,
                 cuda_memory_pool_byte_size: dict[int, int] | None = None,
                 rate_limit: str = "off", rate_limit_resources=(),
                 response_cache_byte_size: int = 0, histogram_latencies: bool = False,
                 backend_directory: str = DEFAULT_BACKEND_DIRECTORY,
                 backend_config: dict[str, dict[str, str]] | None = None,
                 host_policies: dict[str, dict[str, str]] | None = None):
        self.repositories = [model_repository] if isinstance(model_repository, (str, bytes)) \
            or hasattr(model_repository, "__fspath__") else list(model_repository)
        self.repositories = [str(r) for r in self.repositories]
        self.server_id = server_id
        self.exit_on_error = exit_on_error
        self.strict_readiness = strict_readiness
        self.model_load_thread_count = model_load_thread_count
        self.model_load_retry_count = model_load_retry_count  # more tries for a failed load
        self.model_control_mode = model_control_mode
        self.load_models = load_models or []
        self.repository_poll_secs = repository_poll_secs
        self.load_options = repository.LoadOptions(auto_complete_config, default_max_batch_size,
                                                   summary_latencies, model_config_name,
                                                   histogram_latencies, backend_directory,
                                                   backend_config or {})
        self.log_settings_store = LogSettings()
        self.trace_settings_store = TraceSettings()
        self.tracer = Tracer(self.trace_settings_store)
        self.tracer.on_change = self._apply_tracing  # a program's trace turns tracing on
        self.shared_memory = SharedMemoryManager(allow_client_shm)
        self.host_memory = HostMemory(pinned_memory_pool_byte_size)  # GPU staging buffers
        # Per-GPU pools ({device: bytes}, 64 MiB for others), created on first use
        self.device_memory = DeviceMemory(cuda_memory_pool_byte_size)
        # --rate-limit=execution_count: instances with rate_limiter resources
        # hold them while they execute; (name, device, count) entries from
        # --rate-limit-resource (parse_rate_limit_resources)
        if rate_limit not in ("off", "execution_count"):
            raise invalid_arg(f"unsupported rate limit mode '{rate_limit}', expected off or "
                              "execution_count")
        self.rate_limiter = RateLimiter(list(rate_limit_resources)) \
            if rate_limit == "execution_count" else None
        # --cache-config local,size=N: shared by models with response_cache.enable
        self.response_cache = ServerResponseCache(response_cache_byte_size) \
            if response_cache_byte_size > 0 else None
        self.custom_metrics = CustomMetrics()  # pb_utils.MetricFamily, shown on /metrics
        # --host-policy: {policy name: {setting: value}} (runtime/host_policy.py)
        self.host_policies = {name: dict(settings)
                              for name, settings in (host_policies or {}).items()}
        for settings in self.host_policies.values():
            for setting, value in settings.items():
                try:
                    check_setting(setting, value)
                except HostPolicyError as err:  # Triton refuses an unknown setting as unsupported
                    raise ServerError(Code.INVALID_ARG if setting in HOST_POLICY_SETTINGS
                                      else Code.UNSUPPORTED, str(err)) from None
        self.models: ModelManager | None = None
        self.context: ServerContext | None = None  # built by start()
        self._completions: CompletionQueue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._live = False
        # requests in flight (count, cancel handles) and whether new ones are
        # taken: kept where the compiled admission updates them too
        self._ledger = Ledger()
        self._handles: dict = self._ledger.handles  # future -> (scheduler, request id)
        # True while the process still opens its endpoints: a client that
        # saw one of them ready may use any of them (set by the CLI).
        self.opening_frontends = False
        self._spin_scheduled = False
        # submit()'s common case compiled (engine/admission.pyx); the
        # frontends call ``submitter`` per request, with no Python frame
        self._admission = Admission(self._ledger, self._submit_general, self._submit_resolved,
                                    self._served_from_cache, self._maybe_spin, self.tracer)
        self.submitter = self._admission.submit
        # a plain request's model (its Route, which may run the request as it
        # is read), which the frontends hand back to ``submitter``
        self.route = self._admission.route
        # the compiled readers call these as C calls, and its enqueue_plain
        # (a plain record read straight into its queue entry, engine/types.pyx
        # PlainPending, where its Route has records): http_route.pyx
        # RouteFrontend, grpc_codec.pyx InferHandler
        self.admission = self._admission
        # answering what the completion queue carries (a batch that ran, or a
        # request the engine failed), compiled (engine/settle.pyx); failures
        # come back to _fail. resolve_now also answers a batch the loop ran
        # itself (the context's answer), then sets the drained event if that
        # was the last request. A request a backend answers after its batch
        # (ANSWERED_LATER) stays in flight until answer_late.
        self._answers = Answers(self._ledger, Reschedule, ANSWERED_LATER, self._requeue,
                                self.tracer, self._fail)
        self.resolve_now = self._answers.answer_now

    # -- lifecycle -----------------------------------------------------------

    async def start(self):
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()  # where a ResponseWindow never waits
        self._completions = CompletionQueue()
        self._loop.add_reader(self._completions.fd, self._on_completions)
        # What every model, instance and backend is handed: no part of the
        # server looks it up.
        self.context = ServerContext(
            self._completions, loop=self._loop, answer=self.resolve_now,
            answer_late=self.answer_late, tracer=self.tracer,
            rate_limiter=self.rate_limiter, host_memory=self.host_memory,
            device_memory=self.device_memory, custom_metrics=self.custom_metrics, requests=self,
            host_policies=self.host_policies)
        self.models = ModelManager(self.repositories, self.context,
                                   self.model_load_thread_count, self.model_control_mode,
                                   self.load_options, self.model_load_retry_count)
        self._admission.bind(self.models, self._loop)
        self._live = True
        errors = await self.models.start(self.load_models)
        if errors and self.exit_on_error:
            await self.stop()
            details = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
            raise ServerError(Code.INTERNAL, f"failed to load all models ({details})")
        if self.model_control_mode == "poll":
            self.models.start_polling(self.repository_poll_secs)

    def begin_shutdown(self):
        """Stops accepting requests (readiness goes false at once); requests
        already accepted still complete."""
        self._ledger.stopping = True

    async def drain(self, timeout_s: float) -> bool:
        """Waits up to timeout_s for in-flight requests; True if none is left."""
        if self._ledger.inflight == 0:
            return True
        drained = self._ledger.drained = asyncio.Event()
        try:
            await asyncio.wait_for(drained.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def drain_or_abandon(self, timeout_s: float) -> tuple[bool, int]:
        """The exit timeout: waits up to ``timeout_s`` for the requests in
        flight; past it fails what is left (abandon_inflight). Returns
        (drained, how many were failed)."""
        if await self.drain(timeout_s):
            return True, 0
        return False, self.abandon_inflight(
            f"the server is shutting down: its exit timeout ({timeout_s:g} s) "
            "passed before this request completed")

    def abandon_inflight(self, message: str) -> int:
        """Fails every request still in flight with UNAVAILABLE ``message``
        (the exit timeout passed): queued ones leave their queue, running
        ones are answered now and what their model returns later is dropped.
        Returns how many were failed."""
        error = ServerError(Code.UNAVAILABLE, message)
        failed = 0
        for future, (scheduler, request_id) in list(self._handles.items()):
            scheduler.cancel(request_id)
            if not future.done():
                future.set_exception(error)
                failed += 1
        return failed

    async def stop(self, deadline: float | None = None):
        """Stops the models and frees what the server holds. With a
        ``deadline`` (time.monotonic()), models stop at once (ModelVersion.stop)."""
        if self._live is False and self.models is None:
            return
        self._ledger.stopping = True
        self._live = False
        if self.models is not None:
            models, self.models = self.models, None
            await models.stop_polling()
            await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(models.stop_all, deadline))
        if self.rate_limiter is not None:
            self.rate_limiter.stop()  # an instance thread still waiting gives up its batch
        if self._completions is not None:
            self._on_completions()  # resolve what the schedulers failed on stop
            self._loop.remove_reader(self._completions.fd)
            self._completions = None
        self.tracer.flush()
        close = getattr(self.shared_memory, "close", None)
        if close is not None:
            close()  # unmaps every registered region

    # -- completion path (event loop) -----------------------------------------

    def _on_completions(self):
        answer = self._answers.answer_now  # (and the drained event after the last)
        for obj, code, message in self._completions.drain():
            answer(obj, code, message)

    def _requeue(self, p, mv) -> None:
        """Queues a request its model rescheduled (an iterative sequence)
        again: it stays in flight, and cancel() finds it in the queue."""
        future = p.future
        error = None
        if not future.done():  # else it was cancelled while it ran: it is over
            try:
                request_id = mv.requeue(p)
            except ServerError as err:  # the model is stopping
                error = err
            else:
                self._ledger.inflight += 1
                self._handles[future] = (mv.scheduler, request_id)
                if mv.loop_drivers:
                    mv.dispatch()
                return
        del self._handles[future]
        mv.end_sequence_of(p)
        if p.trace is not None:
            self.tracer.finish(p.trace, now_ns())
        if error is not None:
            future.set_exception(error)

    def _fail(self, obj, code: int, message) -> None:
        """Fails every request of a batch that failed (or the one request
        the engine failed) with ``code`` and ``message``."""
        error = ServerError(code, message)
        requests = obj.requests if type(obj) is Batch else (obj,)
        self._ledger.inflight -= len(requests)
        handles = self._handles
        for p in requests:
            future = p.future
            handles.pop(future, None)
            if p.trace is not None:
                self.tracer.finish(p.trace, now_ns())
            if not future.done():
                future.set_exception(error)

    def answer_late(self, p, response) -> None:
        """From any thread: the response (or the exception that fails it) of
        a request its backend answers after its batch (ANSWERED_LATER)."""
        self._loop.call_soon_threadsafe(self._answers.answer_late, p, response)

    @property
    def inflight(self) -> int:
        """Requests accepted and not yet answered, over every model."""
        return self._ledger.inflight

    def _spin_for_completion(self, mv: ModelVersion):
        # Runs after the callbacks already ready in this loop iteration, so it
        # only spins when this is still the one request in flight: then the
        # loop has nothing else to do, and rather than sleep in epoll and pay
        # a thread wake-up (~40 µs) for the completion it spins for it, GIL
        # released. Under load in-flight > 1 and this returns at once.
        # A model whose completions do not come within the spin stops
        # being spun for (mv.completion_spin).
        self._spin_scheduled = False
        if self._ledger.inflight == 1 and self._completions is not None and mv.low_load_spin_s \
                and mv.completion_spin.wait(self._completions, mv.low_load_spin_s):
            self._on_completions()

    # -- health and metadata ---------------------------------------------------

    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        if not self._live or self._ledger.stopping or self.models is None or self.opening_frontends:
            return False
        if not self.strict_readiness:
            return True
        return self.models.all_ready() and all(mv.healthy() for mv in self.models.loaded())

    def metadata(self) -> dict:
        return {"name": self.server_id, "version": __version__, "extensions": EXTENSIONS}

    def _resolve(self, name: str, version: str) -> ModelVersion:
        if self.models is None:
            raise not_running()
        return self.models.resolve(name, version or "")

    def loaded_versions(self) -> list[ModelVersion]:
        """Every model version currently loaded (for metrics and statistics)."""
        return self.models.loaded() if self.models is not None else []

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            mv = self._resolve(name, version)
        except ServerError:
            return False
        return not self._ledger.stopping and self._serviceable(mv)

    def _serviceable(self, mv: ModelVersion) -> bool:
        """Healthy, and for an ensemble every step's model loaded: one whose
        step was unloaded is not ready until it is back, as in Triton."""
        if not mv.healthy():
            return False
        return self.models.steps_loaded(mv)

    def model_ready_check(self, name: str, version: str = ""):
        """What the model-ready endpoints answer: model_ready, and then, for
        a Python model that defines ``is_ready()``, what that says on each
        instance (as Triton's Python backend asks it on every such request,
        within 5 s). A bool, or an awaitable of one when the model's own
        check has to run (off the event loop: it waits on the model)."""
        try:
            mv = self._resolve(name, version)
        except ServerError:
            return False
        if self._ledger.stopping or not self._serviceable(mv):
            return False
        checks = [i.backend.is_ready for i in mv.instances
                  if Capability.READINESS in i.capabilities]
        if not checks:
            return True
        loop = self._loop

        async def ask_the_model() -> bool:
            answers = await asyncio.gather(*(loop.run_in_executor(None, c) for c in checks))
            return all(answers)

        return ask_the_model()

    def model_metadata(self, name: str, version: str = "") -> dict:
        mv = self._resolve(name, version)
        versions = [str(v) for v in sorted(self.models.versions[name])]
        return mv.metadata(versions if not version else [mv.version_str])

    def model_config(self, name: str, version: str = "") -> dict:
        mv = self._resolve(name, version)
        config = mv.config_json()
        if mv.ensemble is not None:
            # As Triton marks it: decoupled when a step model is (looked up
            # now, since the steps load and reload on their own)
            try:
                decoupled = bool(decoupled_steps(self, mv))
            except ServerError:  # its steps cannot run together: requests say why
                decoupled = False
            policy = config.get("model_transaction_policy") or {}
            if bool(policy.get("decoupled")) != decoupled:
                config = {**config, "model_transaction_policy": {**policy, "decoupled": decoupled}}
        return config

    # -- statistics ------------------------------------------------------------

    def model_statistics(self, name: str, version: str = "") -> dict:
        """One version's counters, flat, with our extras (pending count,
        failure reasons): for tests and tools."""
        mv = self._resolve(name, version)
        stats = mv.stats.snapshot()
        stats.update({"name": mv.name, "version": mv.version_str})
        return stats

    def statistics(self, name: str = "", version: str = "") -> dict:
        """Triton's statistics extension: {"model_stats": [...]} for one
        model (all its loaded versions, or one) or, with no name, all."""
        if not name:
            versions = self.loaded_versions()
        else:
            # Triton core's answers here: INVALID_ARG (HTTP 400), not the
            # NOT_FOUND of the other model endpoints.
            if self.models is None:
                raise not_running()
            if not self.models.versions.get(name):
                raise invalid_arg(f"requested model '{name}' is not available")
            if version:
                try:
                    versions = [self._resolve(name, version)]
                except ServerError as err:
                    if err.code != Code.NOT_FOUND:
                        raise  # not a version number
                    raise invalid_arg("requested model version is not available for model "
                                      f"'{name}'") from None
            else:
                versions = [mv for _, mv in sorted(self.models.versions[name].items())]
        out = []
        for mv in versions:
            s = mv.stats.snapshot()
            out.append({
                "name": mv.name,
                "version": mv.version_str,
                "last_inference": s["last_inference"],
                "inference_count": s["inference_count"],
                "execution_count": s["execution_count"],
                "inference_stats": s["inference_stats"],
                "response_stats": s["response_stats"],
                "batch_stats": s["batch_stats"],
                "memory_usage": mv.memory_usage(),
            })
        return {"model_stats": out}

    # -- repository ------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict]:
        if self.models is None:
            raise not_running()
        return self.models.index(ready_only)

    def model_folder(self, name: str):
        """The local folder model ``name`` loads from (for an object-storage
        repository, its copy), None where no repository holds it."""
        return None if self.models is None else self.models.model_folder(name)

    def _check_explicit(self):
        if self.model_control_mode != "explicit":
            raise ServerError(Code.UNAVAILABLE,
                              "explicit model load / unload is not allowed if polling is enabled")

    async def load_model(self, name: str, config: str | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        self._check_explicit()
        await self.models.load_requested(name, config=config, files=files)
        self._apply_tracing()

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """unload_dependents: an ensemble's composing models go too."""
        self._check_explicit()
        composing = self.models.composing_models(name) if unload_dependents else set()
        await self.models.unload(name)
        for dep in sorted(composing):
            await self.models.unload(dep)

    async def poll_repository(self) -> dict[str, str]:
        """One poll of the repositories now (poll mode): what changed loads,
        reloads or unloads. Returns the models that failed, with why."""
        if self.model_control_mode != "poll":
            raise ServerError(Code.UNAVAILABLE, "polling is disabled")
        return await self.models.poll()

    def register_repository(self, path: str) -> None:
        """Adds a repository to those the server serves from (explicit mode;
        its models load when asked for)."""
        if self.model_control_mode != "explicit":
            raise ServerError(Code.UNSUPPORTED, "repository registration is not allowed if model "
                              "control mode is not EXPLICIT")
        path = str(path)
        # a folder, or a bucket in object storage (asked now: a short block of the loop)
        if not self.models.repository_found(path):
            raise ServerError(Code.INVALID_ARG,
                              f"failed to register '{path}', repository not found")
        if path in self.repositories:
            raise ServerError(Code.ALREADY_EXISTS,
                              f"model repository '{path}' has already been registered")
        self.repositories.append(path)  # the manager scans this same list

    def unregister_repository(self, path: str) -> None:
        if self.model_control_mode != "explicit":
            raise ServerError(Code.UNSUPPORTED, "repository unregistration is not allowed if "
                              "model control mode is not EXPLICIT")
        path = str(path)
        if path not in self.repositories:
            raise ServerError(Code.INVALID_ARG,
                              f"failed to unregister '{path}', repository not found")
        self.repositories.remove(path)
        self.models.forget_repository(path)

    # -- settings --------------------------------------------------------------

    def log_settings(self, update: dict | None = None, *, network: bool = False) -> dict:
        """The logging settings, after ``update``. ``network``: the update
        came over HTTP or gRPC, which may not name the log file (a client
        could create or append to any file the server can write); the
        command line and the in-process API may."""
        if update:
            if network and "log_file" in update:
                raise ServerError(Code.UNSUPPORTED, NETWORK_LOG_FILE)
            self.log_settings_store.update(update)
        return self.log_settings_store.as_dict()

    def trace_settings(self, model_name: str | None = None, update: dict | None = None, *,
                       network: bool = False) -> dict:
        """The trace settings (of ``model_name``, or global), after
        ``update``; ``network`` as for log_settings, for the trace file."""
        if model_name and not self.model_ready(model_name):  # Triton's answer and text
            raise invalid_arg(f"Request for unknown model : {model_name}")
        if update and network and "trace_file" in update:
            raise ServerError(Code.UNSUPPORTED, NETWORK_TRACE_FILE)
        if update:
            self.trace_settings_store.update(model_name, update)
            self.tracer.flush()  # traces taken under the old settings
            self._apply_tracing()
        return self.trace_settings_store.as_dict(model_name)

    def _apply_tracing(self):
        versions = self.loaded_versions()
        self.tracer.refresh({mv.name for mv in versions})
        for mv in versions:
            mv.tracing = self.tracer.active

    # -- inference -------------------------------------------------------------

    def submit(self, request: InferRequest, future=None) -> asyncio.Future:
        """Queues a request; the future resolves to its InferResponse or fails
        with a ServerError. Validation errors raise here, synchronously.
        ``future``: the one to resolve (an ImmediateFuture, whose callback
        runs as the batch completes) when the request goes to a model's queue;
        an ensemble or a cached model gives its own, which is returned. A
        decoupled model's 0..N responses need submit_stream: DecoupledModelError.
        The common case runs compiled (engine/admission.pyx), the rest here."""
        return self._admission.submit(request, future)

    def _submit_general(self, request: InferRequest, future):
        return self._submit_resolved(self._admit(request), request, future)

    def _submit_resolved(self, mv: ModelVersion, request: InferRequest, future):
        """submit() once the request is admitted to ``mv``."""
        if mv.decoupled or self._decoupled(mv):  # (an ensemble's config may say so too)
            raise DecoupledModelError()
        return self._dispatch(mv, request, future)

    def _dispatch(self, mv: ModelVersion, request: InferRequest, future):
        """Runs an admitted request to a model that answers it once: through
        the response cache, an ensemble's steps or the model's queue."""
        if mv.ensemble is not None:
            if self._served_from_cache(mv):
                # a hit skips the composing models; a miss runs them
                return submit_cached(self, mv, request, self.response_cache, lambda validated:
                                     self._loop.create_task(run_ensemble(
                                         self, mv, request, self._trace_ensemble(mv, request))))
            mv.validate(request)
            return self._loop.create_task(run_ensemble(self, mv, request,
                                                       self._trace_ensemble(mv, request)))
        if self._served_from_cache(mv):
            return submit_cached(self, mv, request, self.response_cache)
        return self._enqueue(mv, request, None, future)

    def _trace_ensemble(self, mv: ModelVersion, request: InferRequest):
        """An ensemble request's trace record (its steps' parent), or None."""
        if not self.tracer.active:
            return None
        trace = self.tracer.start(mv.name, mv.version, now_ns(), request)
        if trace is not None:
            self.tracer.queued(trace, now_ns())
        return trace

    def _admit(self, request: InferRequest) -> ModelVersion:
        """The model version a new request goes to, once the server takes
        requests and its parameters leave Triton's keys alone."""
        if self._ledger.stopping:
            raise ServerError(Code.UNAVAILABLE, "Server is stopping and does not accept new requests")
        for key in request.parameters:
            if key.startswith("triton_"):
                raise invalid_arg(f"parameter keys starting with 'triton_' are reserved for "
                                  f"Triton usage and should not be specified: '{key}'")
        return self._resolve(request.model_name, request.model_version)

    def _served_from_cache(self, mv) -> bool:
        """Whether requests to ``mv`` go through the response cache."""
        return self.response_cache is not None and self._uses_cache(mv)

    def _uses_cache(self, mv) -> bool:
        uses = mv.__dict__.get("_uses_response_cache")
        if uses is None:  # decided once per loaded version
            uses = mv._uses_response_cache = cache_usable(mv, self.response_cache,
                                                          self._composing_versions(mv))
        return uses

    def _composing_versions(self, mv) -> list:
        """The model versions an ensemble's steps run on (loaded ones)."""
        if mv.ensemble is None:
            return []
        return [v for v in step_versions(self, mv.ensemble) if v is not None]

    def _enqueue(self, mv: ModelVersion, request: InferRequest,
                 validated: tuple | None = None, future=None) -> asyncio.Future:
        if future is None:
            future = self._loop.create_future()
        if self.tracer.active:
            trace = self.tracer.start(mv.name, mv.version, now_ns(), request)
            try:
                pending = mv.submit(request, future, trace, validated)
            except BaseException:  # refused (invalid, queue full): its trace ends unwritten
                if trace is not None:
                    self.tracer.discard(trace)
                raise
            if trace is not None and mv.decoupled:  # (its future is a ResponseStream)
                tracer = self.tracer
                tracer.end_in_two_parts(trace)
                future.on_final = lambda: tracer.finish(trace, now_ns())
        else:
            pending = mv.submit(request, future, None, validated)
        self._handles[future] = (mv.scheduler, pending.id)
        self._ledger.inflight += 1
        if mv.loop_drivers and not mv.scheduler.wait_holds:  # else its batch_timer asks
            mv.dispatch()
        if self._ledger.inflight == 1:
            self._maybe_spin(mv)
        return future

    def _maybe_spin(self, mv: ModelVersion) -> None:
        """A request to ``mv`` is the only one in flight: spin for its
        completion at the end of this loop iteration (_spin_for_completion)
        where ``mv`` allows it."""
        if not self._spin_scheduled and mv.low_load_spin_s:
            self._spin_scheduled = True
            self._loop.call_soon(self._spin_for_completion, mv)

    def submit_stream(self, request: InferRequest, on_response,
                      response_window: int = 0) -> ResponseStream:
        """Queues a request to any model, its responses arriving as
        ``on_response(response, error, final)`` calls on the event loop: 0..N
        responses then a final call (whose response may be None) for a
        decoupled model, one final response (or error) for any other, which
        takes the same path as through submit (cache, ensemble, queue). The
        request is admitted once either way; validation errors raise here.
        The returned stream cancels with ``Server.cancel``.
        ``response_window`` > 0: at most that many responses on their way
        at once (ResponseWindow; the consumer gives each back when written)."""
        mv = self._admit(request)
        window = ResponseWindow(response_window, self._loop_thread) if response_window > 0 \
            else None
        stream = ResponseStream(self._loop, on_response, window)
        if mv.first_response_by_stream:
            stream.first_response = (mv.stats, now_ns())
        decoupled = self._decoupled(mv)
        if decoupled and mv.ensemble is not None:
            mv.validate(request)
            self._loop.create_task(run_ensemble_stream(self, mv, request, stream, decoupled,
                                                       self._trace_ensemble(mv, request)))
            return stream
        if decoupled:  # its responses go into the stream as the model sends them
            self._enqueue(mv, request, None, stream)
            return stream
        answered = self._dispatch(mv, request, stream)
        if answered is not stream:  # an ensemble's task or the cache's future
            answered.add_done_callback(functools.partial(end_stream, stream))
        return stream

    def is_decoupled(self, name: str, version: str = "") -> bool:
        return bool(self._decoupled(self._resolve(name, version)))

    def _decoupled(self, mv: ModelVersion):
        """Whether ``mv`` answers 0..N times: a decoupled model, or an
        ensemble with decoupled steps (then those steps, looked up now:
        the steps load and reload on their own)."""
        if mv.ensemble is not None:
            return decoupled_steps(self, mv)
        return mv.decoupled

    def cancel(self, future) -> None:
        """Cancels a submitted request: if it is still queued it leaves the
        queue and its future fails with CANCELLED; if it already runs, the
        future is cancelled and its result dropped."""
        handle = self._handles.get(future)
        if handle is not None and handle[0].cancel(handle[1]):
            return  # the completion path fails the future as CANCELLED
        future.cancel()

    def cancel_stream(self, stream: ResponseStream) -> None:
        """Cancels a submit_stream request but keeps delivering what it
        still sends, up to its final response (BLS iterators): a queued
        request ends at once with CANCELLED, a running one sees
        is_cancelled()."""
        handle = self._handles.get(stream)
        if handle is not None and handle[0].cancel(handle[1]):
            return
        stream.cancel(drop=False)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.submit(request)
