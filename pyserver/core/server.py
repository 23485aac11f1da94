"""Server: the protocol-neutral core every frontend talks to.

It owns the loaded models and the engine's completion queue (watched by the
event loop: one wake-up per batch at most), routes requests to model versions
and exposes health, metadata and infer to the frontends.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from pyserver import __version__
from pyserver.core import repository
from pyserver.core.errors import Code, ServerError, not_found
from pyserver.core.model import ModelVersion
from pyserver.core.types import InferRequest, InferResponse
from pyserver.engine import Batch, CompletionQueue

log = logging.getLogger("pyserver")

EXTENSIONS = ["classification", "sequence", "model_repository", "model_repository(unload_dependents)",
              "schedule_policy", "model_configuration", "system_shared_memory",
              "cuda_shared_memory", "binary_tensor_data", "parameters", "statistics", "trace",
              "logging"]
# What this build serves today; the list grows as the features land.
SUPPORTED_EXTENSIONS = ["model_configuration", "binary_tensor_data", "parameters",
                        "schedule_policy"]


class Server:
    """An inference server over one or more Triton model repositories.

    Use inside a running asyncio loop: ``await server.start()`` loads the
    models (and starts the frontends it was given), ``await server.stop()``.
    """

    def __init__(self, model_repository, *, server_id: str = "triton",
                 exit_on_error: bool = True, strict_readiness: bool = True,
                 model_load_thread_count: int = 4):
        self.repositories = [model_repository] if isinstance(model_repository, str) \
            else list(model_repository)
        self.server_id = server_id
        self.exit_on_error = exit_on_error
        self.strict_readiness = strict_readiness
        self.model_load_thread_count = model_load_thread_count
        self._models: dict[str, dict[int, ModelVersion]] = {}
        self._load_errors: dict[str, str] = {}
        self._completions: CompletionQueue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._live = False
        self._stopping = False
        self._inflight = 0
        self._spin_scheduled = False

    # -- lifecycle -----------------------------------------------------------

    async def start(self):
        self._loop = asyncio.get_running_loop()
        self._completions = CompletionQueue()
        self._loop.add_reader(self._completions.fd, self._on_completions)
        self._live = True
        models, errors = repository.scan(self.repositories)
        self._load_errors.update(errors)
        completions = self._completions

        def load(entry):
            try:
                return entry.name, repository.load_model(entry, completions), None
            except ServerError as err:
                return entry.name, None, err.message
            except Exception as err:  # a broken model never takes the server down
                log.exception("loading model '%s' failed", entry.name)
                return entry.name, None, f"{type(err).__name__}: {err}"

        with ThreadPoolExecutor(max(1, self.model_load_thread_count)) as pool:
            results = await asyncio.gather(*(self._loop.run_in_executor(pool, load, m)
                                             for m in models.values()))
        for name, versions, error in results:
            if error is not None:
                self._load_errors[name] = error
                log.error("failed to load '%s': %s", name, error)
                continue
            self._models[name] = {}
            for mv in versions:
                self._models[name][mv.version] = mv
                mv.start()
                log.info("successfully loaded '%s' version %d", name, mv.version)
        if self._load_errors and self.exit_on_error:
            await self.stop()
            details = "; ".join(f"{n}: {e}" for n, e in sorted(self._load_errors.items()))
            raise ServerError(Code.INTERNAL, f"failed to load all models ({details})")

    async def stop(self):
        if self._stopping:
            return
        self._stopping = True
        self._live = False
        versions = [mv for vs in self._models.values() for mv in vs.values()]
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: [mv.stop() for mv in versions])
        if self._completions is not None:
            self._on_completions()  # resolve what Stop() failed
            self._loop.remove_reader(self._completions.fd)
        self._models.clear()

    def loaded_versions(self) -> list[ModelVersion]:
        """Every model version currently loaded (for metrics and statistics)."""
        return [mv for name in sorted(self._models)
                for _, mv in sorted(self._models[name].items())]

    def model_states(self) -> list[dict]:
        """Repository index rows: name, version, state, reason."""
        rows = []
        for name in sorted(set(self._models) | set(self._load_errors)):
            if name in self._load_errors:
                rows.append({"name": name, "version": "", "state": "UNAVAILABLE",
                             "reason": self._load_errors[name]})
            for version in sorted(self._models.get(name, {})):
                rows.append({"name": name, "version": str(version), "state": "READY",
                             "reason": ""})
        return rows

    # -- completion path (event loop) -----------------------------------------

    def _on_completions(self):
        for obj, code, message in self._completions.drain():
            if code == 0:
                self._inflight -= len(obj.requests)
                for p in obj.requests:
                    future = p.future
                    if not future.done():
                        future.set_result(p.response)
                continue
            error = ServerError(code, message)
            requests = obj.requests if type(obj) is Batch else (obj,)
            self._inflight -= len(requests)
            for p in requests:
                future = p.future
                if not future.done():
                    future.set_exception(error)

    # -- protocol-neutral API used by the frontends ---------------------------

    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        if not self._live or self._stopping:
            return False
        return not (self.strict_readiness and self._load_errors)

    def metadata(self) -> dict:
        return {"name": self.server_id, "version": __version__, "extensions": SUPPORTED_EXTENSIONS}

    def _resolve(self, name: str, version: str) -> ModelVersion:
        versions = self._models.get(name)
        if versions is None:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if version == "" or version is None:
            if not versions:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            return versions[max(versions)]
        try:
            number = int(version)
        except ValueError:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found") from None
        mv = versions.get(number)
        if mv is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found")
        return mv

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            self._resolve(name, version)
        except ServerError:
            return False
        return not self._stopping

    def model_metadata(self, name: str, version: str = "") -> dict:
        mv = self._resolve(name, version)
        versions = [str(v) for v in sorted(self._models[name])]
        return mv.metadata(versions)

    def model_config(self, name: str, version: str = "") -> dict:
        return self._resolve(name, version).config_json()

    def model_statistics(self, name: str, version: str = "") -> dict:
        mv = self._resolve(name, version)
        stats = mv.stats.snapshot()
        stats.update({"name": mv.name, "version": mv.version_str})
        return stats

    def submit(self, request: InferRequest) -> asyncio.Future:
        """Queues a request; the future resolves to its InferResponse or fails
        with a ServerError. Validation errors raise here, synchronously."""
        if self._stopping:
            raise ServerError(Code.UNAVAILABLE, "Server is stopping")
        mv = self._resolve(request.model_name, request.model_version)
        future = self._loop.create_future()
        mv.submit(request, future)
        self._inflight += 1
        if self._inflight == 1 and not self._spin_scheduled:
            self._spin_scheduled = True
            self._loop.call_soon(self._spin_for_completion, mv.low_load_spin_s)
        return future

    def _spin_for_completion(self, budget_s: float):
        # Runs after the callbacks already ready in this loop iteration, so it
        # only spins when this is still the one request in flight: then the
        # loop has nothing else to do, and rather than sleep in epoll and pay
        # a thread wake-up (~40 µs) for the completion it spins for it, GIL
        # released. Under load in-flight > 1 and this returns at once.
        self._spin_scheduled = False
        if self._inflight == 1 and self._completions.spin_wait(budget_s):
            self._on_completions()

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.submit(request)
