"""The command lines in deploy/ start pyserver and its probes answer.

Each test takes the container's command line out of the YAML (KServe's
ClusterServingRuntime, ModelMesh's ServingRuntime, the Helm chart's rendered
Deployment) and runs it as it stands, with three substitutions only: the
command name `tritonserver` becomes the console script beside this
interpreter (or `python -m pyserver` where it is missing), the model folder
becomes a temporary repository, and each port number becomes a free port (a
port the file leaves at the server's default gets its flag, after the test
has checked that the default is the port the file names); loopback address
flags come last, so the test's servers listen on 127.0.0.1 only. Then the probes,
the ports and the metrics path the file declares are asked. A file that
names no command (KServe's runtime) runs through the image's entrypoint
script, docker/entrypoint.sh, with the console script's folder on PATH.
"""

import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pyserver.cli import build_parser
from pyserver.testing import write_add_sub
from tests.ports import free_port, free_ports

from .manifests import DEPLOY, ROOT, by_kind, load_one, pod_argv, render_chart
from .test_manifests import CHART_VALUES

_SCRIPT = Path(sys.executable).parent / "tritonserver"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "pyserver"]
PORT_FLAGS = ("--http-port", "--grpc-port", "--metrics-port")
REPOSITORY_FLAGS = ("--model-repository", "--model-store")
# Appended after the file's flags (the last one wins): the test's servers
# listen on loopback only, where a pod's listen on every interface.
LOOPBACK = ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]


def server_default(flag: str):
    """The value pyserver takes for a flag a command line leaves out."""
    return build_parser("tritonserver").get_default(flag.lstrip("-").replace("-", "_"))


def rewrite(args: list[str], repo: Path | None, ports: dict[int, int]) -> list[str]:
    """tritonserver's flags with the repository (unless None) and the port
    numbers replaced."""
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        if eq and flag in REPOSITORY_FLAGS and repo is not None:
            arg = f"{flag}={repo}"
        elif eq and flag in PORT_FLAGS:
            arg = f"{flag}={ports[int(value)]}"
        out.append(arg)
    return out


def defaulted_ports(args: list[str], ports: dict[int, int]) -> list[str]:
    """Flags for the ports the command line leaves at the server's default
    (the default checked against `ports`, the file's own numbers)."""
    extra = []
    for flag in PORT_FLAGS:
        if not any(a.startswith(flag + "=") for a in args):
            default = server_default(flag)
            assert default in ports, f"{flag} defaults to {default}, not a port the file names"
            extra.append(f"{flag}={ports[default]}")
    return extra


class Process:
    """A server process; its output in a file, shown when it fails."""

    def __init__(self, argv: list[str], log: Path, env: dict | None = None):
        self.log = log
        self.out = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        self.out.flush()
        return self.log.read_text()

    def get(self, port: int, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_for(self, port: int, path: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"server exited {self.proc.returncode}:\n{self.output()}"
            try:
                if self.get(port, path)[0] == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{path} never answered 200:\n{self.output()}"
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.out.close()
        assert self.proc.returncode == 0, self.output()


def _infer(client, model: str = "add_sub") -> None:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def _metrics_count(server: Process, port: int, path: str) -> str:
    status, body = server.get(port, path)
    assert status == 200
    return body.decode()


# -- KServe ------------------------------------------------------------------

@pytest.mark.parametrize("storage_uri", [True, False], ids=["storageUri", "no-storageUri"])
def test_kserve_runtime_command(tmp_path, storage_uri):
    runtime = load_one(DEPLOY / "kserve" / "clusterservingruntime.yaml")
    (container,) = runtime["spec"]["containers"]
    # no command: the image's entrypoint (docker/entrypoint.sh) gets the
    # args, `tritonserver` first, and runs them; it finds tritonserver on
    # PATH, as in the image
    assert _SCRIPT.exists(), "make install puts the tritonserver script beside the interpreter"
    flags = pod_argv(container)
    assert flags[:2] == [str(ROOT / "docker" / "entrypoint.sh"), "tritonserver"]
    if not storage_uri:
        # what KServe's Triton defaults (server-type tritonserver) append to
        # an InferenceService without storageUri: models come through the API
        flags.append("--model-control-mode=explicit")
    metrics_port = int(runtime["spec"]["annotations"]["prometheus.kserve.io/port"])
    metrics_path = runtime["spec"]["annotations"]["prometheus.kserve.io/path"]
    ports = dict(zip((8080, 9000, metrics_port), free_ports(3)))
    if storage_uri:
        write_add_sub(tmp_path / "models")  # what the storage initializer put in /mnt/models
    else:
        (tmp_path / "models").mkdir()
    argv = rewrite(flags, tmp_path / "models", ports)
    argv += defaulted_ports(argv, {metrics_port: ports[metrics_port]})
    env = dict(os.environ, PATH=f"{_SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    server = Process([*argv, *LOOPBACK], tmp_path / "server.log", env=env)
    try:
        http, grpc, metrics = ports[8080], ports[9000], ports[metrics_port]
        server.wait_for(http, "/v2/health/live")
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        if not storage_uri:
            write_add_sub(tmp_path / "models")
            grpc_client.load_model("add_sub")
        server.wait_for(http, "/v2/health/ready")
        assert grpc_client.is_server_live() and grpc_client.is_server_ready()
        assert grpc_client.is_model_ready("add_sub")
        _infer(httpclient.InferenceServerClient(f"127.0.0.1:{http}"))
        _infer(grpc_client)
        text = _metrics_count(server, metrics, metrics_path)
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2' in text
    finally:
        server.close()


# -- ModelMesh ---------------------------------------------------------------

# What ModelMesh's Triton adapter (kserve/modelmesh-runtime-adapter,
# model-mesh-triton-adapter/server) does against the runtime: RuntimeStatus
# asks ServerReady, unloads whatever RepositoryIndex(ready) lists and reads
# ServerMetadata's version; LoadModel lays the pulled model out as
# <root>/<model id>/ (a lone file symlinked as 1/model.onnx, or a Triton
# folder whose config.pbtxt it rewrites without its name) and calls
# RepositoryModelLoad(model id); inference carries the id as model_name;
# UnloadModel calls RepositoryModelUnload.
MODEL_IDS = ("add-sub-file__isvc-3f2a9c41d7", "add-sub-folder__isvc-8be01d5a62")


def _adapter_layout(root: Path, pulled: Path, model_id: str, as_folder: bool) -> None:
    from pyserver.testing import add_sub_onnx

    source = pulled / model_id
    source.mkdir(parents=True)
    target = root / model_id
    (target / "1").mkdir(parents=True)
    if as_folder:
        # a Triton model folder, its config.pbtxt as the adapter writes it back:
        # Go's prototext, the name field removed
        (source / "1").mkdir()
        (source / "1" / "model.onnx").write_bytes(add_sub_onnx())
        (target / "config.pbtxt").write_text(
            'platform:"onnxruntime_onnx"  max_batch_size:8  '
            'input:{name:"INPUT0"  data_type:TYPE_FP32  dims:16}  input:{name:"INPUT1"  data_type:TYPE_FP32  dims:16}  '
            'output:{name:"OUTPUT0"  data_type:TYPE_FP32  dims:16}  output:{name:"OUTPUT1"  data_type:TYPE_FP32  dims:16}')
        (target / "1" / "model.onnx").symlink_to(source / "1" / "model.onnx")
    else:
        # a lone ONNX file: no config at all (--strict-model-config=false completes it)
        (source / "model.onnx").write_bytes(add_sub_onnx())
        (target / "1" / "model.onnx").symlink_to(source / "model.onnx")


def test_modelmesh_runtime_command(tmp_path):
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    runtime = load_one(DEPLOY / "modelmesh" / "servingruntime.yaml")
    spec = runtime["spec"]
    (container,) = spec["containers"]
    shell, (dash_c, script) = container["command"][0], container["args"]
    assert dash_c == "-c"
    # the file's ports: the adapter's management and data endpoint (gRPC),
    # the liveness probe (HTTP); the metrics port stays Triton's 8002
    grpc_file = spec["builtInAdapter"]["runtimeManagementPort"]
    assert spec["grpcDataEndpoint"] == f"port:{grpc_file}"
    probe = container["livenessProbe"]["httpGet"]
    ports = dict(zip((probe["port"], grpc_file, 8002), free_ports(3)))
    steps = [s.strip() for s in script.split(";") if s.strip()]
    assert steps[-1].startswith("exec tritonserver ")
    exec_flags = shlex.split(steps[-1])[2:]
    assert "--model-repository=/models/_triton_models" in exec_flags
    # the same shell line, with the folder, the command and the ports replaced
    models = tmp_path / "models" / "_triton_models"
    (tmp_path / "models").mkdir()
    line = script.replace("/models/_triton_models", str(models))
    line = line.replace("exec tritonserver ", "exec " + shlex.join(COMMAND) + " ", 1)
    line = line.rstrip() + " " + shlex.join(defaulted_ports(exec_flags, ports) + LOOPBACK)
    server = Process([shell, "-c", line], tmp_path / "server.log")
    try:
        http, grpc, metrics = ports[probe["port"]], ports[grpc_file], ports[8002]
        server.wait_for(http, probe["path"])
        assert models.is_dir()  # the line's mkdir ran
        import grpc as grpc_module
        channel = grpc_module.insecure_channel(f"127.0.0.1:{grpc}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        # RuntimeStatus: ready with nothing loaded (strict readiness off)
        assert stub.ServerReady(service_pb2.ServerReadyRequest()).ready
        assert list(stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models) == []
        assert stub.ServerMetadata(service_pb2.ServerMetadataRequest()).version
        # LoadModel, for both layouts; inference by model id
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        for model_id, as_folder in zip(MODEL_IDS, (False, True)):
            _adapter_layout(models, tmp_path / "models" / "pulled", model_id, as_folder)
            stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name=model_id))
            assert client.is_model_ready(model_id)
            _infer(client, model_id)
        index = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
        assert sorted(m.name for m in index.models) == sorted(MODEL_IDS)
        text = _metrics_count(server, metrics, "/metrics")
        for model_id in MODEL_IDS:
            assert f'nv_inference_request_success{{model="{model_id}",version="1"}} 1' in text
        # UnloadModel
        for model_id in MODEL_IDS:
            stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name=model_id))
        deadline = time.monotonic() + 30
        while stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models:
            assert time.monotonic() < deadline, "the models did not unload"
            time.sleep(0.1)
        channel.close()
    finally:
        server.close()


# -- the Helm chart ----------------------------------------------------------

@pytest.mark.parametrize("case", ["pvc", "everything"])
def test_chart_deployment_command(tmp_path, case):
    objects = render_chart(CHART_VALUES[case])
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["tritonserver"]
    flags = container["args"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    ports = dict(zip(named.values(), free_ports(len(named))))
    write_add_sub(tmp_path / "models")
    argv = rewrite(flags, tmp_path / "models", ports)
    assert defaulted_ports(argv, ports) == []  # the chart names every port
    server = Process([*COMMAND, *argv, *LOOPBACK], tmp_path / "server.log")
    try:
        def port_of(probe):
            port = probe["httpGet"]["port"]
            return ports[named[port] if isinstance(port, str) else port]

        startup = container["startupProbe"]
        server.wait_for(port_of(startup), startup["httpGet"]["path"])
        for probe in (container["livenessProbe"], container["readinessProbe"]):
            assert server.get(port_of(probe), probe["httpGet"]["path"])[0] == 200
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[named['grpc']]}")
        assert client.is_server_ready() and client.is_model_ready("add_sub")
        _infer(client)
        (monitor,) = by_kind(render_chart(CHART_VALUES["everything"]), "ServiceMonitor")
        (endpoint,) = monitor["spec"]["endpoints"]
        text = _metrics_count(server, ports[named[endpoint["port"]]], endpoint["path"])
        assert 'nv_inference_request_success{model="add_sub",version="1"} 1' in text
        assert "nv_inference_queue_duration_us" in text  # what the autoscaling rule reads
    finally:
        server.close()


def test_chart_object_storage_command(tmp_path):
    """The chart on an s3:// repository: the Deployment's command line and
    environment (its own variables, and the credentials Secret's keys as
    envFrom gives them) against moto's S3 server on 127.0.0.1."""
    pytest.importorskip("moto")
    boto3 = pytest.importorskip("boto3")
    import socket

    s3_port = free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(s3_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", s3_port), timeout=0.5).close()
                break
            except OSError:
                assert moto.poll() is None and time.monotonic() < deadline, "moto did not start"
                time.sleep(0.05)
        credentials = {"AWS_ACCESS_KEY_ID": "pyserver-test", "AWS_SECRET_ACCESS_KEY": "secret",
                       "AWS_DEFAULT_REGION": "us-east-1"}
        objects = render_chart({"modelRepository": {
            "uri": f"s3://127.0.0.1:{s3_port}/models/repository",
            "credentials": {"env": credentials}}})
        (deployment,) = by_kind(objects, "Deployment")
        (secret,) = by_kind(objects, "Secret")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        # what the bucket holds: a Triton repository under repository/
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}",
                          aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        write_add_sub(tmp_path / "staging")
        for path in sorted((tmp_path / "staging").rglob("*")):
            if path.is_file():
                s3.put_object(Bucket="models", Key=f"repository/{path.relative_to(tmp_path / 'staging')}",
                              Body=path.read_bytes())
        # the container's environment: its env entries, then envFrom's Secret
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TRITON_"))}
        env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
        env["TMPDIR"] = str(tmp_path)  # the pod's /tmp emptyDir
        (source,) = container["envFrom"]
        assert source["secretRef"]["name"] == secret["metadata"]["name"]
        env.update(secret["stringData"])
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        ports = dict(zip(named.values(), free_ports(len(named))))
        argv = rewrite(container["args"], None, ports)
        assert f"--model-repository=s3://127.0.0.1:{s3_port}/models/repository" in argv
        server = Process([*COMMAND, *argv, *LOOPBACK], tmp_path / "server.log", env=env)
        try:
            server.wait_for(ports[named["http"]], container["readinessProbe"]["httpGet"]["path"])
            _infer(httpclient.InferenceServerClient(f"127.0.0.1:{ports[named['http']]}"))
        finally:
            server.close()
    finally:
        moto.terminate()
        moto.wait(30)


@pytest.mark.parametrize("source", ["kserve", "modelmesh", "helm"])
def test_command_line_parses(source):
    """Each file's flags are ones pyserver's command line takes (the quick
    form of the tests above: a rejected flag names itself here)."""
    if source == "kserve":
        command, *args = load_one(DEPLOY / "kserve" / "clusterservingruntime.yaml")["spec"]["containers"][0]["args"]
        assert command == "tritonserver"
    elif source == "modelmesh":
        script = load_one(DEPLOY / "modelmesh" / "servingruntime.yaml")["spec"]["containers"][0]["args"][1]
        args = shlex.split(script.split(";")[-1])[2:]
    else:
        deployment = by_kind(render_chart(CHART_VALUES["everything"]), "Deployment")[0]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = build_parser("tritonserver").parse_args(args)
    assert parsed.model_repository

