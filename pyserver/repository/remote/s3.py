"""Amazon S3 and S3-compatible stores (MinIO, Ceph, moto...) over boto3."""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from pyserver.repository.remote.credentials import S3Credential
from pyserver.repository.remote.store import ObjectStore, StorageError, StoredObject, import_sdk
from pyserver.repository.remote.uri import Location

_CHUNK = 1 << 20
# what S3 answers for a key or signature it does not accept
_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403",
               "ExpiredToken", "InvalidToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed"}
_MISSING_BUCKET = {"NoSuchBucket", "404"}


class S3Store(ObjectStore):
    # An object this large is fetched as parts of PART_SIZE bytes in
    # parallel (ranged GETs, each If-Match the listed ETag, so a part of a
    # newer upload is refused instead of mixed in).
    RANGED_THRESHOLD = 64 << 20
    PART_SIZE = 16 << 20
    PART_THREADS = 8

    def __init__(self, location: Location, credential: S3Credential, connections: int = 16):
        super().__init__(location)
        boto3 = import_sdk("boto3", "s3", "s3")
        from botocore.config import Config

        if credential.key_id and credential.secret_key:
            session = boto3.session.Session(
                aws_access_key_id=credential.key_id, aws_secret_access_key=credential.secret_key,
                aws_session_token=credential.session_token or None,
                region_name=credential.region or None)
        elif credential.profile:
            session = boto3.session.Session(profile_name=credential.profile,
                                            region_name=credential.region or None)
        else:  # the environment, ~/.aws, the instance's or the pod's role
            session = boto3.session.Session(region_name=credential.region or None)
        # Path-style addressing as Triton's client (useVirtualAddressing false):
        # an S3-compatible store rarely has a DNS name per bucket.
        config = Config(s3={"addressing_style": "path"}, max_pool_connections=connections,
                        retries={"max_attempts": 3, "mode": "standard"},
                        connect_timeout=10, read_timeout=60)
        self._client = session.client("s3", endpoint_url=location.endpoint or None, config=config)
        self._errors = _error_types()

    def check(self) -> None:
        bucket = self.location.bucket
        try:
            self._client.head_bucket(Bucket=bucket)
        except self._errors as err:
            name, message = _describe(err)
            if name in ("400", "403"):  # a HEAD's answer has no body: a listing's says why
                try:
                    self._client.list_objects_v2(Bucket=bucket, MaxKeys=1)
                except self._errors as detail:
                    name, message = _describe(detail)
                else:
                    return
            if name in _MISSING_BUCKET:
                raise StorageError(f"Could not get MetaData for bucket with name {bucket} due to "
                                   f"exception: NoSuchBucket, error message: {message}") from None
            raise StorageError("Unable to create S3 filesystem client. Check account credentials. "
                               f"Exception: '{name}' Message: '{message}'") from None

    def list(self, prefix: str) -> list[StoredObject]:
        out = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix)
            for page in pages:
                for item in page.get("Contents", ()):
                    out.append(StoredObject(item["Key"], item.get("ETag", "").strip('"'),
                                            int(item.get("Size", 0))))
        except self._errors as err:
            name, message = _describe(err)
            if name in _AUTH_CODES or name in _MISSING_BUCKET:
                self.check()  # the bucket's own text, as Triton's IsDirectory gives it
            raise StorageError(f"Failed to list objects with prefix {self.location.url(prefix)} "
                               f"due to exception: {name}, error message: {message}") from None
        return out

    def read_into(self, obj: StoredObject, out: BinaryIO) -> str:
        try:
            answer = self._client.get_object(Bucket=self.location.bucket, Key=obj.key)
            body = answer["Body"]
            for chunk in iter(lambda: body.read(_CHUNK), b""):
                out.write(chunk)
        except self._errors as err:
            name, message = _describe(err)
            raise StorageError(f"Failed to get object at {self.location.url(obj.key)} due to "
                               f"exception: {name}, error message: {message}") from None
        return answer.get("ETag", obj.tag).strip('"')


    def download(self, obj: StoredObject, dest: Path) -> str:
        if obj.size < self.RANGED_THRESHOLD or not obj.tag:
            return super().download(obj, dest)
        parts = [(first, min(first + self.PART_SIZE, obj.size) - 1)
                 for first in range(0, obj.size, self.PART_SIZE)]
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
        try:
            os.ftruncate(fd, obj.size)
            with ThreadPoolExecutor(min(self.PART_THREADS, len(parts)),
                                    thread_name_prefix="s3-part") as pool:
                for _ in pool.map(lambda part: self._read_part(obj, fd, *part), parts):
                    pass
            os.close(fd)
            fd = -1
            os.replace(tmp, dest)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            os.unlink(tmp)
            raise
        return obj.tag

    def _read_part(self, obj: StoredObject, fd: int, first: int, last: int) -> None:
        offset = first
        try:
            answer = self._client.get_object(Bucket=self.location.bucket, Key=obj.key,
                                             Range=f"bytes={first}-{last}", IfMatch=f'"{obj.tag}"')
            body = answer["Body"]
            for chunk in iter(lambda: body.read(_CHUNK), b""):
                os.pwrite(fd, chunk, offset)
                offset += len(chunk)
        except self._errors as err:
            name, message = _describe(err)
            raise StorageError(f"Failed to get object at {self.location.url(obj.key)} due to "
                               f"exception: {name}, error message: {message}") from None
        if offset != last + 1:
            raise StorageError(f"Failed to get object at {self.location.url(obj.key)} due to "
                               f"exception: IncompleteRead, error message: bytes {first}-{last} "
                               f"ended at {offset}")


def _error_types() -> tuple:
    from botocore.exceptions import BotoCoreError, ClientError
    return (ClientError, BotoCoreError)


def _describe(err) -> tuple[str, str]:
    """(the exception's name, its message), as the AWS SDK names them."""
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = str(error.get("Code", "")) or type(err).__name__
        return code, str(error.get("Message", "")) or str(err)
    return type(err).__name__, str(err)
