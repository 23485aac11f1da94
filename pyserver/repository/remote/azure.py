"""Azure Blob Storage over azure-storage-blob (azure-identity for the
"managed_identity" and "default" auth types). The account's endpoint is
https://ACCOUNT.blob.core.windows.net, as Triton's; AZURE_STORAGE_CONNECTION_STRING
(the Azure CLI's variable), when set, names another (Azurite, a sovereign
cloud) and its key."""

from __future__ import annotations

import os
from typing import BinaryIO

from pyserver.repository.remote.credentials import ASCredential
from pyserver.repository.remote.store import ObjectStore, StorageError, StoredObject, import_sdk
from pyserver.repository.remote.uri import Location


def account_name(location: Location, credential: ASCredential) -> str:
    """The credential's account_str wins over the URI's, as in Triton."""
    return credential.account_str or location.account


def credential_object(credential: ASCredential, account: str):
    """What BlobServiceClient takes as ``credential`` for this auth type
    (None: anonymous)."""
    if credential.auth_type == "managed_identity":
        identity = import_sdk("azure.identity", "as", "azure")
        if credential.client_id:
            return identity.ManagedIdentityCredential(client_id=credential.client_id)
        return identity.ManagedIdentityCredential()
    if credential.auth_type == "default":
        return import_sdk("azure.identity", "as", "azure").DefaultAzureCredential()
    if credential.account_key:
        return {"account_name": account, "account_key": credential.account_key}
    return None


class AzureStore(ObjectStore):
    def __init__(self, location: Location, credential: ASCredential, container_client=None):
        super().__init__(location)
        blob = import_sdk("azure.storage.blob", "as", "azure")
        from azure.core import exceptions
        self._exceptions = exceptions
        if container_client is None:
            account = account_name(location, credential)
            connection = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
            try:
                if connection:
                    service = blob.BlobServiceClient.from_connection_string(connection)
                else:
                    service = blob.BlobServiceClient(f"https://{account}.blob.core.windows.net",
                                                     credential=credential_object(credential, account))
            except StorageError:
                raise
            except Exception as err:
                raise StorageError("Unable to create Azure filesystem client. Check account "
                                   f"credentials. {type(err).__name__}: {err}") from None
            container_client = service.get_container_client(location.bucket)
        self._container = container_client

    def check(self) -> None:
        try:
            self._container.get_container_properties()
        except self._exceptions.ResourceNotFoundError as err:
            raise StorageError(f"Could not get MetaData for container with name "
                               f"{self.location.bucket} : {_first_line(err)}") from None
        except self._exceptions.ClientAuthenticationError as err:
            raise StorageError("Unable to create Azure filesystem client. Check account "
                               f"credentials. {_first_line(err)}") from None
        except Exception as err:
            raise StorageError(f"Failed to check if directory at {self.location.url()}:"
                               f"{_first_line(err)}") from None

    def list(self, prefix: str) -> list[StoredObject]:
        try:
            return [StoredObject(b.name, str(b.etag or "").strip('"'), int(b.size or 0))
                    for b in self._container.list_blobs(name_starts_with=prefix)]
        except Exception as err:
            if isinstance(err, (self._exceptions.ResourceNotFoundError,
                                self._exceptions.ClientAuthenticationError)):
                self.check()  # the container's own text
            raise StorageError(f"Failed to get contents of directory {self.location.url(prefix)}:"
                               f"{_first_line(err)}") from None

    def read_into(self, obj: StoredObject, out: BinaryIO) -> str:
        try:
            stream = self._container.download_blob(obj.key)
            stream.readinto(out)
        except Exception as err:
            raise StorageError(f"Failed to download file at {obj.key}:{_first_line(err)}") from None
        props = getattr(stream, "properties", None)
        tag = getattr(props, "etag", None) if props is not None else None
        return str(tag or obj.tag).strip('"')


def _first_line(err) -> str:
    return (getattr(err, "message", None) or str(err)).splitlines()[0] if str(err) else type(err).__name__
