"""Google Cloud Storage over google-cloud-storage. STORAGE_EMULATOR_HOST
(the library's own variable) points it at an emulator."""

from __future__ import annotations

import os
import threading
from typing import BinaryIO

from pyserver.repository.remote.credentials import GCSCredential
from pyserver.repository.remote.store import ObjectStore, StorageError, StoredObject, import_sdk
from pyserver.repository.remote.uri import Location


class GCSStore(ObjectStore):
    def __init__(self, location: Location, credential: GCSCredential):
        super().__init__(location)
        self._storage = import_sdk("google.cloud.storage", "gs", "gcs")
        from google.api_core import exceptions
        self._exceptions = exceptions
        self._credential = credential
        self._local = threading.local()  # a client per thread: its HTTP session is not shared
        self._client()  # a credential file that does not read fails here, once

    def _client(self):
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._make_client()
        return client

    def _make_client(self):
        storage = self._storage
        path = self._credential.path
        try:
            if path:  # a service account's key or a user's credentials, as Triton takes either
                import google.auth
                creds, project = google.auth.load_credentials_from_file(
                    path, scopes=["https://www.googleapis.com/auth/devstorage.read_only"])
                return storage.Client(project=project or "_", credentials=creds)
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials
                return storage.Client(project="_", credentials=AnonymousCredentials())
            try:
                return storage.Client()  # google-auth's default chain
            except Exception:  # no credential anywhere: anonymous, as Triton falls back
                return storage.Client.create_anonymous_client()
        except Exception as err:
            raise StorageError(f"Unable to create GCS client. Check account credentials. "
                               f"{type(err).__name__}: {err}") from None

    def check(self) -> None:
        bucket = self.location.bucket
        try:
            self._client().get_bucket(bucket)
        except self._exceptions.NotFound as err:
            raise StorageError(f"Could not get MetaData for bucket with name {bucket} : "
                               f"{_message(err)}") from None
        except (self._exceptions.Forbidden, self._exceptions.Unauthorized) as err:
            raise StorageError(f"Unable to create GCS client. Check account credentials. "
                               f"{_message(err)}") from None
        except Exception as err:
            raise StorageError(f"Could not get MetaData for bucket with name {bucket} : "
                               f"{_message(err)}") from None

    def list(self, prefix: str) -> list[StoredObject]:
        try:
            return [StoredObject(b.name, str(b.generation or b.etag or ""), int(b.size or 0))
                    for b in self._client().list_blobs(self.location.bucket, prefix=prefix)]
        except Exception as err:
            if isinstance(err, (self._exceptions.NotFound, self._exceptions.Forbidden,
                                self._exceptions.Unauthorized)):
                self.check()  # the bucket's own text
            raise StorageError(f"Could not list contents of directory at "
                               f"{self.location.url(prefix)} : {_message(err)}") from None

    def read_into(self, obj: StoredObject, out: BinaryIO) -> str:
        try:
            blob = self._client().bucket(self.location.bucket).blob(obj.key)
            blob.download_to_file(out)
        except Exception as err:
            raise StorageError(f"Failed to get object at {self.location.url(obj.key)} : "
                               f"{_message(err)}") from None
        return str(blob.generation or obj.tag)


def _message(err) -> str:
    return getattr(err, "message", None) or str(err)
