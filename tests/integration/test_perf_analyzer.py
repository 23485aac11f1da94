"""Triton's own perf_analyzer (the binary in tritonclient's wheel) pointed at
pyserver, unchanged: HTTP and gRPC, sync and async, system shared memory,
gRPC streaming, a sequence model, a response-cached model (perf_analyzer
finds a model's traffic through the statistics extension's queue count and
reports cache hits from it), an ensemble with its per-step breakdown, and
client-side batching."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyserver.testing import write_add_sub
from tests.integration.test_ensemble import write_ensemble
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)
from tests.integration.test_sequence_batching import write_onnx_controls


def _perf_analyzer() -> tuple[str, dict]:
    binary = shutil.which("perf_analyzer", path=str(Path(sys.executable).parent))
    if binary is None:
        pytest.skip("perf_analyzer is not in this environment (tritonclient's wheel ships it)")
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime  # the libcudart.so.12 perf_analyzer links

        lib = Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib"
        env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}"
    except ImportError:
        pass
    probe = subprocess.run([binary, "--version"], capture_output=True, text=True, env=env)
    if "Perf Analyzer Version" not in probe.stdout + probe.stderr:
        pytest.skip(f"perf_analyzer does not start here: {(probe.stderr or probe.stdout).strip()}")
    return binary, env


@pytest.fixture(scope="module")
def perf_analyzer():
    return _perf_analyzer()


@pytest.fixture
def served(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path, extra="dynamic_batching { }")
    write_add_sub(tmp_path, name="cached", extra="response_cache { enable: true }")
    write_onnx_controls(tmp_path)
    write_ensemble(tmp_path)
    s = start_grpc(tmp_path, allow_client_shm=True, response_cache_byte_size=1 << 20)
    return s


def run(perf_analyzer, served, *args):
    binary, env = perf_analyzer
    protocol = "grpc" if "grpc" in args else "http"
    url = served.grpc_url if protocol == "grpc" else served.url
    for window_ms in ("500", "1500"):
        cmd = [binary, "-u", url, *args, "--concurrency-range", "2", "--measurement-interval",
               window_ms, "--max-trials", "10", "-s", "100"]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
        text = out.stdout + out.stderr
        # On a loaded machine perf_analyzer's own stability check may fail:
        # that says nothing of the server, so measure once more, longer.
        if "Failed to obtain stable measurement" not in text:
            break
    assert out.returncode == 0, text
    assert "error" not in text.lower(), text
    throughput = float(re.search(r"Throughput: ([\d.]+) infer/sec", text).group(1))
    assert throughput > 0, text
    return text


@pytest.mark.parametrize("args", [
    ("-m", "add_sub", "-i", "http"),
    ("-m", "add_sub", "-i", "grpc", "-a"),
    ("-m", "add_sub", "-i", "http", "--shared-memory", "system"),
    ("-m", "add_sub", "-i", "grpc", "--shared-memory", "system", "-b", "4"),
    ("-m", "add_sub", "-i", "grpc", "--streaming"),
    ("-m", "ctl", "-i", "grpc", "--sequence-length", "4"),
    ("-m", "ctl", "-i", "http", "--sequence-length", "3", "-a"),
], ids=["http", "grpc-async", "http-shm", "grpc-shm-batch4", "grpc-stream", "sequence-grpc",
        "sequence-http-async"])
def test_perf_analyzer_runs_unchanged(perf_analyzer, served, args):
    text = run(perf_analyzer, served, *args)
    # Server-side breakdown from the statistics extension.
    assert "Server:" in text and "Inference count:" in text, text


def test_perf_analyzer_sees_response_cache_hits(perf_analyzer, served):
    text = run(perf_analyzer, served, "-m", "cached", "-i", "grpc")
    hits = int(re.search(r"Cache hit count: (\d+)", text).group(1))
    assert hits > 0, text


def test_perf_analyzer_breaks_an_ensemble_down_by_step(perf_analyzer, served):
    text = run(perf_analyzer, served, "-m", "pipeline", "-i", "grpc")
    assert "Composing models:" in text and "add_sub, version: 1" in text, text


def test_perf_analyzer_runs_the_server_in_its_own_process_through_the_c_api(perf_analyzer,
                                                                           tmp_path):
    """--service-kind=triton_c_api: perf_analyzer loads
    <triton-server-directory>/lib/libtritonserver.so and serves the repository
    in its own process through Triton's in-process C API (strict model config,
    explicit readiness waits, its own response allocator); here the directory's
    lib is pyserver's engine folder."""
    from pyserver.engine import triton_c

    binary, env = perf_analyzer
    write_add_sub(tmp_path / "repo")
    server_dir = tmp_path / "tritonserver"
    server_dir.mkdir()
    (server_dir / "lib").symlink_to(Path(triton_c.__file__).parent)
    out = subprocess.run([binary, "-m", "add_sub", "--service-kind", "triton_c_api",
                          "--triton-server-directory", str(server_dir),
                          "--model-repository", str(tmp_path / "repo"),
                          "--measurement-interval", "500", "--max-trials", "10", "-s", "100"],
                         capture_output=True, text=True, env=env, timeout=180)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "Service Kind: Triton C-API" in text, text
    assert float(re.search(r"Throughput: ([\d.]+) infer/sec", text).group(1)) > 0, text
    # the server's side, from its statistics through the C API
    assert int(re.search(r"Inference count: (\d+)", text).group(1)) > 0, text
