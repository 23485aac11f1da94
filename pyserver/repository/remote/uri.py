"""Object-storage repository URIs, parsed as Triton parses them.

    s3://bucket/path                    Amazon S3 (the endpoint boto3 picks)
    s3://host:port/bucket/path          an S3-compatible store over http
    s3://https://host:port/bucket/path  the same over https (http:// also)
    gs://bucket/path                    Google Cloud Storage
    as://account/container/path         Azure Blob Storage (the account may
                                        be written account.blob.core.windows.net)

Extra slashes are dropped (leading, trailing, doubled) as Triton's S3
CleanPath drops them. A path that is none of these is a local folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyserver.kernel.errors import Code, ServerError

SCHEMES = ("s3", "gs", "as")

# Triton's S3 regex: an optional protocol, host:port, a bucket of lower-case
# letters, digits, dots and dashes, then the object path.
_S3_ENDPOINT = re.compile(
    r"s3://(http://|https://|)([0-9a-zA-Z\-.]+):([0-9]+)/([0-9a-z.\-]+)((?:/[0-9a-zA-Z.\-_]+)*)")
_AS_PATH = re.compile(r"as://([^/]+)/([^/?]+)(?:/([^?]*))?(\?.*)?")
_AS_HOST_SUFFIX = ".blob.core.windows.net"


@dataclass(frozen=True)
class Location:
    """Where a repository lives in object storage."""

    scheme: str  # "s3", "gs" or "as"
    bucket: str  # the bucket (the container for Azure)
    prefix: str  # the folder inside it: no leading or trailing slash, "" for the root
    uri: str  # as the user wrote it (credentials are matched against it)
    endpoint: str = ""  # S3-compatible stores: "http://host:port" or "https://host:port"
    account: str = ""  # Azure: the storage account

    def key(self, relative: str) -> str:
        """The object key of a path relative to the repository's folder."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    @property
    def folder_prefix(self) -> str:
        """The key prefix of everything in the repository ("" or "path/")."""
        return f"{self.prefix}/" if self.prefix else ""

    def url(self, key: str = "") -> str:
        """A key as Triton names it in messages (scheme://bucket/key; Azure's
        with its account)."""
        head = f"as://{self.account}/{self.bucket}" if self.scheme == "as" \
            else f"{self.scheme}://{self.bucket}"
        key = key if key else self.prefix
        return f"{head}/{key}" if key else head


def is_remote(path) -> bool:
    """Whether a repository path names object storage (s3://, gs://, as://)."""
    return isinstance(path, str) and path[:5] in ("s3://", "gs://", "as://")


def parse(uri: str) -> Location:
    """The Location a repository URI names; ServerError with Triton's text
    for one it cannot read."""
    scheme = uri[:2]
    if not is_remote(uri):
        raise ServerError(Code.INVALID_ARG, f"not an object-storage path: '{uri}'")
    if scheme == "s3":
        return _parse_s3(uri)
    if scheme == "gs":
        return _parse_gs(uri)
    return _parse_as(uri)


def _clean(path: str, scheme: str) -> tuple[str, str]:
    """(protocol, the rest without extra slashes): Triton's CleanPath."""
    rest = path[len(scheme) + 3:]
    protocol = ""
    for candidate in ("https://", "http://"):
        if rest.startswith(candidate):
            protocol, rest = candidate, rest[len(candidate):]
            break
    parts = [p for p in rest.split("/") if p]
    if not parts:
        raise ServerError(Code.INVALID_ARG, f"Invalid bucket name: '{rest}'")
    return protocol, "/".join(parts)


def _parse_s3(uri: str) -> Location:
    protocol, rest = _clean(uri, "s3")
    match = _S3_ENDPOINT.fullmatch(f"s3://{protocol}{rest}")
    if match:
        scheme = "https" if match.group(1) == "https://" else "http"
        return Location("s3", match.group(4), match.group(5).lstrip("/"), uri,
                        endpoint=f"{scheme}://{match.group(2)}:{match.group(3)}")
    if protocol:  # a protocol without host:port: Triton reads it as part of the bucket
        rest = protocol + rest
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ServerError(Code.INTERNAL, f"No bucket name found in path: {uri}")
    return Location("s3", bucket, prefix, uri)


def _parse_gs(uri: str) -> Location:
    parts = [p for p in uri[len("gs://"):].split("/") if p]
    if not parts:
        raise ServerError(Code.INTERNAL, f"No bucket name found in path: {uri}")
    return Location("gs", parts[0], "/".join(parts[1:]), uri)


def _parse_as(uri: str) -> Location:
    match = _AS_PATH.fullmatch(uri)
    if not match:
        raise ServerError(Code.INTERNAL, f"Invalid azure storage path: {uri}")
    host, container, blob = match.group(1), match.group(2), match.group(3) or ""
    account = host[:-len(_AS_HOST_SUFFIX)] if host.endswith(_AS_HOST_SUFFIX) else host
    prefix = "/".join(p for p in blob.split("/") if p)
    return Location("as", container, prefix, uri, account=account)
