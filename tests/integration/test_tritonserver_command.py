"""The `tritonserver` command as the platforms that run Triton start it.

Each command line below is what a deployment passes to Triton, flag for flag
(Seldon Core v2's server config, ModelMesh's triton-2.x runtime, Triton's own
Helm charts); only the ports and the model folder are the test's. Seldon's
agent writes config.pbtxt with Go's prototext printer (one line, its own
spacing) and creates bare ones holding only the name: both must load.
"""

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pyserver.testing import add_sub_onnx, write_add_sub
from tests.ports import free_ports

# The console script pyproject.toml declares, installed beside the interpreter.
TRITONSERVER = str(Path(sys.executable).parent / "tritonserver")

# name -> (the flags the platform passes after `tritonserver`, whether the
# platform loads models itself through the repository API)
COMMAND_LINES = {
    # SeldonIO/seldon-core operator/config/serverconfigs/triton.yaml
    "seldon-core-v2": (["--model-repository={repo}", "--http-port={http}", "--grpc-port={grpc}",
                        "--log-verbose=1", "--model-control-mode=explicit",
                        "--backend-config=python,shm-default-byte-size=16777216"], True),
    # kserve/modelmesh-serving config/runtimes/triton-2.x.yaml (run by /bin/sh -c there)
    "modelmesh-triton-2.x": (["--model-repository={repo}", "--model-control-mode=explicit",
                              "--strict-model-config=false", "--strict-readiness=false",
                              "--allow-http=true", "--allow-sagemaker=false"], True),
    # triton-inference-server/server deploy/aws, deploy/gcp (and oci): poll mode
    "triton-chart-aws": (["--model-store={repo}", "--model-control-mode=poll",
                          "--repository-poll-secs=5"], False),
    # deploy/gke-marketplace-app's chart
    "triton-chart-gke-marketplace": (["--model-store={repo}", "--strict-model-config=false",
                                      "--log-verbose=0", "--allow-gpu-metrics=false"], False),
}


class TritonServerProcess:
    """`tritonserver ARGS` on free ports of 127.0.0.1, until close()."""

    def __init__(self, args: list[str], repo: Path):
        self.http, self.grpc, self.metrics = free_ports(3)
        values = {"repo": str(repo), "http": self.http, "grpc": self.grpc}
        argv = [a.format(**values) for a in args]
        # Last flag wins: these pin what the command line leaves at Triton's
        # default ports and all-interfaces addresses.
        for flag, value in (("--http-port", self.http), ("--grpc-port", self.grpc),
                            ("--metrics-port", self.metrics)):
            if not any(a.startswith(flag + "=") for a in argv):
                argv.append(f"{flag}={value}")
        argv += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                 "--metrics-address=127.0.0.1"]
        self.proc = subprocess.Popen([TRITONSERVER, *argv], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http}")

    def wait_live(self, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.client.is_server_live():
                    return
            except Exception:
                pass
            assert self.proc.poll() is None, self.proc.stdout.read()
            assert time.monotonic() < deadline, "server did not become live"
            time.sleep(0.1)

    def close(self) -> str:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, out
        return out


def _infer_add_sub(client, name="add_sub"):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.float32)
    inputs = [client_input(client, "INPUT0", a), client_input(client, "INPUT1", b)]
    result = client.infer(name, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def client_input(client, name, array):
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    tensor = module.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def test_usage_names_the_command():
    out = subprocess.run([TRITONSERVER, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: tritonserver ")
    # an unknown flag fails as argparse does, naming the command
    bad = subprocess.run([TRITONSERVER, "--model-repository=/tmp", "--no-such-flag"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "tritonserver: error: unrecognized arguments: --no-such-flag" in bad.stderr


@pytest.mark.parametrize("platform", sorted(COMMAND_LINES))
def test_platform_command_line_serves(platform, tmp_path):
    args, loads_models = COMMAND_LINES[platform]
    write_add_sub(tmp_path)
    server = TritonServerProcess(args, tmp_path)
    try:
        server.wait_live()
        client = server.client
        if loads_models:  # explicit mode: the platform's agent loads what it placed
            assert not client.is_model_ready("add_sub")
            client.load_model("add_sub")
        deadline = time.monotonic() + 30
        while not client.is_server_ready():
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.1)
        assert client.is_model_ready("add_sub")
        _infer_add_sub(client)
        _infer_add_sub(grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}"))
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics}/metrics",
                                         timeout=10).read().decode()
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2' in metrics
    finally:
        out = server.close()
    assert "successfully loaded 'add_sub' version 1" in out


# What Go's prototext.Marshal writes for a Triton ModelConfig: one line,
# `field:value` with no space after the colon, messages as `field:{...}`,
# repeated scalars as repeated fields, and (its deliberate instability) one or
# two spaces between fields.
GO_PROTOTEXT_CONFIG = (
    'name:"{name}"  platform:"onnxruntime_onnx"  max_batch_size:8  '
    'input:{{name:"INPUT0"  data_type:TYPE_FP32  dims:16}}  '
    'input:{{name:"INPUT1" data_type:TYPE_FP32 dims:16}}  '
    'output:{{name:"OUTPUT0"  data_type:TYPE_FP32  dims:16}} '
    'output:{{name:"OUTPUT1"  data_type:TYPE_FP32  dims:16}}  '
    'instance_group:{{count:1  kind:KIND_CPU}}  dynamic_batching:{{}}')


def test_seldon_written_configs_load(tmp_path):
    """Seldon's agent places each model under its own name and rewrites
    config.pbtxt with Go's printer, or writes a bare `name:` one where the
    model came without a config; explicit loads of both serve."""
    for name, config in (("printed", GO_PROTOTEXT_CONFIG.format(name="printed")),
                         ("bare", 'name:"bare"')):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.onnx").write_bytes(add_sub_onnx())
        (tmp_path / name / "config.pbtxt").write_text(config)
    args, _ = COMMAND_LINES["seldon-core-v2"]
    server = TritonServerProcess(args, tmp_path)
    try:
        server.wait_live()
        for name in ("printed", "bare"):
            server.client.load_model(name)
            _infer_add_sub(server.client, name)
        printed = server.client.get_model_config("printed")
        assert printed["dynamic_batching"] is not None and printed["max_batch_size"] == 8
        # the bare one was completed from its model file: backend, inputs, outputs
        bare = server.client.get_model_config("bare")
        assert bare["backend"] == "onnxruntime"
        assert sorted(t["name"] for t in bare["input"]) == ["INPUT0", "INPUT1"]
    finally:
        server.close()


def test_console_script_is_the_module_command(tmp_path):
    """`tritonserver` and `python -m pyserver` are one entry point: a broken
    repository is refused the same way by both."""
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text('platform: "onnxruntime_onnx" max_batch: 1')
    outputs = []
    for command in ([TRITONSERVER], [sys.executable, "-m", "pyserver"]):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        run = subprocess.run([*command, f"--model-repository={tmp_path}", "--allow-http=false",
                              "--allow-grpc=false", "--allow-metrics=false"],
                             capture_output=True, text=True, timeout=60, env=env)
        outputs.append((run.returncode, "config.pbtxt:1" in run.stderr + run.stdout))
    assert outputs[0] == outputs[1] == (1, True)
