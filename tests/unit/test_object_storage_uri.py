"""Object-storage repositories without a server: URIs parsed as Triton
parses them, credentials found as Triton finds them, the mirror's sync over
an in-memory store, and the Azure store over a fake container client."""

import json
import threading
from pathlib import Path

import pytest

from pyserver.kernel.errors import Code, ServerError
from pyserver.repository.remote import RemoteRepository, is_remote, parse
from pyserver.repository.remote.credentials import (
    ASCredential,
    GCSCredential,
    S3Credential,
    credential_for,
)
from pyserver.repository.remote.store import ObjectStore, StorageError, StoredObject, import_sdk

# -- URIs ------------------------------------------------------------------------


@pytest.mark.parametrize("uri, bucket, prefix, endpoint", [
    ("s3://bucket/path/to/repo", "bucket", "path/to/repo", ""),
    ("s3://bucket", "bucket", "", ""),
    ("s3://bucket/", "bucket", "", ""),
    ("s3:////bucket//a///b//", "bucket", "a/b", ""),
    ("s3://localhost:9000/bucket/models", "bucket", "models", "http://localhost:9000"),
    ("s3://127.0.0.1:9000/bucket", "bucket", "", "http://127.0.0.1:9000"),
    ("s3://http://minio.local:9000/my-bucket/a/b", "my-bucket", "a/b", "http://minio.local:9000"),
    ("s3://https://minio.local:443/bucket.v2/m", "bucket.v2", "m", "https://minio.local:443"),
    ("s3://https://minio.local:443//bucket//m/", "bucket", "m", "https://minio.local:443"),
    # no port: the host is read as the bucket, as Triton's fallback does
    ("s3://minio.local/bucket", "minio.local", "bucket", ""),
])
def test_s3_uris(uri, bucket, prefix, endpoint):
    loc = parse(uri)
    assert (loc.scheme, loc.bucket, loc.prefix, loc.endpoint) == ("s3", bucket, prefix, endpoint)
    assert loc.uri == uri


def test_bad_s3_uris():
    with pytest.raises(ServerError, match="Invalid bucket name: ''"):
        parse("s3://")
    with pytest.raises(ServerError, match="Invalid bucket name"):
        parse("s3:///")


def test_gcs_uris():
    loc = parse("gs://bucket/a//b/")
    assert (loc.scheme, loc.bucket, loc.prefix) == ("gs", "bucket", "a/b")
    assert parse("gs://bucket").prefix == ""
    with pytest.raises(ServerError, match="No bucket name found in path: gs://"):
        parse("gs://")


def test_azure_uris():
    loc = parse("as://account/container/path/to/repo")
    assert (loc.scheme, loc.account, loc.bucket, loc.prefix) == ("as", "account", "container",
                                                                 "path/to/repo")
    loc = parse("as://acct.blob.core.windows.net/models")
    assert (loc.account, loc.bucket, loc.prefix) == ("acct", "models", "")
    for bad in ("as://account", "as://account/", "as:///container/x"):
        with pytest.raises(ServerError, match=f"Invalid azure storage path: {bad}"):
            parse(bad)


def test_is_remote_and_urls():
    assert is_remote("s3://b") and is_remote("gs://b") and is_remote("as://a/c")
    assert not is_remote("/models") and not is_remote("models") and not is_remote(Path("s3://b"))
    assert parse("s3://127.0.0.1:9000/b/repo").url("repo/m/config.pbtxt") == \
        "s3://b/repo/m/config.pbtxt"
    assert parse("s3://b/repo").url() == "s3://b/repo"
    assert parse("as://acct/c/p").url("p/x") == "as://acct/c/p/x"
    assert parse("gs://b").key("m/1") == "m/1" and parse("gs://b/r").key("m") == "r/m"


# -- credentials -------------------------------------------------------------------


@pytest.fixture
def no_cloud_env(monkeypatch):
    for name in ("TRITON_CLOUD_CREDENTIAL_PATH", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
                 "AZURE_STORAGE_AUTH_TYPE", "AZURE_STORAGE_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_credentials_from_the_environment(no_cloud_env):
    env = no_cloud_env
    env.setenv("AWS_ACCESS_KEY_ID", "id")
    env.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    env.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    env.setenv("AWS_PROFILE", "dev")
    assert credential_for("s3", "s3://b") == S3Credential("id", "secret", "eu-west-1", "", "dev")
    env.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json")
    assert credential_for("gs", "gs://b") == GCSCredential("/keys/sa.json")
    assert credential_for("as", "as://a/c") == ASCredential()
    env.setenv("AZURE_STORAGE_KEY", "k")  # a key and no auth type: "key", as Triton infers
    assert credential_for("as", "as://a/c").auth_type == "key"
    env.setenv("AZURE_STORAGE_AUTH_TYPE", "managed_identity")
    env.setenv("AZURE_STORAGE_CLIENT_ID", "cid")
    assert credential_for("as", "as://a/c") == ASCredential("", "k", "managed_identity", "cid")


def test_credential_file_longest_prefix(no_cloud_env, tmp_path):
    path = tmp_path / "creds.json"
    path.write_text(json.dumps({
        "s3": {"": {"key_id": "default"},
               "s3://bucket": {"key_id": "bucket", "secret_key": "s", "region": "r",
                               "session_token": "t", "profile": "p"},
               "s3://bucket/special": {"key_id": "special", "unknown": "ignored"}},
        "gs": {"gs://b": "/keys/b.json"},
        "as": {"as://acct": {"account_str": "other", "account_key": "k"}}}))
    no_cloud_env.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    no_cloud_env.setenv("AWS_ACCESS_KEY_ID", "from-env")  # the file wins over the environment
    assert credential_for("s3", "s3://bucket/special/models").key_id == "special"
    assert credential_for("s3", "s3://bucket/models") == S3Credential("bucket", "s", "r", "t", "p",
                                                                      from_file=True)
    assert credential_for("s3", "s3://elsewhere").key_id == "default"
    assert credential_for("gs", "gs://b/models") == GCSCredential("/keys/b.json")
    assert credential_for("as", "as://acct/c") == ASCredential("other", "k")
    with pytest.raises(ServerError, match="Cannot match credential for path  gs://other") as info:
        credential_for("gs", "gs://other/models")
    assert info.value.code == Code.NOT_FOUND


def test_credential_file_errors(no_cloud_env, tmp_path):
    no_cloud_env.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(tmp_path / "missing.json"))
    with pytest.raises(ServerError, match="failed to open text file for read .*missing.json"):
        credential_for("s3", "s3://b")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    no_cloud_env.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(bad))
    with pytest.raises(ServerError, match="failed to parse the cloud credential file"):
        credential_for("s3", "s3://b")
    bad.write_text("{}")  # no "s3" section: no prefix matches
    with pytest.raises(ServerError, match="Cannot match credential for path  s3://b"):
        credential_for("s3", "s3://b")


def test_a_missing_sdk_says_what_to_install():
    with pytest.raises(StorageError, match=r"s3:// file-system not supported: install its client "
                                           r"\(pip install 'pyserver\[s3\]'\)"):
        import_sdk("no_such_sdk_module", "s3", "s3")


# -- the mirror over an in-memory store ----------------------------------------------


class MemoryStore(ObjectStore):
    """A bucket in a dict: key -> bytes; a tag per write; failures on demand."""

    def __init__(self, location):
        super().__init__(location)
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.gets: list[str] = []
        self.failing: set[str] = set()
        self.missing = False
        self._writes = 0
        self._lock = threading.Lock()

    def put(self, key, data=b"x"):
        self._writes += 1
        self.objects[key] = (data, f"tag{self._writes}")

    def check(self):
        if self.missing:
            raise StorageError("Could not get MetaData for bucket with name b due to exception: "
                               "NoSuchBucket, error message: Not Found")

    def list(self, prefix):
        self.check()
        return [StoredObject(k, tag, len(data)) for k, (data, tag) in sorted(self.objects.items())
                if k.startswith(prefix)]

    def read_into(self, obj, out):
        with self._lock:
            self.gets.append(obj.key)
        if obj.key in self.failing:
            raise StorageError(f"Failed to get object at {self.location.url(obj.key)} due to "
                               "exception: InternalError, error message: boom")
        data, tag = self.objects[obj.key]
        out.write(data)
        return tag


@pytest.fixture
def mirror(monkeypatch):
    monkeypatch.delenv("TRITON_AWS_MOUNT_DIRECTORY", raising=False)
    store = MemoryStore(parse("s3://b/repo"))
    m = RemoteRepository("s3://b/repo", store=store, download_threads=4)
    m.fake = store
    yield m
    m.close()


def test_sync_fetches_each_object_once_until_it_changes(mirror):
    store = mirror.fake
    store.put("repo/a/config.pbtxt", b"config a")
    store.put("repo/a/1/model.onnx", b"onnx a")
    store.put("repo/b/config.pbtxt", b"config b")
    store.put("repo/README.md", b"not a model")  # a file at the root
    store.put("repo/.hidden/x", b"no model either")
    assert mirror.sync() == {}
    assert sorted(store.gets) == ["repo/a/1/model.onnx", "repo/a/config.pbtxt", "repo/b/config.pbtxt"]
    assert (mirror.root / "a" / "1" / "model.onnx").read_bytes() == b"onnx a"
    assert set(mirror.models()) == {"a", "b"}
    store.gets.clear()
    mtime = (mirror.root / "a" / "1" / "model.onnx").stat().st_mtime_ns
    assert mirror.sync() == {} and store.gets == []
    store.put("repo/a/config.pbtxt", b"config a, changed")
    assert mirror.sync() == {}
    assert store.gets == ["repo/a/config.pbtxt"]
    assert (mirror.root / "a" / "config.pbtxt").read_bytes() == b"config a, changed"
    assert (mirror.root / "a" / "1" / "model.onnx").stat().st_mtime_ns == mtime
    assert mirror.downloads == 4


def test_sync_removes_what_left_the_bucket(mirror):
    store = mirror.fake
    store.put("repo/a/config.pbtxt")
    store.put("repo/a/1/model.onnx")
    store.put("repo/a/2/model.onnx")
    store.put("repo/b/config.pbtxt")
    mirror.sync()
    del store.objects["repo/a/2/model.onnx"]
    del store.objects["repo/b/config.pbtxt"]
    mirror.sync()
    assert not (mirror.root / "a" / "2").exists()
    assert (mirror.root / "a" / "1" / "model.onnx").exists()
    assert not (mirror.root / "b").exists() and set(mirror.models()) == {"a"}
    assert not (mirror.root / ".pyserver-sync" / "b.json").exists()


def test_folder_markers_make_empty_folders_and_odd_keys_are_skipped(mirror):
    store = mirror.fake
    store.put("repo/a/config.pbtxt")
    store.put("repo/a/1/", b"")
    store.put("repo/a/../escape", b"never")
    store.put("repo/a//double", b"never")
    assert mirror.sync() == {}
    assert (mirror.root / "a" / "1").is_dir() and not any((mirror.root / "a" / "1").iterdir())
    assert not (mirror.root / "escape").exists() and not (mirror.root / "a" / "double").exists()


def test_a_failed_download_fails_only_that_model_and_is_retried(mirror):
    store = mirror.fake
    store.put("repo/a/config.pbtxt")
    store.put("repo/b/config.pbtxt")
    store.put("repo/b/1/model.onnx")
    store.failing.add("repo/b/1/model.onnx")
    errors = mirror.sync()
    assert errors == {"b": "Failed to get object at s3://b/repo/b/1/model.onnx due to exception: "
                           "InternalError, error message: boom"}
    assert (mirror.root / "a" / "config.pbtxt").exists()
    assert not (mirror.root / "b" / "1" / "model.onnx").exists()
    assert not list((mirror.root / "b" / "1").iterdir())  # no half-written file left behind
    store.failing.clear()
    store.gets.clear()
    assert mirror.sync() == {}
    assert store.gets == ["repo/b/1/model.onnx"]  # only what had not arrived


def test_a_named_sync_touches_only_that_model(mirror):
    store = mirror.fake
    store.put("repo/a/config.pbtxt")
    store.put("repo/b/config.pbtxt")
    assert mirror.list_models() == ["a", "b"] and store.gets == []
    assert mirror.sync(["b"]) == {}
    assert store.gets == ["repo/b/config.pbtxt"]
    assert not (mirror.root / "a").exists() and set(mirror.models()) == {"a", "b"}
    del store.objects["repo/b/config.pbtxt"]
    mirror.sync(["b"])
    assert set(mirror.models()) == {"a"} and not (mirror.root / "b").exists()


def test_an_unreachable_bucket_raises_and_keeps_the_listing(mirror):
    store = mirror.fake
    store.put("repo/a/config.pbtxt")
    mirror.sync()
    store.missing = True
    with pytest.raises(ServerError, match="Could not get MetaData for bucket with name b"):
        mirror.sync()
    assert set(mirror.models()) == {"a"} and (mirror.root / "a" / "config.pbtxt").exists()
    assert not mirror.exists()


def test_the_mount_directory_is_kept_and_reused(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(tmp_path))
    store = MemoryStore(parse("s3://b/repo"))
    store.put("repo/a/config.pbtxt")
    first = RemoteRepository("s3://b/repo", store=store)
    first.sync()
    first.close()
    assert (first.root / "a" / "config.pbtxt").exists() and first.root.parent == tmp_path
    second = RemoteRepository("s3://b/repo", store=store)
    assert second.root == first.root
    second.sync()
    second.close()
    assert store.gets == ["repo/a/config.pbtxt"]  # the second run fetched nothing
    other = RemoteRepository("s3://b/other", store=store)  # another folder: its own cache
    assert other.root != first.root
    other.close()


def test_a_temporary_cache_goes_with_the_mirror(monkeypatch):
    monkeypatch.delenv("TRITON_GCS_MOUNT_DIRECTORY", raising=False)
    store = MemoryStore(parse("gs://b"))
    store.put("m/config.pbtxt")
    m = RemoteRepository("gs://b", store=store)
    m.sync()
    assert (m.root / "m" / "config.pbtxt").exists()
    m.close()
    assert not m.root.exists()


# -- Azure over a fake container client ----------------------------------------------


class FakeBlob:
    def __init__(self, name, etag, size):
        self.name, self.etag, self.size = name, etag, size


class FakeDownload:
    def __init__(self, data, etag):
        self.data = data
        self.properties = FakeBlob("", etag, len(data))

    def readinto(self, out):
        out.write(self.data)
        return len(self.data)


class FakeContainer:
    def __init__(self, blobs, error=None):
        self.blobs = blobs  # name -> (bytes, etag)
        self.error = error

    def get_container_properties(self):
        if self.error is not None:
            raise self.error

    def list_blobs(self, name_starts_with=""):
        if self.error is not None:
            raise self.error
        return [FakeBlob(n, f'"{e}"', len(d)) for n, (d, e) in sorted(self.blobs.items())
                if n.startswith(name_starts_with)]

    def download_blob(self, name):
        return FakeDownload(*self.blobs[name])


def test_azure_store_lists_and_downloads(tmp_path, monkeypatch):
    pytest.importorskip("azure.storage.blob")
    from pyserver.repository.remote.azure import AzureStore
    monkeypatch.delenv("TRITON_AZURE_MOUNT_DIRECTORY", raising=False)
    container = FakeContainer({"repo/m/config.pbtxt": (b"cfg", "0x1"),
                               "repo/m/1/model.onnx": (b"onnx", "0x2")})
    loc = parse("as://acct/models/repo")
    store = AzureStore(loc, ASCredential(), container_client=container)
    store.check()
    assert store.list("repo/") == [StoredObject("repo/m/1/model.onnx", "0x2", 4),
                                   StoredObject("repo/m/config.pbtxt", "0x1", 3)]
    m = RemoteRepository("as://acct/models/repo", store=store)
    assert m.sync() == {}
    assert (m.root / "m" / "1" / "model.onnx").read_bytes() == b"onnx"
    container.blobs["repo/m/config.pbtxt"] = (b"cfg2", "0x3")
    m.sync()
    assert m.downloads == 3
    m.close()


def test_azure_store_errors_and_credentials():
    pytest.importorskip("azure.storage.blob")
    from azure.core.exceptions import ClientAuthenticationError, ResourceNotFoundError

    from pyserver.repository.remote.azure import AzureStore, account_name, credential_object
    loc = parse("as://acct/missing/repo")
    store = AzureStore(loc, ASCredential(),
                       container_client=FakeContainer({}, ResourceNotFoundError("no container")))
    with pytest.raises(StorageError, match="Could not get MetaData for container with name missing"):
        store.check()
    with pytest.raises(StorageError, match="Could not get MetaData for container"):
        store.list("repo/")
    store = AzureStore(loc, ASCredential(),
                       container_client=FakeContainer({}, ClientAuthenticationError("bad key")))
    with pytest.raises(StorageError, match="Unable to create Azure filesystem client. Check account "
                                           "credentials. bad key"):
        store.check()
    assert account_name(loc, ASCredential()) == "acct"
    assert account_name(loc, ASCredential(account_str="other")) == "other"
    assert credential_object(ASCredential(account_key="k", auth_type="key"), "acct") == \
        {"account_name": "acct", "account_key": "k"}
    assert credential_object(ASCredential(), "acct") is None  # anonymous


# -- the S3 and GCS clients' own refusals (no server reached) ------------------------


def test_s3_without_any_credential_says_so(no_cloud_env, tmp_path):
    pytest.importorskip("boto3")
    from pyserver.repository.remote.s3 import S3Store
    no_cloud_env.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask
    no_cloud_env.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    no_cloud_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    store = S3Store(parse("s3://127.0.0.1:1/bucket/repo"), S3Credential())
    with pytest.raises(StorageError, match="Unable to create S3 filesystem client. Check account "
                                           "credentials. Exception: 'NoCredentialsError'"):
        store.check()


def test_gcs_with_an_unreadable_credential_file(no_cloud_env, tmp_path):
    pytest.importorskip("google.cloud.storage")
    from pyserver.repository.remote.gcs import GCSStore
    with pytest.raises(StorageError, match="Unable to create GCS client. Check account credentials."):
        GCSStore(parse("gs://bucket/repo"), GCSCredential(str(tmp_path / "missing.json")))
