"""GPU tests: run with `make test-gpu` on a machine with an NVIDIA GPU.
Each module skips, saying why, where its runtime (TensorRT, onnxruntime-gpu,
CUDA-enabled torch) or a GPU is missing, so the suite passes on a CPU box;
on a machine with a GPU (or PYSERVER_REQUIRE_GPU=1) a GPU the CUDA runtime
cannot use fails the run instead (visible_gpus)."""

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pyserver.frontends.grpc import GrpcFrontend
from tests.integration.conftest import RunningServer


def gpu_expected() -> bool:
    """Whether this machine has an NVIDIA GPU (its device node) or the run
    says it must (PYSERVER_REQUIRE_GPU=1): then finding none is a failure,
    not a skip, so that a GPU run cannot pass with nothing run on the GPU
    (pyserver's own CUDA runtime loader, which the tests also test, would
    otherwise decide whether they run)."""
    return os.path.exists("/dev/nvidia0") or os.environ.get("PYSERVER_REQUIRE_GPU") == "1"


def pytest_sessionfinish(session, exitstatus):
    # On a CPU box every module skips as it is imported, so pytest collects
    # no test and ends with exit status 5 ("no tests collected"), which made
    # `make test-gpu` fail there. Those skips are the suite passing.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and session.testscollected == 0 \
            and not gpu_expected():
        session.exitstatus = pytest.ExitCode.OK


def no_gpu(reason: str):
    """A module or test that finds no GPU to use: a skip on a CPU machine,
    a failure where a GPU is expected (gpu_expected). A runtime that is not
    installed, or built without CUDA, stays a skip everywhere."""
    if gpu_expected():
        pytest.fail(f"this machine has an NVIDIA GPU but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def visible_gpus() -> int:
    """GPUs the CUDA runtime sees; 0 on a machine without one. Where a GPU
    is expected (gpu_expected) and none is usable, the module asking fails
    with the runtime's reason."""
    from pyserver.backends import _cuda

    try:
        count, reason = _cuda.device_count(), "it counts 0 devices"
    except Exception as err:
        count, reason = 0, str(err)
    if count == 0 and gpu_expected():
        pytest.fail(f"this machine has an NVIDIA GPU but the CUDA runtime finds none usable: "
                    f"{reason}", pytrace=False)
    return count


@pytest.fixture
def serve():
    """serve(repo, **server_kwargs): a server with HTTP and gRPC frontends."""
    started = []

    def start(repo, **kwargs):
        s = RunningServer(repo, **kwargs)
        started.append(s)
        s.grpc = GrpcFrontend(s.server, "127.0.0.1", 0)
        s.call(s.grpc.start())
        s.grpc_url = f"127.0.0.1:{s.grpc.port}"
        return s

    yield start
    for s in started:
        s.call(s.grpc.stop(5))
        s.close()


def check_mlp(s, model, weights, requests=48, input_name="INPUT0", output_name="OUTPUT0",
              rtol=1e-3, atol=1e-3):
    """Concurrent requests of 1-4 rows over HTTP and gRPC; each answer
    compared with the numpy reference of the MLP."""
    from pyserver.testing import mlp_reference

    def one(i):
        module = grpcclient if i % 2 else httpclient
        client = module.InferenceServerClient(s.grpc_url if i % 2 else s.url)
        try:
            x = np.random.default_rng(i).standard_normal((1 + i % 4, 64)).astype(np.float32)
            t = module.InferInput(input_name, list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            got = client.infer(model, [t]).as_numpy(output_name)
            np.testing.assert_allclose(got, mlp_reference(x, weights), rtol=rtol, atol=atol)
            return i
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(requests))) == list(range(requests))
    stats = s.run(s.server.model_statistics, model)
    assert stats["inference_stats"]["success"]["count"] == requests
    return stats
