"""System and CUDA shared memory over gRPC with tritonclient.grpc (sync,
aio and streaming): register, status, infer with inputs and outputs in
client regions, unregister; Triton's refusals and error texts."""

import asyncio
import importlib.resources
import queue
import sys
import types
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from pyserver.runtime.shared_memory import CLIENT_SHM_DISABLED
from pyserver.testing import write_add_sub
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)


def _import_client_shm():
    # tritonclient.utils.shared_memory finds libcshm.so through pkg_resources,
    # which setuptools >= 81 no longer ships.
    try:
        import pkg_resources  # noqa: F401
        shim = False
    except ImportError:
        mod = types.ModuleType("pkg_resources")
        mod.resource_filename = lambda pkg, res: str(importlib.resources.files(pkg) / res)
        sys.modules["pkg_resources"] = mod
        shim = True
    try:
        import tritonclient.utils.shared_memory as client_shm
    finally:
        if shim:
            del sys.modules["pkg_resources"]
    return client_shm


shm = _import_client_shm()
BYTES = 64  # one [1, 16] FP32 tensor


@pytest.fixture
def regions():
    made = []

    def create(size):
        key = "/pyserver_grpc_" + uuid.uuid4().hex[:12]
        handle = shm.create_shared_memory_region(key[1:], key, size)
        made.append(handle)
        return key[1:], key, handle

    yield create
    for handle in made:
        shm.destroy_shared_memory_region(handle)


@pytest.fixture
def shm_server(tmp_path, start_grpc):  # noqa: F811
    write_add_sub(tmp_path)
    return start_grpc(tmp_path, allow_client_shm=True)


def expect_error(fn, status, text=None):
    with pytest.raises(InferenceServerException) as err:
        fn()
    assert err.value.status() == status, err.value
    if text is not None:
        assert err.value.message() == text
    return err.value


def shm_inputs(module, name, offset=0):
    inputs = [module.InferInput("INPUT0", [1, 16], "FP32"),
              module.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory(name, BYTES, offset=offset)
    inputs[1].set_shared_memory(name, BYTES, offset=offset + BYTES)
    return inputs


def test_system_shm_flow(shm_server, regions):
    client = grpcclient.InferenceServerClient(shm_server.grpc_url)
    in_name, in_key, in_handle = regions(2 * BYTES)
    out_name, out_key, out_handle = regions(2 * BYTES)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 5, dtype=np.float32)
    shm.set_shared_memory_region(in_handle, [a, b])

    client.unregister_system_shared_memory()
    client.register_system_shared_memory(in_name, in_key, 2 * BYTES)
    client.register_system_shared_memory(out_name, out_key, 2 * BYTES)
    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert status[in_name] == {"name": in_name, "key": in_key, "byte_size": str(2 * BYTES)}
    assert set(status) == {in_name, out_name}
    one = client.get_system_shared_memory_status(in_name).regions
    assert list(one) == [in_name] and one[in_name].byte_size == 2 * BYTES

    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"),
               grpcclient.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(out_name, BYTES)
    outputs[1].set_shared_memory(out_name, BYTES, offset=BYTES)
    for round_ in range(3):
        shm.set_shared_memory_region(in_handle, [a + round_])
        result = client.infer("add_sub", shm_inputs(grpcclient, in_name), outputs=outputs)
        out0 = result.get_output("OUTPUT0")
        assert out0.datatype == "FP32" and list(out0.shape) == [1, 16]
        got0 = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16])
        got1 = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=BYTES)
        np.testing.assert_array_equal(got0, a + round_ + b)
        np.testing.assert_array_equal(got1, a + round_ - b)

    # shm inputs, ordinary output
    result = client.infer("add_sub", shm_inputs(grpcclient, in_name),
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a + 2 - b)
    # every lease was released
    assert shm_server.server.shared_memory._regions[in_name].refs == 0
    assert shm_server.server.shared_memory._regions[out_name].refs == 0

    client.unregister_system_shared_memory(in_name)
    assert list(client.get_system_shared_memory_status().regions) == [out_name]
    expect_error(lambda: client.get_system_shared_memory_status(in_name),
                 "StatusCode.NOT_FOUND", f"Unable to find system shared memory region: '{in_name}'")
    expect_error(lambda: client.infer("add_sub", shm_inputs(grpcclient, in_name)),
                 "StatusCode.NOT_FOUND", f"Unable to find shared memory region: '{in_name}'")
    client.unregister_system_shared_memory()
    assert len(client.get_system_shared_memory_status().regions) == 0
    client.close()


def test_system_shm_errors(shm_server, regions):
    client = grpcclient.InferenceServerClient(shm_server.grpc_url)
    name, key, handle = regions(2 * BYTES)
    client.register_system_shared_memory(name, key, 2 * BYTES)
    expect_error(lambda: client.register_system_shared_memory(name, key, 8),
                 "StatusCode.ALREADY_EXISTS", f"shared memory region '{name}' already in manager")
    expect_error(lambda: client.register_system_shared_memory("x", "/pyserver_missing", 8),
                 "StatusCode.INTERNAL", "Unable to open shared memory region: '/pyserver_missing'")
    a = np.ones((1, 16), np.float32)
    shm.set_shared_memory_region(handle, [a, a])
    out = grpcclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(name, BYTES - 4)
    expect_error(lambda: client.infer("add_sub", shm_inputs(grpcclient, name), outputs=[out]),
                 "StatusCode.INTERNAL",
                 "shared memory size specified with the request for output 'OUTPUT0' (60 bytes) "
                 "should be at least 64 bytes to hold the results")
    bad = shm_inputs(grpcclient, name, offset=BYTES + 4)
    expect_error(lambda: client.infer("add_sub", bad), "StatusCode.INVALID_ARGUMENT",
                 f"Invalid offset + byte size for shared memory region: '{name}'")
    # an offset or size with no region names nothing: refused as in Triton
    # (#27, defect 8), for an input and for an output
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        inputs = shm_inputs(grpcclient, name)
        plain = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        plain.set_data_from_numpy(a)
        plain._get_tensor().parameters[key].int64_param = 8
        expect_error(lambda: client.infer("add_sub", [plain, inputs[1]]),
                     "StatusCode.INVALID_ARGUMENT",
                     f"'{key}' can not be specified without 'shared_memory_region' parameter "
                     "for tensor 'INPUT0'")
        out = grpcclient.InferRequestedOutput("OUTPUT1")
        out._get_tensor().parameters[key].int64_param = 8
        expect_error(lambda: client.infer("add_sub", inputs, outputs=[out]),
                     "StatusCode.INVALID_ARGUMENT",
                     f"'{key}' can not be specified without 'shared_memory_region' parameter "
                     "for tensor 'OUTPUT1'")
    assert shm_server.server.shared_memory._regions[name].refs == 0
    client.unregister_system_shared_memory(name)
    client.close()


def test_system_shm_aio_and_stream(shm_server, regions):
    in_name, in_key, in_handle = regions(2 * BYTES)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    shm.set_shared_memory_region(in_handle, [a, a])

    async def run():
        client = aioclient.InferenceServerClient(shm_server.grpc_url)
        try:
            await client.register_system_shared_memory(in_name, in_key, 2 * BYTES)
            results = await asyncio.gather(*[
                client.infer("add_sub", shm_inputs(aioclient, in_name)) for _ in range(8)])
            for r in results:
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
        finally:
            await client.close()

    asyncio.run(run())
    client = grpcclient.InferenceServerClient(shm_server.grpc_url)
    got = queue.Queue()
    client.start_stream(lambda result, error: got.put((result, error)))
    client.async_stream_infer("add_sub", shm_inputs(grpcclient, in_name))
    result, error = got.get(timeout=30)
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), np.float32))
    client.stop_stream()
    assert shm_server.server.shared_memory._regions[in_name].refs == 0
    client.unregister_system_shared_memory()
    client.close()


def test_client_shm_disabled_by_default(tmp_path, start_grpc, regions):  # noqa: F811
    write_add_sub(tmp_path)
    s = start_grpc(tmp_path)
    client = grpcclient.InferenceServerClient(s.grpc_url)
    name, key, _ = regions(BYTES)
    expect_error(lambda: client.register_system_shared_memory(name, key, BYTES),
                 "StatusCode.UNIMPLEMENTED", CLIENT_SHM_DISABLED)
    client.close()


def test_cuda_shm_without_gpu(shm_server):
    client = grpcclient.InferenceServerClient(shm_server.grpc_url)
    if shm_server.server.shared_memory.cuda_available():
        pytest.skip("a GPU is visible: the refusal path does not apply")
    expect_error(lambda: client.register_cuda_shared_memory("c", b"\0" * 64, 0, 64),
                 "StatusCode.INVALID_ARGUMENT",
                 "failed to register CUDA shared memory region: 'c', GPUs not supported")
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    client.unregister_cuda_shared_memory()  # what perf_analyzer does: not an error
    client.close()


def test_cuda_shm_empty_arguments_on_a_gpu(shm_server):
    """qa/L0_grpc/python_grpc_aio_test.py: an empty name and handle are
    'invalid args' (gRPC passes them to cudaIpcOpenMemHandle unchecked)."""
    if not shm_server.server.shared_memory.cuda_available():
        pytest.skip("no GPU visible: CUDA registration is refused before its arguments")
    client = grpcclient.InferenceServerClient(shm_server.grpc_url)
    expect_error(lambda: client.register_cuda_shared_memory("", b"", 0, 0),
                 "StatusCode.INVALID_ARGUMENT",
                 "failed to register shared memory region: invalid args")
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    client.close()


def test_system_shm_register_texts_from_triton_qa(shm_server):
    """qa/L0_grpc/python_grpc_aio_test.py and L0_shared_memory: a key with no
    object is INTERNAL; an empty name is a name over gRPC."""
    client = grpcclient.InferenceServerClient(shm_server.grpc_url)
    expect_error(lambda: client.register_system_shared_memory("test_shm", "/test_shm", 0),
                 "StatusCode.INTERNAL", "Unable to open shared memory region: '/test_shm'")
    expect_error(lambda: client.register_system_shared_memory("x", "", 8),
                 "StatusCode.INVALID_ARGUMENT",
                 "cannot register shared memory region 'x' - invalid shm key ''")
    assert len(client.get_system_shared_memory_status().regions) == 0
    client.close()
