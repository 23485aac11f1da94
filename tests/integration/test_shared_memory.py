"""The system shared-memory flow as Triton's examples run it, with
tritonclient.utils.shared_memory and tritonclient.http (sync and aio), against
a real server: create regions, register, infer with inputs AND outputs in
shared memory, status, unregister; and the refusals (client shm disabled,
CUDA shared memory on a machine without a GPU)."""

import asyncio
import base64
import importlib.resources
import json
import os
import sys
import types
import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from pyserver.runtime.shared_memory import CLIENT_SHM_DISABLED, SharedMemoryManager
from pyserver.testing import write_add_sub


def _import_client_shm():
    # tritonclient.utils.shared_memory finds its libcshm.so through
    # pkg_resources, which setuptools >= 81 no longer ships.
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


def unique_key():
    return "/pyserver_it_" + uuid.uuid4().hex[:12]


@pytest.fixture
def regions():
    """Client-side regions, destroyed at the end of the test."""
    made = []

    def create(size):
        key = unique_key()
        name = key[1:]
        handle = shm.create_shared_memory_region(name, key, size)
        made.append(handle)
        return name, key, handle

    yield create
    for handle in made:
        shm.destroy_shared_memory_region(handle)


@pytest.fixture
def shm_server(tmp_path, start_server):
    write_add_sub(tmp_path)
    return start_server(tmp_path, allow_client_shm=True)


def expect_error(fn, status, text):
    with pytest.raises(InferenceServerException) as err:
        fn()
    assert err.value.status() == str(status), err.value
    assert err.value.message() == text
    return err.value


def test_system_shm_flow_sync(shm_server, regions):
    client = httpclient.InferenceServerClient(shm_server.url)
    in_name, in_key, in_handle = regions(2 * BYTES)
    out_name, out_key, out_handle = regions(2 * BYTES)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 5, dtype=np.float32)
    shm.set_shared_memory_region(in_handle, [a])
    shm.set_shared_memory_region(in_handle, [b], offset=BYTES)

    client.unregister_system_shared_memory()  # what the examples do first
    client.register_system_shared_memory(in_name, in_key, 2 * BYTES)
    client.register_system_shared_memory(out_name, out_key, 2 * BYTES)
    status = client.get_system_shared_memory_status()
    assert sorted(status, key=lambda r: r["name"]) == sorted([
        {"name": in_name, "key": in_key, "offset": 0, "byte_size": 2 * BYTES},
        {"name": out_name, "key": out_key, "offset": 0, "byte_size": 2 * BYTES}],
        key=lambda r: r["name"])
    assert client.get_system_shared_memory_status(in_name) == [
        {"name": in_name, "key": in_key, "offset": 0, "byte_size": 2 * BYTES}]

    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
              httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory(in_name, BYTES)
    inputs[1].set_shared_memory(in_name, BYTES, offset=BYTES)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
               httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    outputs[0].set_shared_memory(out_name, BYTES)
    outputs[1].set_shared_memory(out_name, BYTES, offset=BYTES)
    for round_ in range(3):  # the same regions, reused
        shm.set_shared_memory_region(in_handle, [a + round_])
        result = client.infer("add_sub", inputs, outputs=outputs)
        out0 = result.get_output("OUTPUT0")
        assert out0 == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
        got0 = shm.get_contents_as_numpy(out_handle, np.float32, out0["shape"])
        got1 = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16], offset=BYTES)
        np.testing.assert_array_equal(got0, a + round_ + b)
        np.testing.assert_array_equal(got1, a + round_ - b)

    # shm inputs with an ordinary output
    result = client.infer("add_sub", inputs,
                          outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a + 2 - b)

    client.unregister_system_shared_memory(in_name)
    assert [r["name"] for r in client.get_system_shared_memory_status()] == [out_name]
    expect_error(lambda: client.get_system_shared_memory_status(in_name), 404,
                 f"Unable to find system shared memory region: '{in_name}'")
    expect_error(lambda: client.infer("add_sub", inputs), 404,
                 f"Unable to find shared memory region: '{in_name}'")
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []


def test_system_shm_errors(shm_server, regions):
    client = httpclient.InferenceServerClient(shm_server.url)
    name, key, handle = regions(2 * BYTES)
    client.register_system_shared_memory(name, key, 2 * BYTES)
    expect_error(lambda: client.register_system_shared_memory(name, key, 8), 400,
                 f"shared memory region '{name}' already in manager")
    expect_error(lambda: client.register_system_shared_memory("x", "/pyserver_missing", 8), 500,
                 "Unable to open shared memory region: '/pyserver_missing'")
    expect_error(lambda: client.register_system_shared_memory("x", key, 4 * BYTES), 400,
                 "failed to register shared memory region 'x': invalid args")

    a = np.ones((1, 16), np.float32)
    shm.set_shared_memory_region(handle, [a, a])

    def infer(in_size=BYTES, in_offset=BYTES, out_size=BYTES, out_offset=0):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_shared_memory(name, BYTES)
        inputs[1].set_shared_memory(name, in_size, offset=in_offset)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(name, out_size, offset=out_offset)
        return client.infer("add_sub", inputs, outputs=[out])

    expect_error(lambda: infer(in_offset=2 * BYTES), 400,
                 f"Invalid offset for shared memory region: '{name}'")
    expect_error(lambda: infer(in_offset=BYTES + 4), 400,
                 f"Invalid offset + byte size for shared memory region: '{name}'")
    expect_error(lambda: infer(in_size=BYTES - 4), 400,
                 "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for "
                 "model 'add_sub'. Expected 64, got 60")
    expect_error(lambda: infer(out_size=BYTES - 4), 500,
                 "shared memory size specified with the request for output 'OUTPUT0' (60 bytes) "
                 "should be at least 64 bytes to hold the results")
    infer()  # and it still works
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16]), 2 * a)
    # nothing leaked a reference: the region unregisters at once
    assert shm_server.server.shared_memory._regions[name].refs == 0
    client.unregister_system_shared_memory(name)
    assert client.get_system_shared_memory_status() == []


def test_truncated_region_fails_the_request_not_the_server(shm_server, regions):
    """#27 defect 2: the owner shrinks a registered region; reading its lost
    pages would be SIGBUS for the whole server (Triton dies so). Each use
    checks the size: that request is refused, the server serves on."""
    client = httpclient.InferenceServerClient(shm_server.url)
    name, key, handle = regions(2 * BYTES)
    a = np.ones((1, 16), np.float32)
    shm.set_shared_memory_region(handle, [a, a])
    client.register_system_shared_memory(name, key, 2 * BYTES)

    def infer():
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_shared_memory(name, BYTES)
        inputs[1].set_shared_memory(name, BYTES, offset=BYTES)
        return client.infer("add_sub", inputs)

    np.testing.assert_array_equal(infer().as_numpy("OUTPUT0"), 2 * a)
    fd = os.open("/dev/shm/" + key.lstrip("/"), os.O_RDWR)
    try:
        os.ftruncate(fd, 0)
        err = expect_error(infer, 400, f"shared memory region '{name}' (key '{key}') was "
                           "truncated to 0 bytes after it was registered; the request needs "
                           f"bytes up to {BYTES}")
        assert err is not None
        # outputs into a shrunken region are refused too
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                  httpclient.InferInput("INPUT1", [1, 16], "FP32")]
        for i in inputs:
            i.set_data_from_numpy(a)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(name, BYTES, offset=BYTES)
        with pytest.raises(InferenceServerException) as e:
            client.infer("add_sub", inputs, outputs=[out])
        assert "was truncated to 0 bytes" in e.value.message()
        # grown back, the region works again; other models never stopped
        os.ftruncate(fd, 2 * BYTES)
        shm.set_shared_memory_region(handle, [a, a])
        np.testing.assert_array_equal(infer().as_numpy("OUTPUT1"), 0 * a)
    finally:
        os.close(fd)
    assert shm_server.server.shared_memory._regions[name].refs == 0
    client.unregister_system_shared_memory(name)


def test_system_shm_flow_aio(shm_server, regions):
    in_name, in_key, in_handle = regions(2 * BYTES)
    out_name, out_key, out_handle = regions(4 * BYTES)
    pairs = [(np.full((1, 16), i, np.float32), np.arange(16, dtype=np.float32).reshape(1, 16))
             for i in range(2)]

    async def main():
        client = aioclient.InferenceServerClient(shm_server.url)
        try:
            await client.register_system_shared_memory(in_name, in_key, 2 * BYTES)
            await client.register_system_shared_memory(out_name, out_key, 4 * BYTES)
            assert len(await client.get_system_shared_memory_status()) == 2
            shm.set_shared_memory_region(in_handle, [p[0] for p in pairs])

            async def one(i):
                inputs = [aioclient.InferInput("INPUT0", [1, 16], "FP32"),
                          aioclient.InferInput("INPUT1", [1, 16], "FP32")]
                inputs[0].set_shared_memory(in_name, BYTES, offset=i * BYTES)
                inputs[1].set_data_from_numpy(pairs[i][1])
                outs = [aioclient.InferRequestedOutput("OUTPUT0"),
                        aioclient.InferRequestedOutput("OUTPUT1")]
                outs[0].set_shared_memory(out_name, BYTES, offset=2 * i * BYTES)
                outs[1].set_shared_memory(out_name, BYTES, offset=(2 * i + 1) * BYTES)
                return await client.infer("add_sub", inputs, outputs=outs)

            await asyncio.gather(one(0), one(1))
            for i, (a, b) in enumerate(pairs):
                got0 = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16],
                                                 offset=2 * i * BYTES)
                got1 = shm.get_contents_as_numpy(out_handle, np.float32, [1, 16],
                                                 offset=(2 * i + 1) * BYTES)
                np.testing.assert_array_equal(got0, a + b)
                np.testing.assert_array_equal(got1, a - b)
            await client.unregister_system_shared_memory()
            assert await client.get_system_shared_memory_status() == []
        finally:
            await client.close()

    asyncio.run(main())


def test_client_shm_disabled_by_default(tmp_path, start_server, regions):
    write_add_sub(tmp_path)
    s = start_server(tmp_path)  # --allow-client-shm defaults to false, as in Triton
    client = httpclient.InferenceServerClient(s.url)
    name, key, _ = regions(BYTES)
    expect_error(lambda: client.register_system_shared_memory(name, key, BYTES), 501,
                 CLIENT_SHM_DISABLED)
    expect_error(lambda: client.unregister_system_shared_memory(), 501, CLIENT_SHM_DISABLED)
    expect_error(lambda: client.register_cuda_shared_memory("g", "AAAA", 0, 64), 501,
                 CLIENT_SHM_DISABLED)
    assert client.get_system_shared_memory_status() == []
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"),
              httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory(name, BYTES)
    inputs[1].set_shared_memory(name, BYTES)
    expect_error(lambda: client.infer("add_sub", inputs), 404,
                 f"Unable to find shared memory region: '{name}'")


@pytest.mark.skipif(SharedMemoryManager.cuda_available(), reason="a GPU is present")
def test_cuda_shm_unsupported_without_gpu(shm_server):
    client = httpclient.InferenceServerClient(shm_server.url)
    handle = base64.b64encode(b"\0" * 64).decode()
    expect_error(lambda: client.register_cuda_shared_memory("gpu_region", handle, 0, 1024), 400,
                 "failed to register CUDA shared memory region: 'gpu_region', GPUs not supported")
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()  # perf_analyzer calls this: it succeeds
    client.unregister_cuda_shared_memory("gpu_region")
    expect_error(lambda: client.get_cuda_shared_memory_status("gpu_region"), 404,
                 "Unable to find cuda shared memory region: 'gpu_region'")

    async def main():
        c = aioclient.InferenceServerClient(shm_server.url)
        try:
            with pytest.raises(InferenceServerException) as err:
                await c.register_cuda_shared_memory("g2", handle, 0, 1024)
            assert "GPUs not supported" in err.value.message()
            assert await c.get_cuda_shared_memory_status() == []
            await c.unregister_cuda_shared_memory()
        finally:
            await c.close()

    asyncio.run(main())


def test_register_body_errors_on_the_wire(shm_server):
    import http.client

    def post(path, body):
        conn = http.client.HTTPConnection(*shm_server.url.split(":"))
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")

    base = "/v2/systemsharedmemory"
    assert post(base + "/register", b"{}") == (
        400, {"error": "'region name' is necessary to register system shared memory region"})
    assert post(base + "/region/r/register", b'{"byte_size": 8}') == (
        400, {"error": "Shared memory register request has no 'key' field"})
    assert post(base + "/region/r/register", b'{"key": "/k"}') == (
        400, {"error": "Shared memory register request has no 'byte_size' field"})
    assert post(base + "/region/r/register", b'{"key": 1, "byte_size": 8}') == (
        500, {"error": "attempt to access JSON non-string as string"})
    assert post(base + "/region/r/register", b'{"key": "/k", "byte_size": -8}') == (
        500, {"error": "attempt to access JSON non-unsigned-integer as unsigned-integer"})
    status, body = post(base + "/region/r/register", b'{"key": ')
    assert status == 500 and body["error"].startswith("failed to parse the request JSON buffer")
    conn = http.client.HTTPConnection(*shm_server.url.split(":"))
    conn.request("POST", base + "/status")
    resp = conn.getresponse()
    assert (resp.status, json.loads(resp.read())) == (405, {"error": "Method Not Allowed"})
    conn.request("GET", base + "/region/r/unregister")
    resp = conn.getresponse()
    assert (resp.status, json.loads(resp.read())) == (405, {"error": "Method Not Allowed"})
