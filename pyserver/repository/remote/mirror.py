"""RemoteRepository: a model repository in object storage, kept as a local
folder the loader reads like any other.

Each sync lists the repository's objects (or one model's) and brings the
local copy up to date: objects whose tag (S3's ETag, GCS's generation,
Azure's etag) or size changed since they were fetched are downloaded, in
parallel, each written beside its file and renamed over it; files and
models gone from the bucket are removed. An object that did not change is
not fetched again and its file is left as it was, so the model manager's
own check (what a model's folder looks like) sees only real changes: poll
mode reloads a model whose objects changed and nothing else.

The cache is TRITON_AWS_MOUNT_DIRECTORY, TRITON_GCS_MOUNT_DIRECTORY or
TRITON_AZURE_MOUNT_DIRECTORY (the names Triton gives its download folders),
one folder per repository below it, kept across runs: a restart fetches only
what changed since. Without the variable it is a temporary folder removed
when the server stops or the process exits. What each model's files were
fetched as is kept in .pyserver-sync/MODEL.json beside the models (a hidden
folder: no model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pyserver.kernel.errors import ServerError
from pyserver.repository.remote.credentials import credential_for
from pyserver.repository.remote.store import ObjectStore, StorageError, StoredObject
from pyserver.repository.remote.uri import Location, parse

log = logging.getLogger("pyserver")

MOUNT_DIRECTORY_ENV = {"s3": "TRITON_AWS_MOUNT_DIRECTORY", "gs": "TRITON_GCS_MOUNT_DIRECTORY",
                       "as": "TRITON_AZURE_MOUNT_DIRECTORY"}
SYNC_FOLDER = ".pyserver-sync"
DEFAULT_DOWNLOAD_THREADS = 16


def open_store(location: Location, connections: int = DEFAULT_DOWNLOAD_THREADS) -> ObjectStore:
    """The client of a location's cloud, with the credential Triton would use."""
    credential = credential_for(location.scheme, location.uri)
    if location.scheme == "s3":
        from pyserver.repository.remote.s3 import S3Store
        return S3Store(location, credential, connections)
    if location.scheme == "gs":
        from pyserver.repository.remote.gcs import GCSStore
        return GCSStore(location, credential)
    from pyserver.repository.remote.azure import AzureStore
    return AzureStore(location, credential)


class RemoteRepository:
    """One object-storage repository and its local copy (``root``)."""

    def __init__(self, uri: str, store: ObjectStore | None = None,
                 download_threads: int = DEFAULT_DOWNLOAD_THREADS):
        self.uri = uri
        self.location = parse(uri)
        self._store = store  # opened on first use: credentials, the SDK's import
        self._threads = download_threads
        self.root, temporary = _cache_folder(self.location)
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True) \
            if temporary else None
        self._listed: dict[str, list[StoredObject]] | None = None  # name -> its objects
        self._checked = False
        self._lock = threading.Lock()  # one sync at a time
        self._pool: ThreadPoolExecutor | None = None
        self._count_lock = threading.Lock()
        self.downloads = 0  # objects fetched (tests and bench/startup.py read it)

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.location, self._threads)
        return self._store

    def models(self) -> dict[str, Path]:
        """The models as last listed, with their local folders (which a model
        not synced yet does not have)."""
        return {name: self.root / name for name in sorted(self._listed or ())}

    def exists(self) -> bool:
        """Whether the repository's folder is there (the bucket, and for a
        folder inside it, at least one object under it)."""
        try:
            self.store.check()
            prefix = self.location.folder_prefix
            return not prefix or bool(self.store.list(prefix))
        except ServerError:
            return False

    def list_models(self) -> list[str]:
        """Lists the repository without downloading anything."""
        with self._lock:
            self._listed = self._list(None)
            return sorted(self._listed)

    def sync(self, names: list[str] | None = None) -> dict[str, str]:
        """Brings the local copies of the named models (every model when
        None) up to date with the bucket. Returns {name: error} for the
        models whose objects did not all arrive (their other files are
        current; the next sync tries again). Raises ServerError when the
        repository cannot be listed."""
        with self._lock:
            listing = self._list(names)
            if names is None:
                self._listed = listing
                scope = set(listing) | {p.name for p in self._local_models()}
            else:
                current = dict(self._listed or {})
                for name in names:
                    if name in listing:
                        current[name] = listing[name]
                    else:
                        current.pop(name, None)
                self._listed = current
                scope = set(names)
            errors: dict[str, str] = {}
            manifests: dict[str, dict] = {}
            wanted: list[tuple[str, str, StoredObject]] = []
            for name in sorted(scope):
                if name not in listing:
                    self._remove_model(name)
                    continue
                try:
                    manifests[name], fetch = self._plan(name, listing[name])
                except OSError as err:
                    errors[name] = f"Failed to create local folder: {self.root / name}, {err}"
                    continue
                wanted.extend((name, rel, obj) for rel, obj in fetch)
            if wanted:
                self._fetch_all(wanted, manifests, errors)
            for name, manifest in manifests.items():
                self._write_manifest(name, manifest)
            return errors

    def close(self) -> None:
        """Stops the downloads; a temporary cache is removed."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._cleanup is not None:
            self._cleanup()

    # -- the parts of a sync ---------------------------------------------------

    def _list(self, names: list[str] | None) -> dict[str, list[StoredObject]]:
        prefix = self.location.folder_prefix
        if not self._checked:  # the bucket's own error before any listing's
            self.store.check()
            self._checked = True
        if names is None:
            objects = self.store.list(prefix)
        else:
            objects = [obj for name in names for obj in self.store.list(f"{prefix}{name}/")]
        grouped: dict[str, list[StoredObject]] = {}
        for obj in objects:
            parts = obj.key[len(prefix):].split("/")
            if len(parts) < 2 or parts[0].startswith(".") or not parts[0]:
                continue  # a file at the repository's root is no model
            inner = parts[1:-1] if obj.is_folder else parts[1:]
            if any(p in ("", ".", "..") for p in inner):
                log.warning("Cannot handle item with empty name at %s", self.location.url(obj.key))
                continue
            grouped.setdefault(parts[0], []).append(obj)
        return grouped

    def _plan(self, name: str, objects: list[StoredObject]):
        """Removes the model's local files that left the bucket, makes its
        folders; returns (its manifest of files still current, the objects
        to fetch as (relative path, object))."""
        skip = len(self.location.folder_prefix) + len(name) + 1
        files: dict[str, StoredObject] = {}
        folders = {""}
        for obj in objects:
            rel = obj.key[skip:].rstrip("/")
            if not obj.is_folder:
                files[rel] = obj
                rel = os.path.dirname(rel)
            while rel:
                folders.add(rel)
                rel = os.path.dirname(rel)
        model_dir = self.root / name
        if model_dir.is_dir():
            for here, _, filenames in os.walk(model_dir, topdown=False):
                rel_here = os.path.relpath(here, model_dir)
                rel_here = "" if rel_here == "." else rel_here
                for filename in filenames:
                    if os.path.join(rel_here, filename) not in files:
                        os.unlink(os.path.join(here, filename))
                if rel_here not in folders:
                    try:
                        os.rmdir(here)
                    except OSError:
                        pass
        for folder in sorted(folders):
            (model_dir / folder).mkdir(parents=True, exist_ok=True)
        known = self._read_manifest(name)
        manifest, fetch = {}, []
        for rel, obj in files.items():
            if known.get(rel) == [obj.tag, obj.size] and _has_size(model_dir / rel, obj.size):
                manifest[rel] = known[rel]
            else:
                fetch.append((rel, obj))
        return manifest, fetch

    def _fetch_all(self, wanted, manifests, errors) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="model-download")
        jobs = {self._pool.submit(self._fetch, self.root / name / rel, obj): (name, rel, obj)
                for name, rel, obj in wanted}
        for job in as_completed(jobs):
            name, rel, obj = jobs[job]
            try:
                tag = job.result()
            except ServerError as err:
                errors.setdefault(name, err.message)
            except OSError as err:
                errors.setdefault(name, f"Failed to write {self.root / name / rel}: {err}")
            else:
                manifests[name][rel] = [tag, obj.size]

    def _fetch(self, dest: Path, obj: StoredObject) -> str:
        tag = self.store.download(obj, dest)
        with self._count_lock:
            self.downloads += 1
        return tag

    def _local_models(self) -> list[Path]:
        try:
            return [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        except OSError:
            return []

    def _remove_model(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)
        try:
            os.unlink(self._manifest_path(name))
        except OSError:
            pass

    def _manifest_path(self, name: str) -> Path:
        return self.root / SYNC_FOLDER / f"{name}.json"

    def _read_manifest(self, name: str) -> dict:
        try:
            with open(self._manifest_path(name), encoding="utf-8") as f:
                doc = json.load(f)
            return doc if isinstance(doc, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write_manifest(self, name: str, manifest: dict) -> None:
        path = self._manifest_path(name)
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(manifest, f, sort_keys=True)
        os.replace(tmp, path)


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _cache_folder(location: Location) -> tuple[Path, bool]:
    """(the repository's local folder, whether it is temporary)."""
    mount = os.environ.get(MOUNT_DIRECTORY_ENV[location.scheme])
    if not mount:
        return Path(tempfile.mkdtemp(prefix=f"pyserver-{location.scheme}-")), True
    where = "|".join((location.endpoint, location.account, location.bucket, location.prefix))
    digest = hashlib.sha1(where.encode()).hexdigest()[:12]
    readable = re.sub(r"[^0-9A-Za-z.\-_]", "_", location.bucket)
    root = Path(mount) / f"pyserver-{location.scheme}-{readable}-{digest}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StorageError(f"Failed to create local folder: {root}, {err}") from None
    return root, False
