"""The server command's memory allocator (pyserver/runtime/allocator.py) as a
user meets it: jemalloc preloaded into the server and its Python model
workers by a re-execution that keeps the PID, the C library's malloc on
request, and a clear error for a setting that cannot be honoured."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pyserver.runtime import allocator
from tests.integration.test_cli import start_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "model_repository"  # add_sub in ONNX
PYTHON_ADD_SUB = ROOT / "tests" / "models" / "python" / "add_sub"  # in a worker process

needs_jemalloc = pytest.mark.skipif(
    allocator.find_jemalloc() is None or bool(os.environ.get("LD_PRELOAD")),
    reason="no libjemalloc.so.2 on this machine (make install installs Debian's libjemalloc2), "
           "or LD_PRELOAD is taken (make sanitize-python)")


def mapped(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as maps:
        return "libjemalloc" in maps.read()


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def infer_add_sub(client, shape=(1, 16)):
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    inputs = [httpclient.InferInput("INPUT0", list(shape), "FP32"),
              httpclient.InferInput("INPUT1", list(shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)


def stop(proc) -> str:
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


@needs_jemalloc
def test_jemalloc_runs_the_server_and_its_python_workers(tmp_path):
    shutil.copytree(PYTHON_ADD_SUB, tmp_path / "add_sub")
    proc, client, _ = start_cli(["--model-repository", str(tmp_path)],
                                env={"PYSERVER_MALLOC": "jemalloc"})
    try:
        infer_add_sub(client, (4,))
        # the process the user started is the server: the re-execution kept its PID
        assert mapped(proc.pid)
        workers = children(proc.pid)
        assert workers and all(mapped(w) for w in workers)
    finally:
        out = stop(proc)
    assert "memory allocator: jemalloc (PYSERVER_MALLOC=jemalloc)" in out


@needs_jemalloc
def test_auto_is_jemalloc_and_the_console_script_reexecutes_too():
    script = Path(sys.executable).with_name("pyserver")
    if not script.exists():
        pytest.skip(f"no console script at {script} (pyserver not pip-installed there)")
    env = {k: v for k, v in os.environ.items() if k != allocator.ENV}
    proc = subprocess.Popen(
        [str(script), "--model-repository", str(EXAMPLES), "--allow-http=false",
         "--allow-grpc=false", "--allow-metrics=false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out = ""
        for line in proc.stdout:
            out += line
            if "memory allocator:" in line:
                break
        assert "memory allocator: jemalloc (PYSERVER_MALLOC=auto)" in out, out
        assert mapped(proc.pid)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_system_keeps_the_c_librarys_malloc():
    proc, client, _ = start_cli(["--model-repository", str(EXAMPLES)],
                                env={"PYSERVER_MALLOC": "system"})
    try:
        infer_add_sub(client)
        if not os.environ.get("LD_PRELOAD"):
            assert not mapped(proc.pid)
    finally:
        out = stop(proc)
    assert "memory allocator: system (PYSERVER_MALLOC=system)" in out


@pytest.mark.parametrize("value, message", [
    ("tcmalloc", "error: PYSERVER_MALLOC must be one of auto, jemalloc, system, got 'tcmalloc'"),
])
def test_a_setting_that_cannot_be_honoured_stops_the_command(value, message):
    done = subprocess.run([sys.executable, "-m", "pyserver", "--model-repository", str(EXAMPLES)],
                          env={**os.environ, allocator.ENV: value}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr


@needs_jemalloc
def test_every_backend_serves_through_the_command_on_jemalloc(tmp_path):
    """A preloaded malloc meets every runtime's own libraries in one process
    (OpenVINO's TBB aborted on it before TBB_ENABLE_SANITIZERS was set)."""
    pytest.importorskip("openvino")
    pytest.importorskip("torch")
    from pyserver.testing import write_add_sub
    from tests.integration import test_backends, test_openvino
    from tests.integration import test_triton_c_backend as c_api
    repo, backends = tmp_path / "models", tmp_path / "backends"
    write_add_sub(repo, name="onnx")
    test_openvino.write_model(repo, "openvino", "max_batch_size: 8\n" + test_openvino.ADD_SUB_IO)
    test_backends.write_torch(repo, "torch", test_backends.TorchAddSub(),
                              test_backends.ADD_SUB_TORCH_IO)
    shutil.copytree(PYTHON_ADD_SUB, repo / "python")
    (repo / "python" / "config.pbtxt").write_text(
        (PYTHON_ADD_SUB / "config.pbtxt").read_text().replace('"add_sub"', '"python"'))
    c_api.build_backend(backends, "identity")
    c_api.write_model(repo, "identity", c_api.IDENTITY)
    proc, client, _ = start_cli(["--model-repository", str(repo),
                                 "--backend-directory", str(backends)],
                                env={"PYSERVER_MALLOC": "jemalloc"})
    try:
        assert mapped(proc.pid)
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((1, 16)).astype(np.float32) for _ in range(2))
        for model, names in (("onnx", ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")),
                             ("openvino", ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")),
                             ("torch", ("INPUT__0", "INPUT__1", "OUTPUT__0", "OUTPUT__1"))):
            inputs = [httpclient.InferInput(names[0], [1, 16], "FP32"),
                      httpclient.InferInput(names[1], [1, 16], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer(model, inputs)
            np.testing.assert_allclose(result.as_numpy(names[2]), a + b, rtol=1e-6)
            np.testing.assert_allclose(result.as_numpy(names[3]), a - b, rtol=1e-6)
        x = np.arange(4, dtype=np.float32)
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
                  httpclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("python", inputs).as_numpy("OUTPUT0"), x + x)
        one = httpclient.InferInput("INPUT0", [1, 3], "FP32")
        one.set_data_from_numpy(np.ones((1, 3), np.float32))
        np.testing.assert_array_equal(client.infer("identity", [one]).as_numpy("OUTPUT0"),
                                      np.ones((1, 3), np.float32))
    finally:
        out = stop(proc)
    assert "memory allocator: jemalloc" in out
