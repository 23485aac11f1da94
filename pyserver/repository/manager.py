"""ModelManager: which model versions are loaded, loading and unloading them
(in parallel, off the event loop), their states for the repository index,
and resolving a (name, version) of a request to a loaded version.

A reload builds the new versions first and swaps them in only when they are
ready, so the old ones keep serving until then; a failed reload leaves the
old versions serving and READY.

Control modes, as Triton's: "none" loads every model at startup, "explicit"
loads what --load-model names and then what the repository API asks for,
"poll" loads every model at startup and then polls the repositories every
--repository-poll-secs: a new model folder loads, a removed one unloads, a
model whose files changed (config, version folders, labels, ...) reloads.
Unlike Triton, a model whose load failed is retried only once its files
change again, not on every poll.

A repository in object storage (s3://, gs://, as://) is its local copy
(remote.RemoteRepository): synced before the startup loads, before every
poll, and before an explicit load of a model (that model's objects only),
so each sees the bucket as it is then; what did not change is not fetched
again, and the folder checks below then see only what did.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from google.protobuf import json_format

from pyserver._proto import ModelConfig
from pyserver.config import decoupled_cache_error
from pyserver.kernel.context import ServerContext
from pyserver.kernel.errors import Code, ServerError, VersionLoadError, invalid_arg, not_found
from pyserver.model.version import ModelVersion
from pyserver.repository import loader as repository
from pyserver.repository import remote

log = logging.getLogger("pyserver")

CONTROL_MODES = ("none", "explicit", "poll")


class LoadRefused(ServerError):
    """A load request refused before anything was tried: a name no
    repository holds, a config override that does not parse, override files
    that would leave the model's folder. It leaves no state (the model is
    not in the index, the server stays ready), as a typo does in Triton."""


class ModelManager:
    def __init__(self, repositories: list[str], context: ServerContext,
                 load_thread_count: int = 4, control_mode: str = "none",
                 load_options: repository.LoadOptions | None = None, load_retry_count: int = 0):
        if control_mode not in CONTROL_MODES:
            raise ServerError(Code.INVALID_ARG,
                              f"unsupported --model-control-mode '{control_mode}' "
                              f"(supported here: {', '.join(CONTROL_MODES)})")
        self.repositories = repositories
        self.context = context  # the server's services, handed to every model loaded
        self.control_mode = control_mode
        self.load_options = load_options or repository.LoadOptions()
        # --model-load-retry-count: a load that fails is tried this many more times
        self.load_retry_count = max(0, load_retry_count)
        self._pool = ThreadPoolExecutor(max(1, load_thread_count), thread_name_prefix="model-load")
        self.versions: dict[str, dict[int, ModelVersion]] = {}
        # name -> (state, reason) for models that are not READY
        self.states: dict[str, tuple[str, str]] = {}
        # name -> the versions an unload took down (the index lists each,
        # while the model stays unloaded)
        self._unloaded_versions: dict[str, list[int]] = {}
        # name -> (version, reason) of a load that failed in that version
        # (Triton's index names it); it holds while the state keeps that reason
        self._failed_versions: dict[str, tuple[int, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._override_dirs: dict[str, str] = {}
        # name -> what the model folder looked like when it was last loaded
        # (poll mode compares it with the folder now).
        self._stamps: dict[str, tuple] = {}
        self._poll_task: asyncio.Task | None = None
        # object-storage repositories: URI -> its local copy; and the models
        # whose last sync left objects behind, with why
        self._remote: dict[str, remote.RemoteRepository] = {}
        self._sync_errors: dict[str, str] = {}
        self._loading = 0  # loads in progress
        self._reserved = 0  # models of the parallel loads in progress

    # -- queries ---------------------------------------------------------------

    def resolve(self, name: str, version: str) -> ModelVersion:
        versions = self.versions.get(name)
        if not versions:
            if name in self.states or name in self.versions:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if not version:
            if len(versions) == 1:
                for mv in versions.values():
                    return mv
            return versions[max(versions)]
        try:
            number = int(version)
        except ValueError:
            # Triton's text (std::stol's complaint included)
            raise invalid_arg(f"failed to get model version from specified version string "
                              f"'{version}' (details: stol), version should be an integral "
                              "value > 0") from None
        mv = versions.get(number)
        if mv is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found")
        return mv

    def steps_loaded(self, mv: ModelVersion) -> bool:
        """For an ensemble, whether every step's model version is loaded
        (True for other models). Triton unloads an ensemble whose step goes
        and loads it again when the step is back; an ensemble holds nothing
        of its own here, so it stays loaded and is reported so instead."""
        if mv.ensemble is None:
            return True
        for step in mv.ensemble.steps:
            try:
                self.resolve(step.model_name, step.model_version)
            except ServerError:
                return False
        return True

    def loaded(self) -> list[ModelVersion]:
        return [mv for name in sorted(self.versions) for _, mv in sorted(self.versions[name].items())]

    def failed(self) -> dict[str, str]:
        return {n: reason for n, (state, reason) in self.states.items()
                if state == "UNAVAILABLE" and reason != "unloaded"}

    def all_ready(self) -> bool:
        """Triton's strict readiness: every model that has a state is READY
        or was unloaded; a model loading for the first time (a poll found
        it) or one that failed keeps the server from being ready, a model
        being reloaded does not (its loaded versions keep serving)."""
        for name, (state, reason) in self.states.items():
            if state == "UNAVAILABLE" and reason == "unloaded":
                continue
            if state in ("LOADING", "UNLOADING") and self.versions.get(name):
                continue
            return False
        return True

    def index(self, ready_only: bool = False) -> list[dict]:
        """Repository index rows as Triton reports them: "reason" only when
        there is one (TRITONSERVER_ServerModelIndex)."""
        found, dup_errors = self._scan()
        names = sorted(set(found) | set(dup_errors) | set(self.versions) | set(self.states))
        rows = []
        for name in names:
            versions = self.versions.get(name)
            if versions:
                for v, mv in sorted(versions.items()):
                    if self.steps_loaded(mv):
                        rows.append({"name": name, "version": str(v), "state": "READY"})
                    elif not ready_only:  # what Triton's unload of it leaves
                        rows.append({"name": name, "version": str(v), "state": "UNAVAILABLE",
                                     "reason": "unloaded"})
                continue
            if ready_only:
                continue
            if name in dup_errors:
                rows.append({"name": name, "version": "", "state": "UNAVAILABLE",
                             "reason": dup_errors[name]})
            elif name in self.states:
                state, reason = self.states[name]
                if reason == "unloaded" and self._unloaded_versions.get(name):
                    # as Triton keeps them: each version that was unloaded
                    rows.extend({"name": name, "version": str(v), "state": state,
                                 "reason": reason} for v in self._unloaded_versions[name])
                    continue
                version, why = self._failed_versions.get(name, (None, None))
                row = {"name": name, "version": str(version) if why == reason else "",
                       "state": state}
                if reason:
                    row["reason"] = reason
                rows.append(row)
            else:
                rows.append({"name": name})  # in the repository, never loaded
        return rows

    # -- loading ---------------------------------------------------------------

    async def start(self, load_models: list[str]) -> dict[str, str]:
        """The startup loads of the control mode; returns {name: error}."""
        if load_models and self.control_mode != "explicit":
            raise invalid_arg("Error: Use of '--load-model' requires setting "
                              "'--model-control-mode=explicit' as well.")
        if self.control_mode == "explicit":  # what the index lists; nothing downloaded yet
            await self._sync_remote(None, list_only=True)
        else:
            return await self.load_all(None)
        if "*" in load_models:
            if len(load_models) > 1:
                raise invalid_arg("Wildcard model name '*' must be the ONLY startup model "
                                  "if specified at all.")
            return await self.load_all(None)
        return await self.load_all(list(load_models)) if load_models else {}

    async def load_requested(self, name: str, config: str | None = None,
                             files: dict[str, bytes] | None = None) -> None:
        """A load through the repository API: a model that fails to load
        answers as Triton's does (INVALID_ARG, "load failed for model ...")."""
        await self.load(name, config=config, files=files, requested=True)

    async def load_all(self, names: list[str] | None = None) -> dict[str, str]:
        """Loads the named models (all in the repositories when None), in
        parallel. Returns {name: error} for those that failed."""
        repo_errors = await self._sync_remote(names)
        found, dup_errors = self._scan()
        for name, reason in dup_errors.items():
            self.states[name] = ("UNAVAILABLE", reason)
        if names is None:
            names = sorted(found)
        stamps = {}
        if self.control_mode == "poll":  # failed loads are retried when their files change
            stamps = await asyncio.get_running_loop().run_in_executor(
                self._pool, _stamps_of, [found[n] for n in names if n in found])
        results = await self._load_many(names, found, stamps)
        errors = {**repo_errors, **dup_errors}
        for name, result in zip(names, results):
            if isinstance(result, ServerError):
                errors[name] = result.message
            elif isinstance(result, BaseException):
                errors[name] = f"{type(result).__name__}: {result}"
        return errors

    async def _load_many(self, names: list[str], found: dict,
                         stamps: dict[str, tuple] | None = None) -> list:
        """Loads models in parallel (on the load thread pool); the results
        or exceptions, in order. ``stamps``: what poll saw of each folder."""
        stamps = stamps or {}
        self._reserved += len(names)  # they all share the cores from the start
        try:
            return await asyncio.gather(
                *(self.load(n, found=found, stamp=stamps.get(n)) for n in names),
                return_exceptions=True)
        finally:
            self._reserved -= len(names)

    async def load(self, name: str, config: str | None = None, files: dict[str, bytes] | None = None,
                   found: dict | None = None, requested: bool = False,
                   stamp: tuple | None = None) -> None:
        """Loads (or reloads) a model; raises ServerError with the reason.

        As Triton's: reloading a model whose folder did not change since it
        loaded is a no-op (a config or file override always reloads), and
        on a reload the versions whose files did not change keep serving
        untouched when the config did not change either. ``stamp``: what a
        poll saw of the folder; it is kept even when the load fails, so a
        poll retries only once the files change again."""
        _check_name(name)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            serving = bool(self.versions.get(name))
            unreachable = {}
            if found is None and not files:  # an explicit load: the bucket as it is now
                unreachable = await self._sync_remote([name])
            try:
                entry, override = self._model_source(name, config, files, found, unreachable)
            except LoadRefused:
                raise  # no state (see LoadRefused)
            except ServerError as err:
                if not serving:
                    self.states[name] = ("UNAVAILABLE", err.message)
                raise
            if not files and name in self._sync_errors:  # its folder is not all there
                reason = self._sync_errors[name]
                log.error("failed to load '%s': %s", name, reason)
                if not serving:
                    self.states[name] = ("UNAVAILABLE", reason)
                if requested:
                    raise ServerError(Code.INVALID_ARG, f"load failed for model '{name}': {reason}")
                raise ServerError(Code.INTERNAL, reason)
            loop = asyncio.get_running_loop()
            from_folder = override is None
            if from_folder and stamp is None and serving:  # else taken as it loads
                stamp = await loop.run_in_executor(self._pool, _stamp, entry.path)
            old_stamp = self._stamps.get(name) if serving else None
            if from_folder and old_stamp is not None and old_stamp == stamp:
                log.info("'%s' is unchanged since it loaded: not reloaded", name)
                return
            unchanged = _unchanged_versions(old_stamp, stamp) \
                if from_folder and old_stamp is not None else set()
            self.states[name] = ("LOADING", "")
            self._unloaded_versions.pop(name, None)
            self._loading += 1
            # The models that will share the cores: those loaded and those loading.
            sharing = len(self.versions.keys() - {name}) + max(self._loading, self._reserved)
            keep = {v: mv for v, mv in self.versions.get(name, {}).items() if v in unchanged}
            job = self._pool.submit(_stamp_and_load, stamp if from_folder else (),
                                    self.load_retry_count, entry, self.context, override,
                                    self.load_options, sharing, keep)
            try:
                stamp, new = await asyncio.wrap_future(job)
            except asyncio.CancelledError:
                # The server is stopping while this loads: whatever the job
                # builds is stopped as soon as it is built.
                job.add_done_callback(functools.partial(_stop_new, keep))
                raise
            except Exception as err:  # a broken model never takes the server down
                if self.control_mode == "poll" and stamp is not None:
                    self._stamps[name] = stamp
                failed_version = None
                if isinstance(err, VersionLoadError):
                    # as Triton's core keeps and words it
                    failed_version = err.version
                    reason = self._public(err.state_reason)
                    log.error("failed to load '%s' version %d: %s", name, err.version, reason)
                    detail = f"version {err.version} is at UNAVAILABLE state: {reason};\n"
                    err = ServerError(err.code, self._public(err.message))
                elif isinstance(err, ServerError):
                    reason = detail = self._public(err.message)
                    log.error("failed to load '%s': %s", name, reason)
                    err = ServerError(err.code, reason)
                else:
                    reason = detail = self._public(f"{type(err).__name__}: {err}")
                    log.exception("failed to load '%s'", name)
                    err = ServerError(Code.INTERNAL, reason)
                if serving:  # the old versions keep serving, and stay READY
                    self.states.pop(name, None)
                    log.error("'%s' keeps serving its loaded version(s) %s", name,
                              ", ".join(map(str, sorted(self.versions[name]))))
                else:
                    self.states[name] = ("UNAVAILABLE", reason)
                    if failed_version is not None:
                        self._failed_versions[name] = (failed_version, reason)
                if requested:
                    err = ServerError(Code.INVALID_ARG, f"load failed for model '{name}': {detail}")
                raise err from None
            finally:
                self._loading -= 1
            if from_folder:
                self._stamps[name] = stamp
            elif not files:
                # A config override of the repository's folder: a plain load
                # of that folder, unchanged, keeps the override (Triton's)
                self._stamps[name] = await loop.run_in_executor(self._pool, _stamp, entry.path)
            else:  # files of the request's own: the next load from the folder replaces them
                self._stamps.pop(name, None)
            old = {v: mv for v, mv in self.versions.get(name, {}).items()
                   if all(mv is not kept for kept in new)}
            self.versions[name] = {mv.version: mv for mv in new}
            self.states.pop(name, None)
            for mv in new:
                if keep.get(mv.version) is mv:
                    continue  # kept serving, untouched
                mv.start()
                log.info("successfully loaded '%s' version %d", name, mv.version)
            if old:
                await loop.run_in_executor(None, lambda: [mv.stop() for mv in old.values()])
        await self._load_composing(name, new, requested)

    async def _load_composing(self, name: str, new: list, requested: bool) -> None:
        """Explicit mode: loading an ensemble loads the models its steps use
        (as Triton does); if one cannot load, neither can the ensemble. In
        every mode, a cached ensemble with a decoupled step does not load
        (Triton marks such an ensemble decoupled, which its cache refuses)."""
        plan = new[0].ensemble if new else None
        if plan is None:
            return
        for dep in sorted(plan.model_names()):
            if self.control_mode != "explicit":
                lock = self._locks.get(dep)
                if lock is not None:  # a step loading beside it (startup, poll): its outcome
                    async with lock:
                        pass
                continue
            if self.versions.get(dep):
                continue
            try:
                await self.load(dep)
            except ServerError as err:
                reason = f"ensemble '{name}' needs model '{dep}', which failed to load: {err.message}"
                await self._refuse_loaded(name, err.code, reason, requested)
        if new[0].config.response_cache.enable and any(
                mv.decoupled for dep in plan.model_names()
                for mv in self.versions.get(dep, {}).values()):
            await self._refuse_loaded(name, Code.INVALID_ARG, decoupled_cache_error(name),
                                      requested)

    async def _refuse_loaded(self, name: str, code: Code, reason: str, requested: bool):
        """Takes back a load that its ensemble's steps make unusable."""
        await self.unload(name)
        self.states[name] = ("UNAVAILABLE", reason)
        log.error("failed to load '%s': %s", name, reason)
        if requested:
            raise ServerError(Code.INVALID_ARG, f"load failed for model '{name}': {reason}")
        raise ServerError(code, reason)

    def composing_models(self, name: str) -> set[str]:
        """The models an ensemble's loaded versions use (empty for others)."""
        return {dep for mv in self.versions.get(name, {}).values() if mv.ensemble is not None
                for dep in mv.ensemble.model_names()}

    def _model_source(self, name, config, files, found, unreachable=None):
        """The folder to load from, and the config override if any."""
        override = None
        if config is not None:
            override = ModelConfig()
            try:
                json_format.Parse(config, override)
            except json_format.ParseError as err:
                log.error("Invalid config override: %s", err)  # the line Triton's CI greps
                raise LoadRefused(Code.INVALID_ARG,
                                  f"failed to load '{name}', invalid config override: {err}") from None
        if files:
            if override is None:
                raise LoadRefused(Code.INVALID_ARG,
                                  f"failed to load '{name}', file override requires a config override")
            return repository.ModelDir(name, self._write_override_files(name, files)), override
        if found is None:
            found, dup_errors = self._scan()
            if name in dup_errors:
                raise ServerError(Code.UNAVAILABLE, f"failed to load '{name}', {dup_errors[name]}")
        entry = found.get(name)
        if entry is None:  # INTERNAL, as Triton's (HTTP 500, gRPC INTERNAL)
            log.error("failed to poll model '%s': model not found in any model repository.", name)
            # a repository that could not be listed says why (Triton logs it)
            why = "".join(f": {reason}" for reason in (unreachable or {}).values())
            raise LoadRefused(Code.INTERNAL,
                              f"failed to load '{name}', failed to poll from model repository{why}")
        return entry, override

    def _write_override_files(self, name: str, files: dict[str, bytes]) -> Path:
        root = Path(tempfile.mkdtemp(prefix="pyserver-override-"))
        model_dir = root / name
        model_dir.mkdir()
        for rel, content in files.items():
            path = Path(rel)
            if path.is_absolute() or ".." in path.parts or not path.parts:
                shutil.rmtree(root, ignore_errors=True)
                raise LoadRefused(Code.INVALID_ARG,
                                  f"failed to load '{name}', invalid file override path '{rel}'")
            target = model_dir / path
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content if isinstance(content, bytes)
                                   else base64.b64decode(content))
            except OSError as err:  # e.g. a name past NAME_MAX: Triton's 500 and text
                shutil.rmtree(root, ignore_errors=True)
                raise LoadRefused(Code.INTERNAL,
                                  f"failed to load '{name}', failed to poll from model "
                                  f"repository: {err.strerror or err}") from None
        old = self._override_dirs.pop(name, None)
        if old:
            shutil.rmtree(old, ignore_errors=True)
        self._override_dirs[name] = str(root)
        return model_dir

    async def unload(self, name: str) -> None:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            old = self.versions.pop(name, None)
            if old is None:
                return  # unloading an unknown or unloaded model is not an error
            self.states[name] = ("UNLOADING", "")
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: [mv.stop() for mv in old.values()])
            self.states[name] = ("UNAVAILABLE", "unloaded")
            self._unloaded_versions[name] = sorted(old)
            log.info("successfully unloaded '%s'", name)

    # -- repositories in object storage ----------------------------------------

    def _mirror(self, uri: str) -> remote.RemoteRepository:
        mirror = self._remote.get(uri)
        if mirror is None:
            mirror = self._remote[uri] = remote.RemoteRepository(uri)
        return mirror

    def _scan(self):
        """repository.scan of every repository, a remote one as its local
        copy holds the models it last listed (no network)."""
        listed = {uri: self._remote[uri].models() for uri in self.repositories
                  if uri in self._remote}
        for uri in self.repositories:
            if remote.is_remote(uri) and uri not in listed:
                listed[uri] = {}  # never listed (it could not be reached)
        return repository.scan(self.repositories, listed)

    async def _sync_remote(self, names: list[str] | None, list_only: bool = False) -> dict[str, str]:
        """Syncs the remote repositories' copies (of the named models, of
        all when None; with list_only, only their listing). Returns
        {repository: error} for those that could not be listed."""
        uris = [uri for uri in self.repositories if remote.is_remote(uri)]
        if not uris:
            return {}
        outcome = await asyncio.get_running_loop().run_in_executor(
            self._pool, self._sync_blocking, uris, names, list_only)
        model_errors, repo_errors, synced = outcome
        for name in synced:
            self._sync_errors.pop(name, None)
        for name, reason in model_errors.items():
            log.error("failed to download model '%s': %s", name, reason)
        self._sync_errors.update(model_errors)
        return repo_errors

    def _sync_blocking(self, uris, names, list_only):
        model_errors, repo_errors, synced = {}, {}, set()
        for uri in uris:
            try:
                mirror = self._mirror(uri)
                if list_only:
                    mirror.list_models()
                    continue
                model_errors.update(mirror.sync(names))
                synced.update(names if names is not None else mirror.models())
            except ServerError as err:
                repo_errors[uri] = err.message
                where = f" for model '{names[0]}'" if names and len(names) == 1 else ""
                log.error("failed to poll model repository '%s'%s: %s", uri, where, err.message)
        return model_errors, repo_errors, synced - set(model_errors)

    def _public(self, text: str) -> str:
        """A message with a remote model's local path named by its URI."""
        for mirror in self._remote.values():
            text = text.replace(str(mirror.root), mirror.location.url().rstrip("/"))
        return text

    def model_folder(self, name: str) -> Path | None:
        """The local folder of model ``name`` (a remote one's copy), None
        where no repository holds it."""
        try:
            entry = self._scan()[0].get(name)
        except ServerError:
            return None
        return None if entry is None else Path(entry.path)

    def repository_found(self, path: str) -> bool:
        """Whether ``path`` is a repository one can register: a folder, or
        a bucket (folder) in object storage, then listed."""
        if not remote.is_remote(path):
            return os.path.isdir(path)
        try:
            mirror = self._mirror(path)
            if mirror.exists():
                mirror.list_models()
                return True
        except ServerError:
            pass
        self.forget_repository(path)  # nothing kept of a repository not registered
        return False

    def forget_repository(self, path: str) -> None:
        """A repository unregistered: its local copy goes (when temporary)."""
        mirror = self._remote.pop(path, None)
        if mirror is not None:
            mirror.close()

    # -- polling ---------------------------------------------------------------

    def start_polling(self, interval_s: float) -> None:
        """Polls the repositories every interval_s seconds (poll mode)."""
        if self._poll_task is None and interval_s > 0:
            self._poll_task = asyncio.get_running_loop().create_task(self._poll_forever(interval_s))

    async def stop_polling(self) -> None:
        task, self._poll_task = self._poll_task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bad poll never stops polling
                log.exception("failed to poll the model repository")

    async def poll(self) -> dict[str, str]:
        """One poll: loads new models, reloads changed ones, unloads removed
        ones. Returns {name: error} for loads that failed."""
        loop = asyncio.get_running_loop()
        # a bucket that cannot be listed keeps its models as they were
        await self._sync_remote(None)
        try:
            found, dup_errors = await loop.run_in_executor(self._pool, self._scan)
        except ServerError as err:
            log.error("failed to poll model repository: %s", err.message)
            return {}
        stamps = await loop.run_in_executor(self._pool, _stamps_of, list(found.values()))
        known = set(self._stamps) | set(self.versions)
        removed = sorted(n for n in known if n not in found)
        for name in removed:
            await self.unload(name)
            self._stamps.pop(name, None)
            if name not in dup_errors:
                self.states.pop(name, None)  # gone from the repository, gone from the index
                log.info("'%s' was removed from the model repository", name)
        for name, reason in dup_errors.items():
            self.states[name] = ("UNAVAILABLE", reason)
        changed = sorted(n for n in found if self._stamps.get(n) != stamps[n])
        if not changed and not removed:
            return {}
        for name in changed:
            log.info("'%s' %s in the model repository", name,
                     "changed" if name in self._stamps else "appeared")
        results = await self._load_many(changed, found, {n: stamps[n] for n in changed})
        return {n: (r.message if isinstance(r, ServerError) else str(r))
                for n, r in zip(changed, results) if isinstance(r, BaseException)}

    def stop_all(self, deadline: float | None = None) -> None:
        """Stops every loaded version (blocking: call off the loop); with a
        deadline, at once (ModelVersion.stop)."""
        for versions in self.versions.values():
            for mv in versions.values():
                mv.stop(deadline)
        self.versions.clear()
        for d in self._override_dirs.values():
            shutil.rmtree(d, ignore_errors=True)
        for mirror in self._remote.values():
            mirror.close()
        self._pool.shutdown(wait=False)


_EMPTY_NAME = "Model name cannot be empty. Please enter a valid name to deploy."


def _check_name(name: str) -> None:
    """Triton's checks and texts for a name to load (its
    qa/L0_input_validation): empty or only whitespace; a separator, or a
    name that is ".." or "." once its spaces go, names a path ("model..1"
    and "..." are names)."""
    stripped = name.strip(" \t\n\v\f\r")
    if not stripped:
        raise invalid_arg(_EMPTY_NAME)
    if "/" in name or "\\" in name or "\0" in name or stripped in ("..", "."):
        raise invalid_arg(f"invalid model name '{name}', model name must not contain path "
                          "traversal characters")


def _stamp(path: Path) -> tuple:
    """What a model folder looks like: every entry below it (a path relative
    to it) with its modification time and size; a changed, added or removed
    file changes it."""
    entries = []
    try:
        st = path.stat()
        entries.append(("", st.st_mtime_ns, 0))
        for root, dirs, files in os.walk(path):
            dirs.sort()
            rel = os.path.relpath(root, path)
            rel = "" if rel == "." else rel
            for name in dirs + sorted(files):
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue  # removed while we looked: the next poll sees it
                entries.append((os.path.join(rel, name), st.st_mtime_ns, st.st_size))
    except OSError:
        pass
    return tuple(entries)


def _unchanged_versions(old: tuple, new: tuple) -> set[int]:
    """The version folders whose files are the same in both stamps, when
    nothing else but the config changed (a label file or warmup data
    changes every version, as in Triton); the config is compared by the
    loader itself."""
    def split(stamp):
        versions: dict[str, list] = {}
        other = []
        for entry in stamp:
            top = entry[0].split(os.sep, 1)[0]
            if top.isdigit():
                versions.setdefault(top, []).append(entry)
            elif top not in ("", repository.CONFIG_FILENAME, repository.CONFIGS_FOLDER):
                other.append(entry)
        return versions, other

    old_versions, old_other = split(old)
    new_versions, new_other = split(new)
    if old_other != new_other:
        return set()
    return {int(v) for v, entries in new_versions.items()
            if old_versions.get(v) == entries and not v.startswith("0")}


def _stop_new(keep: dict, job) -> None:
    if job.cancelled() or job.exception() is not None:
        return
    for mv in job.result()[1]:
        if keep.get(mv.version) is not mv:
            mv.stop()


def _stamp_and_load(stamp: tuple | None, retries: int, model,
                    *args) -> tuple[tuple | None, list]:
    """(the folder's stamp, taken before loading when not given; the loaded
    versions). One job on the load pool; a failed load is tried ``retries``
    more times, as Triton's --model-load-retry-count does."""
    if stamp is None:
        stamp = _stamp(model.path)
    for attempt in range(1, retries + 2):
        try:
            return stamp, repository.load_model(model, *args)
        except Exception as err:
            if attempt > retries:
                raise
            reason = err.message if isinstance(err, ServerError) else f"{type(err).__name__}: {err}"
            log.warning("failed to load '%s', trying again (retry %d of %d): %s",
                        model.name, attempt, retries, reason)


def _stamps_of(models: list) -> dict[str, tuple]:
    return {m.name: _stamp(m.path) for m in models}
