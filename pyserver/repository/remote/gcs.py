"""Google Cloud Storage over google-cloud-storage. STORAGE_EMULATOR_HOST
(the library's own variable) points it at an emulator."""

from __future__ import annotations

import json
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
        # resolved once (google-auth's default chain may ask the metadata
        # server), then shared by a client per thread (its HTTP session is not)
        self._auth = self._credentials(credential)
        self._local = threading.local()
        self._client()

    def _credentials(self, credential: GCSCredential):
        """(project, credentials), or None for anonymous access."""
        _read_only = ["https://www.googleapis.com/auth/devstorage.read_only"]
        try:
            import google.auth
            if credential.path:  # a user's credentials or a service account's key, as Triton takes either
                with open(credential.path, encoding="utf-8") as f:
                    info = json.load(f)
                if info.get("type") == "authorized_user":
                    from google.oauth2.credentials import Credentials
                    creds = Credentials.from_authorized_user_info(info, scopes=_read_only)
                else:
                    from google.oauth2.service_account import Credentials
                    creds = Credentials.from_service_account_info(info, scopes=_read_only)
                return info.get("project_id") or info.get("quota_project_id") or "_", creds
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials
                return "_", AnonymousCredentials()
            try:
                creds, project = google.auth.default(scopes=_read_only)
            except google.auth.exceptions.DefaultCredentialsError:
                return None  # no credential anywhere: anonymous, as Triton falls back
            return project or "_", creds
        except Exception as err:
            raise StorageError(f"Unable to create GCS client. Check account credentials. "
                               f"{type(err).__name__}: {err}") from None

    def _client(self):
        client = getattr(self._local, "client", None)
        if client is None:
            if self._auth is None:
                client = self._storage.Client.create_anonymous_client()
            else:
                client = self._storage.Client(project=self._auth[0], credentials=self._auth[1])
            self._local.client = client
        return client

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
