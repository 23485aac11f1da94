"""`python -m pyserver` as a user runs it: the bundled example repository,
and a broken repository that must explain itself and exit non-zero."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serves_the_example_repository():
    port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserver", "--model-repository", str(ROOT / "examples/model_repository"),
         "--http-port", str(port), "--http-address", "127.0.0.1",
         "--grpc-port", str(grpc_port), "--grpc-address", "127.0.0.1",
         "--metrics-port", str(metrics_port), "--metrics-address", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.is_server_ready():
                    break
            except Exception:
                pass
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.1)
        # the README's snippet
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.float32)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        # the same over gRPC, and the metrics endpoint counts both
        import tritonclient.grpc as grpcclient
        gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        ginputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
                   grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        ginputs[0].set_data_from_numpy(a)
        ginputs[1].set_data_from_numpy(b)
        np.testing.assert_array_equal(gclient.infer("add_sub", ginputs).as_numpy("OUTPUT0"), a + b)
        import urllib.request
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
        assert 'nv_inference_request_success{model="add_sub",version="1"} 2' in scrape
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "successfully loaded 'add_sub' version 1" in out


def test_config_error_exits_with_file_and_line(tmp_path):
    model = tmp_path / "bad"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "bad"\nplatform: "onnxruntime_onnx"\nmax_batch_sise: 4\n')
    proc = subprocess.run(
        [sys.executable, "-m", "pyserver", "--model-repository", str(tmp_path),
         "--http-port", str(free_port()), "--grpc-port", str(free_port()),
         "--metrics-port", str(free_port())],
        capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode != 0
    assert f"{model / 'config.pbtxt'}:3:" in proc.stderr
    assert "max_batch_sise" in proc.stderr and "max_batch_size" in proc.stderr
