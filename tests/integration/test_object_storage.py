"""Model repositories in object storage, end to end: moto's S3 server and a
GCS emulator, each a real server on 127.0.0.1 started here, a pyserver on
s3:// and gs:// repositories, tritonclient over HTTP and gRPC.

Azure's emulator (Azurite) ships only through npm, which this project does
not use: the Azure store is tested over a fake container client in
tests/unit/test_object_storage_uri.py, and the live test below is skipped."""

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import uvloop
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.kernel.errors import ServerError
from pyserver.testing import write_add_sub
from tests.integration.conftest import RunningServer
from tests.ports import free_port

boto3 = pytest.importorskip("boto3")


def wait_for_port(port: int, proc=None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the test server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def moto_server(**env):
    """`python -m moto.server` on a free port; yields 'host:port'."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def s3_endpoint():
    yield from moto_server()


@pytest.fixture(scope="module")
def s3_endpoint_with_auth():
    """A moto server that checks every request's access key (it knows none)."""
    yield from moto_server(INITIAL_NO_AUTH_ACTION_COUNT="0")


@pytest.fixture(autouse=True)
def cloud_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "TRITON_CLOUD_CREDENTIAL_PATH",
                 "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    # a cache of the test's own, so its files can be looked at
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(tmp_path / "s3-cache"))
    monkeypatch.setenv("TRITON_GCS_MOUNT_DIRECTORY", str(tmp_path / "gcs-cache"))


class S3Bucket:
    """A fresh bucket on the moto server, and what a test puts in it."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.name = f"models-{uuid.uuid4().hex[:10]}"
        self.client = boto3.client("s3", endpoint_url=f"http://{endpoint}")
        self.client.create_bucket(Bucket=self.name)

    def uri(self, prefix: str = "repo") -> str:
        return f"s3://{self.endpoint}/{self.name}/{prefix}"

    def put(self, key: str, data: bytes | str) -> None:
        self.client.put_object(Bucket=self.name, Key=key,
                               Body=data.encode() if isinstance(data, str) else data)

    def put_folder(self, local: Path, prefix: str) -> None:
        for path in sorted(Path(local).rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())

    def put_add_sub(self, tmp_path: Path, name: str, prefix: str = "repo", **kwargs) -> None:
        local = tmp_path / "staging" / uuid.uuid4().hex
        write_add_sub(local, name=name, **kwargs)
        self.put_folder(local, prefix)

    def delete_prefix(self, prefix: str) -> None:
        listed = self.client.list_objects_v2(Bucket=self.name, Prefix=prefix)
        for item in listed.get("Contents", ()):
            self.client.delete_object(Bucket=self.name, Key=item["Key"])


@pytest.fixture
def bucket(s3_endpoint):
    return S3Bucket(s3_endpoint)


class ServerOnRepositories(RunningServer):
    """RunningServer over several repositories (conftest's takes one)."""

    def __init__(self, repositories: list[str], **server_kwargs):
        import pyserver.frontends.http as http_frontend
        import pyserver.server.server as server_module

        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = server_module.Server(repositories, **server_kwargs)
        self.http = http_frontend.HttpFrontend(self.server, "127.0.0.1", 0)
        try:
            self.call(self.server.start())
            self.call(self.http.start())
        except BaseException:
            self.close()
            raise
        self.url = f"127.0.0.1:{self.http.port}"


@pytest.fixture
def start_many():
    started = []

    def start(repositories, **kwargs):
        s = ServerOnRepositories(repositories, **kwargs)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


@pytest.fixture
def start_grpc(start_server):
    """A RunningServer with a GrpcFrontend too (``s.grpc_url``)."""
    started = []

    def start(repo, **server_kwargs):
        s = start_server(repo, **server_kwargs)
        s.grpc = GrpcFrontend(s.server, "127.0.0.1", 0)
        s.call(s.grpc.start())
        s.grpc_url = f"127.0.0.1:{s.grpc.port}"
        started.append(s)
        return s

    yield start
    for s in started:
        s.call(s.grpc.stop(5))


def http_infer(url: str, name: str, value: float = 2.0, version: str = ""):
    a = np.full((1, 16), value, np.float32)
    b = np.ones((1, 16), np.float32)
    with httpclient.InferenceServerClient(url) as client:
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer(name, inputs, model_version=version)
        return result.as_numpy("OUTPUT0"), result.get_response()["model_version"]


def index(s) -> dict:
    return {(r["name"], r.get("version", "")): r for r in s.run(s.server.repository_index)}


def ready_names(s) -> set:
    return {r["name"] for r in s.run(s.server.repository_index, True)}


def files_of(root: Path) -> dict[str, int]:
    """Every file below a cache folder with its modification time (ns)."""
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns
            for p in sorted(root.rglob("*")) if p.is_file() and ".pyserver-sync" not in p.parts}


# -- S3 ------------------------------------------------------------------------


def test_s3_repository_serves_http_and_grpc(bucket, tmp_path, start_grpc):
    bucket.put_add_sub(tmp_path, "add_sub")
    # the http:// form, with the extra slashes Triton's parser drops
    s = start_grpc(f"s3://http://{bucket.endpoint}/{bucket.name}//repo/")
    out, version = http_infer(s.url, "add_sub")
    np.testing.assert_allclose(out, np.full((1, 16), 3.0))
    assert version == "1"
    with grpcclient.InferenceServerClient(s.grpc_url) as client:
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
                  grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(np.full((1, 16), 5.0, np.float32))
        inputs[1].set_data_from_numpy(np.ones((1, 16), np.float32))
        result = client.infer("add_sub", inputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), np.full((1, 16), 4.0))
        assert client.is_model_ready("add_sub")


def test_s3_model_folder_is_its_local_copy(bucket, tmp_path, start_server):
    """What reads a model's own files beside its config (the OpenAI
    frontend's chat template) finds them in the copy of a bucket's model."""
    from pyserver.frontends.openai import chat

    bucket.put_add_sub(tmp_path, "add_sub")
    bucket.put("repo/add_sub/chat_template.jinja", "{{ messages[0]['content'] }}!")
    s = start_server(bucket.uri())
    folder = s.run(s.server.model_folder, "add_sub")
    assert folder is not None and (folder / "chat_template.jinja").is_file()
    template = chat.find_template(folder)
    assert template.render([{"role": "user", "content": "hi"}], "add_sub") == "hi!"
    assert s.run(s.server.model_folder, "no_such_model") is None


def test_s3_python_model(bucket, start_server):
    """A Triton Python model (model.py) from the bucket runs in its worker."""
    bucket.put_folder(Path(__file__).parents[1] / "models" / "python" / "add_sub", "repo/add_sub")
    s = start_server(bucket.uri())
    with httpclient.InferenceServerClient(s.url) as client:
        config = client.get_model_config("add_sub")
        inputs = []
        for spec in config["input"]:
            tensor = httpclient.InferInput(spec["name"], [int(d) for d in spec["dims"]], "FP32")
            tensor.set_data_from_numpy(np.full([int(d) for d in spec["dims"]], 2.0, np.float32))
            inputs.append(tensor)
        result = client.infer("add_sub", inputs)
        np.testing.assert_allclose(result.as_numpy(config["output"][0]["name"]), 4.0)


def test_s3_poll_sees_new_model_new_version_changed_config_and_deletion(bucket, tmp_path,
                                                                        start_server):
    bucket.put_add_sub(tmp_path, "a")
    bucket.put_add_sub(tmp_path, "b")
    s = start_server(bucket.uri(), model_control_mode="poll", repository_poll_secs=0)
    assert ready_names(s) == {"a", "b"}
    cache = next((tmp_path / "s3-cache").iterdir())
    before = files_of(cache)

    bucket.put_add_sub(tmp_path, "c")  # a new model
    local = tmp_path / "v2"
    write_add_sub(local, name="a", versions=(2,))  # a new version of a
    bucket.put("repo/a/2/model.onnx", (local / "a" / "2" / "model.onnx").read_bytes())
    assert s.call(s.server.poll_repository()) == {}
    assert ready_names(s) == {"a", "b", "c"}
    assert http_infer(s.url, "a")[1] == "2"  # the latest version serves
    after = files_of(cache)
    # what did not change was not fetched again
    assert {k: after[k] for k in before} == before
    assert "a/2/model.onnx" in after and "c/config.pbtxt" in after

    # a changed config reloads that model only
    bucket.put("repo/b/config.pbtxt", (local / "a" / "config.pbtxt").read_text()
               .replace('name: "a"', 'name: "b"').replace("max_batch_size: 8", "max_batch_size: 4"))
    assert s.call(s.server.poll_repository()) == {}
    assert s.run(s.server.model_config, "b")["max_batch_size"] == 4
    assert files_of(cache)["a/config.pbtxt"] == after["a/config.pbtxt"]

    bucket.delete_prefix("repo/c/")  # a deleted model unloads and leaves the index
    s.call(s.server.poll_repository())
    assert ready_names(s) == {"a", "b"}
    assert not any(name == "c" for name, _ in index(s))
    assert not (cache / "c").exists()


def test_s3_explicit_load_after_upload(bucket, tmp_path, start_server):
    bucket.put("repo/README", "models arrive later")  # the folder exists, no model yet
    s = start_server(bucket.uri(), model_control_mode="explicit")
    assert ready_names(s) == set()
    bucket.put_add_sub(tmp_path, "late")
    with httpclient.InferenceServerClient(s.url) as client:
        client.load_model("late")
        assert client.is_model_ready("late")
        np.testing.assert_allclose(http_infer(s.url, "late", 1.0)[0], np.full((1, 16), 2.0))
        cache = next((tmp_path / "s3-cache").iterdir())
        before = files_of(cache)
        client.load_model("late")  # unchanged in the bucket: nothing fetched, no reload
        assert files_of(cache) == before
        # a new version uploaded, then loaded
        bucket.put("repo/late/3/model.onnx", (cache / "late" / "1" / "model.onnx").read_bytes())
        client.load_model("late")
        assert http_infer(s.url, "late")[1] == "3"
        assert files_of(cache)["late/config.pbtxt"] == before["late/config.pbtxt"]
        # gone from the bucket: a load fails as Triton's does
        bucket.delete_prefix("repo/late/")
        with pytest.raises(InferenceServerException, match="failed to poll from model repository"):
            client.load_model("late")


def test_s3_restart_fetches_only_what_changed(bucket, tmp_path):
    bucket.put_add_sub(tmp_path, "a")
    bucket.put_add_sub(tmp_path, "b")

    def run_once():
        s = RunningServer(bucket.uri())
        try:
            assert ready_names(s) == {"a", "b"}
            return s.server.models._remote[bucket.uri()].downloads
        finally:
            s.close()

    assert run_once() == 4
    cache = next((tmp_path / "s3-cache").iterdir())
    first = files_of(cache)
    assert run_once() == 0  # the same cache folder: nothing fetched
    assert files_of(cache) == first
    bucket.put("repo/b/config.pbtxt", (cache / "b" / "config.pbtxt").read_text() + "\n")
    assert run_once() == 1
    changed = {k for k, v in files_of(cache).items() if first[k] != v}
    assert changed == {"b/config.pbtxt"}


def test_s3_large_objects_arrive_in_ranged_parts(bucket, monkeypatch):
    from pyserver.repository.remote import RemoteRepository, s3

    monkeypatch.setattr(s3.S3Store, "RANGED_THRESHOLD", 1000)
    monkeypatch.setattr(s3.S3Store, "PART_SIZE", 300)
    blob = os.urandom(2500)
    bucket.put("repo/m/1/model.bin", blob)
    bucket.put("repo/m/config.pbtxt", "small")
    mirror = RemoteRepository(bucket.uri())
    try:
        assert mirror.sync() == {}
        assert (mirror.root / "m" / "1" / "model.bin").read_bytes() == blob
        assert mirror.downloads == 2
        # a part of another upload than the one listed is refused, not mixed in
        stale = s3.StoredObject("repo/m/1/model.bin", "0" * 32, len(blob))
        with pytest.raises(ServerError, match="Failed to get object at .*PreconditionFailed"):
            mirror.store.download(stale, mirror.root / "m" / "stale")
        assert sorted(p.name for p in (mirror.root / "m").iterdir()) == ["1", "config.pbtxt"]
    finally:
        mirror.close()


def test_s3_missing_bucket_fails_startup(s3_endpoint, bucket, tmp_path, start_server, start_many):
    missing = f"s3://{s3_endpoint}/no-such-bucket/repo"
    with pytest.raises(ServerError, match="Could not get MetaData for bucket with name no-such-bucket "
                                          "due to exception: NoSuchBucket"):
        start_server(missing)
    # without --exit-on-error the other repository's models serve
    bucket.put_add_sub(tmp_path, "ok")
    s = start_many([missing, bucket.uri()], exit_on_error=False)
    assert ready_names(s) == {"ok"}
    assert http_infer(s.url, "ok")[0][0, 0] == 3.0


def test_s3_bad_credentials(s3_endpoint_with_auth, bucket, tmp_path, start_server, start_many):
    refused = f"s3://{s3_endpoint_with_auth}/any-bucket/repo"
    with pytest.raises(ServerError, match="Unable to create S3 filesystem client. Check account "
                                          "credentials. Exception: 'InvalidAccessKeyId'"):
        start_server(refused)
    bucket.put_add_sub(tmp_path, "ok")
    s = start_many([refused, bucket.uri()], exit_on_error=False, model_control_mode="poll",
                     repository_poll_secs=0)
    assert ready_names(s) == {"ok"}
    s.call(s.server.poll_repository())  # a poll of a bucket it cannot read changes nothing
    assert ready_names(s) == {"ok"}


def test_s3_credential_file_picks_the_longest_prefix(s3_endpoint_with_auth, bucket, tmp_path,
                                                     start_server, monkeypatch):
    creds = tmp_path / "creds.json"
    # the default entry is refused by nobody (moto without auth); the bucket's
    # own entry has no key at all, so boto3's chain (the env) is not used
    creds.write_text('{"s3": {"": {"key_id": "k", "secret_key": "s", "region": "us-east-1"},'
                     f' "s3://{s3_endpoint_with_auth}": {{"key_id": "bad", "secret_key": "bad"}}}}}}')
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(creds))
    bucket.put_add_sub(tmp_path, "ok")
    s = start_server(bucket.uri())
    assert ready_names(s) == {"ok"}
    with pytest.raises(ServerError, match="Check account credentials"):
        start_server(f"s3://{s3_endpoint_with_auth}/b/repo")
    creds.write_text('{"s3": {"s3://elsewhere": {}}}')
    with pytest.raises(ServerError, match=f"Cannot match credential for path  {bucket.uri()}"):
        start_server(bucket.uri())


def test_s3_half_written_models_leave_the_others_serving(bucket, tmp_path, start_server):
    bucket.put_add_sub(tmp_path, "good")
    config = (tmp_path / "staging").glob("*/good/config.pbtxt").__next__().read_text()
    # a config and an empty version folder (a folder marker, as consoles make them)
    bucket.put("repo/empty/config.pbtxt", config.replace('"good"', '"empty"'))
    bucket.put("repo/empty/1/", b"")
    # a config and a version folder without its model file
    bucket.put("repo/nofile/config.pbtxt", config.replace('"good"', '"nofile"'))
    bucket.put("repo/nofile/1/notes.txt", "model.onnx still uploading")
    s = start_server(bucket.uri(), exit_on_error=False, model_control_mode="poll",
                     repository_poll_secs=0)
    assert ready_names(s) == {"good"}
    rows = index(s)
    for name in ("empty", "nofile"):
        row = rows[(name, "1")]
        assert row["state"] == "UNAVAILABLE"
        # the reason names the bucket, not the local cache
        assert str(tmp_path) not in row["reason"], row["reason"]
    assert bucket.name in rows[("nofile", "1")]["reason"]
    assert http_infer(s.url, "good")[0][0, 0] == 3.0
    # the upload completes: the next poll loads it
    model = next((tmp_path / "staging").glob("*/good/1/model.onnx")).read_bytes()
    bucket.put("repo/nofile/1/model.onnx", model)
    s.call(s.server.poll_repository())
    assert ready_names(s) == {"good", "nofile"}


def test_s3_failed_download_fails_that_model_only(bucket, tmp_path, start_server, monkeypatch):
    from pyserver.repository.remote import s3

    real = s3.S3Store.read_into

    def flaky(self, obj, out):
        if "/broken/" in obj.key:
            raise s3.StorageError(f"Failed to get object at {self.location.url(obj.key)} due to "
                                  "exception: InternalError, error message: injected")
        return real(self, obj, out)

    monkeypatch.setattr(s3.S3Store, "read_into", flaky)
    bucket.put_add_sub(tmp_path, "good")
    bucket.put_add_sub(tmp_path, "broken")
    s = start_server(bucket.uri(), exit_on_error=False, model_control_mode="poll",
                     repository_poll_secs=0)
    assert ready_names(s) == {"good"}
    reason = index(s)[("broken", "")]["reason"]
    assert reason.startswith(f"Failed to get object at s3://{bucket.name}/repo/broken/"), reason
    monkeypatch.setattr(s3.S3Store, "read_into", real)  # the store recovers
    s.call(s.server.poll_repository())
    assert ready_names(s) == {"good", "broken"}
    # an explicit load answers as Triton's does for a load that fails
    monkeypatch.setattr(s3.S3Store, "read_into", flaky)
    bucket.put_add_sub(tmp_path, "broken", prefix="repo2")
    e = start_server(bucket.uri("repo2"), model_control_mode="explicit")
    with httpclient.InferenceServerClient(e.url) as client:
        with pytest.raises(InferenceServerException, match="load failed for model 'broken': "
                                                           "Failed to get object at s3://"):
            client.load_model("broken")


def test_s3_registered_repository_through_the_inprocess_api(bucket, tmp_path):
    tritonserver = pytest.importorskip("tritonserver")
    local = tmp_path / "local"
    write_add_sub(local, name="local_model")
    bucket.put_add_sub(tmp_path, "remote_model")
    server = tritonserver.Server(model_repository=str(local),
                                 model_control_mode=tritonserver.ModelControlMode.EXPLICIT)
    server.start(wait_until_ready=True)
    try:
        with pytest.raises(tritonserver.InvalidArgumentError, match="repository not found"):
            server.register_model_repository(f"s3://{bucket.endpoint}/no-such-bucket")
        server.register_model_repository(bucket.uri())
        server.load("remote_model")
        assert server.model("remote_model").ready()
        server.unregister_model_repository(bucket.uri())
    finally:
        server.stop()
    # Options.model_repository takes a URI as well
    server = tritonserver.Server(tritonserver.Options(model_repository=bucket.uri()))
    server.start(wait_until_ready=True)
    try:
        assert server.model("remote_model").ready()
    finally:
        server.stop()


# -- GCS -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcs_emulator():
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    port = free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    client = storage.Client(project="test", credentials=AnonymousCredentials())
    return client.create_bucket(f"gmodels-{uuid.uuid4().hex[:10]}")


def test_gcs_repository_serves_and_polls(gcs_bucket, tmp_path, start_server):
    def upload(name):
        local = tmp_path / "staging" / name
        write_add_sub(local, name=name)
        for path in sorted(local.rglob("*")):
            if path.is_file():
                gcs_bucket.blob(f"models/{path.relative_to(local).as_posix()}") \
                    .upload_from_filename(str(path))

    upload("g1")
    uri = f"gs://{gcs_bucket.name}/models"
    s = start_server(uri, model_control_mode="poll", repository_poll_secs=0)
    assert http_infer(s.url, "g1")[0][0, 0] == 3.0
    cache = next((tmp_path / "gcs-cache").iterdir())
    before = files_of(cache)
    upload("g2")
    assert s.call(s.server.poll_repository()) == {}
    assert ready_names(s) == {"g1", "g2"}
    assert {k: v for k, v in files_of(cache).items() if k in before} == before
    # a new generation of one object: only it is fetched again
    config = (cache / "g1" / "config.pbtxt").read_text()
    gcs_bucket.blob("models/g1/config.pbtxt").upload_from_string(
        config.replace("max_batch_size: 8", "max_batch_size: 2"))
    s.call(s.server.poll_repository())
    assert s.run(s.server.model_config, "g1")["max_batch_size"] == 2
    assert files_of(cache)["g1/1/model.onnx"] == before["g1/1/model.onnx"]


def test_gcs_missing_bucket_fails_startup(gcs_emulator, monkeypatch, start_server):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    with pytest.raises(ServerError, match="Could not get MetaData for bucket with name no-such"):
        start_server("gs://no-such/models")


# -- Azure -----------------------------------------------------------------------


def test_azure_live():
    pytest.skip("Azurite (Azure's storage emulator) installs only from npm, which is not "
                "reachable here and not on PyPI or Debian; the Azure store is tested over a fake "
                "container client in tests/unit/test_object_storage_uri.py")


def test_check_repo_on_an_s3_repository(s3_endpoint, bucket, tmp_path):
    """check-repo fetches a bucket's repository as the server would and names
    each problem by its object's URI; a missing bucket is one problem."""
    bucket.put_add_sub(tmp_path, "fine")
    bucket.put_add_sub(tmp_path, "typo")
    bucket.put("repo/typo/config.pbtxt", 'name: "typo"\nplatform: "onnxruntime_onnx"\nmax_batch_sise: 4\n')
    bucket.put_add_sub(tmp_path, "missing")
    bucket.delete_prefix("repo/missing/1/")
    command = [sys.executable, "-m", "pyserver", "check-repo"]
    proc = subprocess.run([*command, bucket.uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith(f"{bucket.uri()}/typo/config.pbtxt:3: model 'typo': ") for line in lines), lines
    assert any(line.startswith(f"{bucket.uri()}/missing") and "model 'missing'" in line for line in lines), lines
    assert not any("'fine'" in line for line in lines)
    assert not any(str(tmp_path / "s3-cache") in line for line in lines), "a local cache path leaked"
    assert "2 problem(s) in 2 of 3 model(s)" in proc.stderr

    missing = f"s3://{s3_endpoint}/no-such-bucket/repo"
    proc = subprocess.run([*command, missing], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"{missing}: model '': Could not get MetaData for bucket with name "
                                  "no-such-bucket"), proc.stdout
