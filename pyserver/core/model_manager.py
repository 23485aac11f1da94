"""ModelManager: which model versions are loaded, loading and unloading them
(in parallel, off the event loop), their states for the repository index,
and resolving a (name, version) of a request to a loaded version.

A reload builds the new versions first and swaps them in only when they are
ready, so the old ones keep serving until then.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from google.protobuf import json_format

from pyserver._proto import ModelConfig
from pyserver.core import repository
from pyserver.core.errors import Code, ServerError, invalid_arg, not_found
from pyserver.core.model import ModelVersion
from pyserver.engine import CompletionQueue

log = logging.getLogger("pyserver")

CONTROL_MODES = ("none", "explicit")


class ModelManager:
    def __init__(self, repositories: list[str], completions: CompletionQueue,
                 load_thread_count: int = 4, control_mode: str = "none",
                 load_options: repository.LoadOptions | None = None):
        if control_mode not in CONTROL_MODES:
            raise ServerError(Code.INVALID_ARG,
                              f"unsupported --model-control-mode '{control_mode}' "
                              f"(supported here: {', '.join(CONTROL_MODES)})")
        self.repositories = repositories
        self.completions = completions
        self.control_mode = control_mode
        self.load_options = load_options or repository.LoadOptions()
        self._pool = ThreadPoolExecutor(max(1, load_thread_count), thread_name_prefix="model-load")
        self.versions: dict[str, dict[int, ModelVersion]] = {}
        # name -> (state, reason) for models that are not READY
        self.states: dict[str, tuple[str, str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._override_dirs: dict[str, str] = {}

    # -- queries ---------------------------------------------------------------

    def resolve(self, name: str, version: str) -> ModelVersion:
        versions = self.versions.get(name)
        if not versions:
            if name in self.states or name in self.versions:
                raise not_found(f"Request for unknown model: '{name}' has no available versions")
            raise not_found(f"Request for unknown model: '{name}' is not found")
        if not version:
            return versions[max(versions)]
        try:
            number = int(version)
        except ValueError:
            number = None
        mv = versions.get(number)
        if mv is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found")
        return mv

    def loaded(self) -> list[ModelVersion]:
        return [mv for name in sorted(self.versions) for _, mv in sorted(self.versions[name].items())]

    def failed(self) -> dict[str, str]:
        return {n: reason for n, (state, reason) in self.states.items()
                if state == "UNAVAILABLE" and reason != "unloaded"}

    def index(self, ready_only: bool = False) -> list[dict]:
        """Repository index rows as Triton reports them."""
        found, dup_errors = repository.scan(self.repositories)
        names = sorted(set(found) | set(dup_errors) | set(self.versions) | set(self.states))
        rows = []
        for name in names:
            versions = self.versions.get(name)
            if versions:
                for v in sorted(versions):
                    rows.append({"name": name, "version": str(v), "state": "READY", "reason": ""})
                continue
            if ready_only:
                continue
            if name in dup_errors:
                rows.append({"name": name, "version": "", "state": "UNAVAILABLE",
                             "reason": dup_errors[name]})
            elif name in self.states:
                state, reason = self.states[name]
                rows.append({"name": name, "version": "", "state": state, "reason": reason})
            else:
                rows.append({"name": name})  # in the repository, never loaded
        return rows

    # -- loading ---------------------------------------------------------------

    async def load_all(self, names: list[str] | None = None) -> dict[str, str]:
        """Loads the named models (all in the repositories when None), in
        parallel. Returns {name: error} for those that failed."""
        found, dup_errors = repository.scan(self.repositories)
        for name, reason in dup_errors.items():
            self.states[name] = ("UNAVAILABLE", reason)
        if names is None:
            names = sorted(found)
        results = await asyncio.gather(*(self.load(n, found=found) for n in names),
                                       return_exceptions=True)
        errors = dict(dup_errors)
        for name, result in zip(names, results):
            if isinstance(result, ServerError):
                errors[name] = result.message
            elif isinstance(result, BaseException):
                errors[name] = f"{type(result).__name__}: {result}"
        return errors

    async def load(self, name: str, config: str | None = None, files: dict[str, bytes] | None = None,
                   found: dict | None = None) -> None:
        """Loads (or reloads) a model; raises ServerError with the reason."""
        _check_name(name)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            try:
                entry, override = self._model_source(name, config, files, found)
            except ServerError as err:
                self.states[name] = ("UNAVAILABLE", err.message)
                raise
            self.states[name] = ("LOADING", "")
            loop = asyncio.get_running_loop()
            try:
                new = await loop.run_in_executor(
                    self._pool, repository.load_model, entry, self.completions, override,
                    self.load_options)
            except ServerError as err:
                self.states[name] = ("UNAVAILABLE", err.message)
                log.error("failed to load '%s': %s", name, err.message)
                raise
            except Exception as err:  # a broken model never takes the server down
                log.exception("failed to load '%s'", name)
                self.states[name] = ("UNAVAILABLE", f"{type(err).__name__}: {err}")
                raise ServerError(Code.INTERNAL, f"failed to load '{name}': {err}") from None
            old = self.versions.get(name, {})
            self.versions[name] = {mv.version: mv for mv in new}
            self.states.pop(name, None)
            for mv in new:
                mv.start()
                log.info("successfully loaded '%s' version %d", name, mv.version)
            if old:
                await loop.run_in_executor(None, lambda: [mv.stop() for mv in old.values()])

    def _model_source(self, name, config, files, found):
        """The folder to load from, and the config override if any."""
        override = None
        if config is not None:
            override = ModelConfig()
            try:
                json_format.Parse(config, override)
            except json_format.ParseError as err:
                raise invalid_arg(f"failed to load '{name}', invalid config override: {err}") from None
        if files:
            if override is None:
                raise invalid_arg(f"failed to load '{name}', file override requires a config override")
            return repository.ModelDir(name, self._write_override_files(name, files)), override
        if found is None:
            found, dup_errors = repository.scan(self.repositories)
            if name in dup_errors:
                raise ServerError(Code.UNAVAILABLE, f"failed to load '{name}', {dup_errors[name]}")
        entry = found.get(name)
        if entry is None:
            raise invalid_arg(f"failed to load '{name}', failed to poll from model repository")
        return entry, override

    def _write_override_files(self, name: str, files: dict[str, bytes]) -> Path:
        root = Path(tempfile.mkdtemp(prefix="pyserver-override-"))
        model_dir = root / name
        model_dir.mkdir()
        for rel, content in files.items():
            path = Path(rel)
            if path.is_absolute() or ".." in path.parts or not path.parts:
                shutil.rmtree(root, ignore_errors=True)
                raise invalid_arg(f"failed to load '{name}', invalid file override path '{rel}'")
            target = model_dir / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else base64.b64decode(content))
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
            log.info("successfully unloaded '%s'", name)

    def stop_all(self) -> None:
        """Stops every loaded version (blocking: call off the loop)."""
        for versions in self.versions.values():
            for mv in versions.values():
                mv.stop()
        self.versions.clear()
        for d in self._override_dirs.values():
            shutil.rmtree(d, ignore_errors=True)
        self._pool.shutdown(wait=False)


def _check_name(name: str) -> None:
    if not name or not name.strip():
        raise invalid_arg("failed to load '', model name must not be empty")
    if "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise invalid_arg(f"failed to load '{name}', invalid model name '{name}'")
