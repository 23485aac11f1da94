"""What a cloud's client offers the mirror: list a folder's objects with
a tag that changes when an object does, and download one. One module per
cloud (s3.py, gcs.py, azure.py) implements it over that cloud's SDK, which
is imported only there and only when a repository of that cloud is used."""

from __future__ import annotations

import importlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pyserver.kernel.errors import Code, ServerError
from pyserver.repository.remote.uri import Location


@dataclass(frozen=True)
class StoredObject:
    key: str  # the full key in the bucket
    tag: str  # S3's ETag, GCS's generation, Azure's etag: changes with the content
    size: int

    @property
    def is_folder(self) -> bool:
        """A folder marker (a console's "create folder", an empty version folder)."""
        return self.key.endswith("/")


class StorageError(ServerError):
    """A cloud call that failed, with Triton's text for it."""

    def __init__(self, message: str, code: Code = Code.INTERNAL):
        super().__init__(code, message)


class ObjectStore:
    """One bucket (container) of one cloud, behind its SDK's client."""

    def __init__(self, location: Location):
        self.location = location

    def check(self) -> None:
        """Raises StorageError when the bucket cannot be reached: it does
        not exist, or the credentials are refused."""
        raise NotImplementedError

    def list(self, prefix: str) -> list[StoredObject]:
        """Every object whose key starts with ``prefix``, at any depth."""
        raise NotImplementedError

    def read_into(self, obj: StoredObject, out: BinaryIO) -> str:
        """Writes the object's bytes to ``out``; returns the tag of what was
        read (it may be newer than the listing's)."""
        raise NotImplementedError

    def download(self, obj: StoredObject, dest: Path) -> str:
        """The object into ``dest``, whole or not at all (written beside it,
        then renamed over it); returns the tag read."""
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
        try:
            with os.fdopen(fd, "wb") as out:
                tag = self.read_into(obj, out)
            os.replace(tmp, dest)
        except BaseException:
            os.unlink(tmp)
            raise
        return tag


def import_sdk(module: str, scheme: str, extra: str):
    """A cloud SDK's module, or Triton's "not supported" error naming the
    extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise StorageError(f"{scheme}:// file-system not supported: install its client "
                           f"(pip install 'pyserver[{extra}]'): {err}") from None
