"""BLS (business logic scripting): Python models that call other models
through pb_utils.InferenceRequest(...).exec() / async_exec(), served over
HTTP and talked to with tritonclient. The calls go through the server's own
schedulers, tensors through the workers' shared memory."""

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.backends.base import Capability
from pyserver.testing import write_add_sub
from tests.integration.conftest import PYTHON_MODES, use_execution_mode

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


@pytest.fixture(scope="module", params=PYTHON_MODES)
def bls_server(tmp_path_factory, request):
    from tests.integration.conftest import RunningServer

    repo = tmp_path_factory.mktemp("bls") / "models"
    repo.mkdir()
    for name in ("bls", "bls_async", "add_sub", "add_sub_async", "repeat", "bytes_echo"):
        shutil.copytree(MODELS / name, repo / name)
    use_execution_mode(repo, request.param)
    write_add_sub(repo, name="onnx_add_sub", size=4, max_batch_size=0)
    write_add_sub(repo, name="onnx_big", size=1 << 20, max_batch_size=0)
    server = RunningServer(repo)
    yield server
    server.close()


def call(server, model, a, b, **params):
    client = httpclient.InferenceServerClient(server.url)
    inputs = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
              httpclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return client.infer(model, inputs, parameters=params or None)


A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)


@pytest.mark.parametrize("target", ["add_sub", "onnx_add_sub"])
def test_sync_bls(bls_server, target):
    result = call(bls_server, "bls", A, B, target=target)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


@pytest.mark.parametrize("target", ["add_sub", "onnx_add_sub"])
def test_async_bls_several_in_flight(bls_server, target):
    result = call(bls_server, "bls_async", A, B, target=target, count=5)
    scale = sum(range(1, 6))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * scale + 5 * B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A * scale - 5 * B)


def test_bls_from_concurrent_clients(bls_server):
    def one(i):
        a = A * i
        result = call(bls_server, "bls_async", a, B, target="onnx_add_sub", count=3)
        return np.array_equal(result.as_numpy("OUTPUT0"), a * 6 + 3 * B)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(24)))


def test_bls_megabytes_go_through_shared_memory(bls_server):
    a = np.random.default_rng(0).random(1 << 20, dtype=np.float32)
    b = np.ones(1 << 20, np.float32)
    result = call(bls_server, "bls", a, b, target="onnx_big")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    mv = bls_server.run(bls_server.server.models.resolve, "bls", "")
    if Capability.OUT_OF_PROCESS not in mv.instances[0].capabilities:
        return  # in-process: the arrays are handed over, no shared memory
    worker = mv.instances[0].backend._worker
    # 2 x 4 MiB each way: the regions grew to hold them ...
    assert worker.up.size >= 8 << 20 and worker.down.region.size >= 8 << 20
    # ... and every block was given back
    deadline = time.monotonic() + 5
    while worker.down.in_use() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.down.in_use() == 0


def test_bls_errors_come_back_in_the_response(bls_server):
    with pytest.raises(InferenceServerException) as err:
        call(bls_server, "bls", A, B, target="nope")
    assert "Failed for execute the inference request. Model 'nope' is not ready." \
        in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        call(bls_server, "bls", A, B, mode="wrong_input")
    assert err.value.status() == "400"
    # (one input of two: core counts the inputs before it reads each one)
    assert "expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], " \
        "but missing required input(s) ['INPUT1']" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        call(bls_server, "bls", A, B, mode="unary_to_decoupled")
    assert "Model repeat is using the decoupled. The current BLS request call doesn't support " \
        "models using the decoupled transaction policy." in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        call(bls_server, "bls_async", A, B, target="nope", count=2)
    assert "Model 'nope' is not ready" in err.value.message()
    # the model still answers
    result = call(bls_server, "bls", A, B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_bls_to_a_decoupled_model(bls_server):
    result = call(bls_server, "bls", A, B, mode="decoupled")
    assert result.as_numpy("OUTPUT0").tolist() == [0, 1, 2, 3]
    assert result.as_numpy("OUTPUT1").tolist() == [1]  # the final flag, as an empty response
    result = call(bls_server, "bls_async", A[:3], B[:3], decoupled=True)
    assert result.as_numpy("OUTPUT0").tolist() == [0, 1, 2]


def test_cancelling_a_decoupled_bls_call(bls_server):
    """The called model sees is_cancelled(); what it still sends arrives,
    up to its final response, so the iterator ends."""
    result = call(bls_server, "bls", A, B, mode="cancel")
    assert result.as_numpy("OUTPUT0").tolist() == [0, 1, 2, 3]
    assert result.as_numpy("OUTPUT1").tolist() == [1]


def test_bls_with_bytes_tensors(bls_server):
    result = call(bls_server, "bls", A, B, mode="bytes")
    assert result.as_numpy("OUTPUT0").tolist() == [2, 0, 4]
    assert result.as_numpy("OUTPUT1").tolist() == [1]


def test_bls_response_parameters_come_back(bls_server):
    # add_sub_async answers with parameters {"same_loop": true}; bls relays them
    result = call(bls_server, "bls", A, B, target="add_sub_async")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    assert result.get_response()["parameters"] == {"same_loop": True}
