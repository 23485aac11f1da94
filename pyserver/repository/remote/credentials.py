"""Cloud credentials, found as Triton finds them.

With TRITON_CLOUD_CREDENTIAL_PATH set, a JSON file holds them: an "s3", a
"gs" and an "as" section, each mapping a path prefix to a credential; a
repository takes the credential of the longest prefix it starts with ("" is
every path), and a path no prefix matches is an error:

    {"s3": {"": {"key_id": ..., "secret_key": ..., "region": ...,
                 "session_token": ..., "profile": ...},
            "s3://127.0.0.1:9000/": {...}},
     "gs": {"gs://bucket": "/path/to/credentials.json"},
     "as": {"": {"account_str": ..., "account_key": ..., "auth_type": ...,
                 "client_id": ...}}}

Without it, the environment (the names Triton reads): AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION and AWS_PROFILE
(boto3's own chain reads these, then ~/.aws, then the instance's role);
GOOGLE_APPLICATION_CREDENTIALS (else google-auth's default chain, else
anonymous); AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_KEY,
AZURE_STORAGE_AUTH_TYPE ("key", "managed_identity" or "default") and
AZURE_STORAGE_CLIENT_ID.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields

from pyserver.kernel.errors import Code, ServerError

CREDENTIAL_PATH_ENV = "TRITON_CLOUD_CREDENTIAL_PATH"


@dataclass(frozen=True)
class S3Credential:
    key_id: str = ""
    secret_key: str = ""
    region: str = ""
    session_token: str = ""
    profile: str = ""
    from_file: bool = False  # False: boto3's default chain decides

    @classmethod
    def from_env(cls) -> S3Credential:
        env = os.environ.get
        return cls(env("AWS_ACCESS_KEY_ID", ""), env("AWS_SECRET_ACCESS_KEY", ""),
                   env("AWS_DEFAULT_REGION", ""), env("AWS_SESSION_TOKEN", ""),
                   env("AWS_PROFILE", ""))

    @classmethod
    def from_json(cls, value) -> S3Credential:
        return cls(**_strings(cls, value), from_file=True)


@dataclass(frozen=True)
class GCSCredential:
    path: str = ""  # a service-account or authorized-user JSON file; "": the default chain

    @classmethod
    def from_env(cls) -> GCSCredential:
        return cls(os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", ""))

    @classmethod
    def from_json(cls, value) -> GCSCredential:
        return cls(value if isinstance(value, str) else "")


@dataclass(frozen=True)
class ASCredential:
    account_str: str = ""
    account_key: str = ""
    auth_type: str = ""  # "key" (also when empty), "managed_identity" or "default"
    client_id: str = ""  # a user-assigned managed identity

    @classmethod
    def from_env(cls) -> ASCredential:
        env = os.environ.get
        key = env("AZURE_STORAGE_KEY", "")
        auth_type = env("AZURE_STORAGE_AUTH_TYPE", "") or ("key" if key else "")
        return cls(env("AZURE_STORAGE_ACCOUNT", ""), key, auth_type,
                   env("AZURE_STORAGE_CLIENT_ID", ""))

    @classmethod
    def from_json(cls, value) -> ASCredential:
        return cls(**_strings(cls, value))


_KINDS = {"s3": S3Credential, "gs": GCSCredential, "as": ASCredential}


def _strings(cls, value) -> dict:
    if not isinstance(value, dict):
        return {}
    names = {f.name for f in fields(cls)} - {"from_file"}
    return {k: v for k, v in value.items() if k in names and isinstance(v, str)}


def credential_for(scheme: str, uri: str):
    """The credential for a repository URI of ``scheme`` ("s3", "gs", "as")."""
    kind = _KINDS[scheme]
    path = os.environ.get(CREDENTIAL_PATH_ENV)
    if path is None:
        return kind.from_env()
    section = read_credential_file(path).get(scheme)
    prefixes = section if isinstance(section, dict) else {}
    # the longest prefix the path starts with, as Triton sorts its cache
    for prefix in sorted(prefixes, key=len, reverse=True):
        if uri.startswith(prefix):
            return kind.from_json(prefixes[prefix])
    raise ServerError(Code.NOT_FOUND, f"Cannot match credential for path  {uri}")


def read_credential_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ServerError(Code.INTERNAL, f"failed to open text file for read {path}: "
                          f"{err.strerror or err}") from None
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise ServerError(Code.INVALID_ARG,
                          f"failed to parse the cloud credential file {path}: {err}") from None
    if not isinstance(doc, dict):
        raise ServerError(Code.INVALID_ARG,
                          f"failed to parse the cloud credential file {path}: not a JSON object")
    return doc
