"""The backend memory manager's GPU and pinned memory, through a Triton C
backend served end to end: tests/backends_c/gpu_roundtrip.c takes each
request's INPUT0 through GPU memory and pinned memory it gets from
TRITONBACKEND_MemoryManagerAllocate (copied with cudaMemcpy), and answers
2 * INPUT0; every block goes back through TRITONBACKEND_MemoryManagerFree,
where a free that names the wrong memory type or device fails the request.

Where a GPU is visible the server runs on the real CUDA runtime, the
instance on GPU 0 and the GPU memory from its device pool. Elsewhere it
runs over the stand-in libcudart (csrc/tests/fake_cudart.cc: host memory
behind the CUDA entry points, one device), which the server process loads
by the name libcudart.so: the same plumbing, with host memory."""

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pyserver.engine import memory
from tests.integration.test_cli import start_cli
from tests.integration.test_triton_c_backend import CC, build_backend, write_model

ROOT = Path(__file__).resolve().parents[2]
CXX = shutil.which("g++") or shutil.which("c++")

pytestmark = pytest.mark.skipif(CC is None or CXX is None,
                                reason="no C/C++ compiler to build the backend and the runtime")

MODEL = '''backend: "gpu_roundtrip"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]
'''


def cuda_runtime(tmp_path: Path) -> tuple[str, dict]:
    """The libcudart the server and the backend use, and the server's extra
    environment: the process's real runtime when it sees a GPU, else the
    stand-in, built here as libcudart.so."""
    info = memory.cuda_runtime_info()
    if info["available"] and info["device_count"] > 0:
        return info["library"], {}
    lib = tmp_path / "cudart"
    lib.mkdir()
    fake = lib / "libcudart.so"
    subprocess.run([CXX, "-std=c++17", "-shared", "-fPIC", "-O1", "-o", str(fake),
                    str(ROOT / "csrc/tests/fake_cudart.cc")], check=True)
    return str(fake), {"LD_LIBRARY_PATH": str(lib), "FAKE_CUDART_DEVICES": "1"}


@pytest.fixture
def roundtrip_server(tmp_path):
    library, env = cuda_runtime(tmp_path)
    backends = tmp_path / "backends"
    build_backend(backends, "gpu_roundtrip")
    repo = tmp_path / "models"
    write_model(repo, "roundtrip", MODEL)
    # the pinned pool smaller than the GPU pool: a 2 MiB request gets its
    # GPU memory and is refused its pinned memory
    proc, client, ports = start_cli(
        ["--model-repository", str(repo), "--backend-directory", str(backends),
         f"--backend-config=gpu_roundtrip,cudart={library}",
         "--cuda-memory-pool-byte-size=0:4194304", "--pinned-memory-pool-byte-size=1048576"],
        env)
    try:
        deadline = time.monotonic() + 90
        while not client.is_model_ready("roundtrip"):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "model not ready"
            time.sleep(0.1)
        yield f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_values_go_through_the_managers_gpu_and_pinned_memory(roundtrip_server):
    url, grpc_url = roundtrip_server

    def one(i):
        x = np.arange(4 + i % 5, dtype=np.float32).reshape(1, -1) + i
        module = grpcclient if i % 2 else httpclient
        client = module.InferenceServerClient(grpc_url if i % 2 else url)
        try:
            t = module.InferInput("INPUT0", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            np.testing.assert_array_equal(client.infer("roundtrip", [t]).as_numpy("OUTPUT0"), 2 * x)
        finally:
            client.close()
        return i

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(32))) == list(range(32))
    # a request larger than the 1 MiB pinned pool: the manager refuses past
    # its capacity (as Triton's does), and the request fails with that error
    big = np.zeros((1, 1 << 19), np.float32)  # 2 MiB
    t = httpclient.InferInput("INPUT0", list(big.shape), "FP32")
    t.set_data_from_numpy(big)
    with pytest.raises(Exception, match="pinned memory pool is exhausted"):
        httpclient.InferenceServerClient(url).infer("roundtrip", [t])
    # and the server goes on
    x = np.ones((1, 3), np.float32)
    t = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    t.set_data_from_numpy(x)
    np.testing.assert_array_equal(
        httpclient.InferenceServerClient(url).infer("roundtrip", [t]).as_numpy("OUTPUT0"), 2 * x)
