"""SharedMemoryManager (system shared memory over real POSIX shm objects, CUDA
refused without a GPU), its use by the HTTP codec (inputs as views over the
region, outputs written into it), raw binary requests and the
--http-restricted-api parser. Texts are Triton's."""

import gc
import json
import mmap
import os
import uuid
from multiprocessing import shared_memory as mp_shm

import numpy as np
import pytest

from pyserver.engine.protocol.http_codec import (
    INFER_HEADER_LENGTH,
    ShmInferRequest,
    decode_infer_request,
    encode_infer_response,
    release_shm,
)
from pyserver.frontends.http import parse_restricted_api
from pyserver.kernel.dtypes import serialize_bytes_tensor
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferResponse, InferTensor
from pyserver.runtime import shared_memory as shm_mod
from pyserver.runtime.shared_memory import CLIENT_SHM_DISABLED, SharedMemoryManager


def expect(code, fn, *args, **kwargs):
    with pytest.raises(ServerError) as ei:
        fn(*args, **kwargs)
    assert ei.value.code == code, ei.value
    return ei.value.message


@pytest.fixture
def posix_shm():
    """Creates POSIX shm objects (as a client would); unlinks them afterwards."""
    made = []

    def make(size):
        name = "pyserver_t_" + uuid.uuid4().hex[:12]
        seg = mp_shm.SharedMemory(name=name, create=True, size=size)
        made.append(seg)
        return seg, "/" + name

    yield make
    for seg in made:
        try:
            seg.close()
        except BufferError:
            pass
        seg.unlink()


@pytest.fixture
def manager():
    m = SharedMemoryManager(True)
    yield m
    m.close()


# ---------------------------------------------------------------- registration


def test_disabled_by_default_refuses_register_and_unregister(posix_shm):
    m = SharedMemoryManager()
    _, key = posix_shm(64)
    assert expect(Code.UNSUPPORTED, m.register, "r", key, 0, 64) == CLIENT_SHM_DISABLED
    assert CLIENT_SHM_DISABLED == ("Client shared memory is disabled. Start the server with "
                                   "'--allow-client-shm=true' to enable.")
    assert expect(Code.UNSUPPORTED, m.unregister, None) == CLIENT_SHM_DISABLED
    assert expect(Code.UNSUPPORTED, m.register_cuda, "g", b"x" * 64, 0, 64) == CLIENT_SHM_DISABLED
    assert m.status() == []  # status is always allowed
    # a region can never be registered, so using one is an unknown region
    assert expect(Code.NOT_FOUND, m.acquire, "r", 0, 4) == (
        "Unable to find shared memory region: 'r'")


def test_register_status_and_errors(manager, posix_shm):
    seg, key = posix_shm(256)
    manager.register("r1", key, 0, 128)
    manager.register_system("r2", key.lstrip("/"), 128, 128)  # key without the slash works
    assert manager.status() == [
        {"name": "r1", "key": key, "offset": 0, "byte_size": 128},
        {"name": "r2", "key": key.lstrip("/"), "offset": 128, "byte_size": 128}]
    assert manager.status("r2") == [
        {"name": "r2", "key": key.lstrip("/"), "offset": 128, "byte_size": 128}]
    assert expect(Code.NOT_FOUND, manager.status, "nope") == (
        "Unable to find system shared memory region: 'nope'")
    assert expect(Code.NOT_FOUND, manager.status, "nope", "cuda") == (
        "Unable to find cuda shared memory region: 'nope'")
    assert expect(Code.NOT_FOUND, manager.status, "r1", "cuda") == (
        "The region named 'r1' is registered as system shared memory, not CUDA shared memory")
    assert manager.status(None, "cuda") == []

    assert expect(Code.ALREADY_EXISTS, manager.register, "r1", key, 0, 8) == (
        "shared memory region 'r1' already in manager")
    assert expect(Code.INTERNAL, manager.register, "x", "/pyserver_no_such_key", 0, 8) == (
        "Unable to open shared memory region: '/pyserver_no_such_key'")
    # never a path into the filesystem
    assert expect(Code.INTERNAL, manager.register, "x", "/../../etc/passwd", 0, 8) == (
        "Unable to open shared memory region: '/../../etc/passwd'")
    assert expect(Code.INVALID_ARG, manager.register, "x", key, 200, 100) == (
        "failed to register shared memory region 'x': invalid args")
    assert expect(Code.INVALID_ARG, manager.register, "x", "///", 0, 8) == (
        "cannot register shared memory region 'x' - invalid shm key '///'")
    assert expect(Code.INVALID_ARG, manager.register, "x",
                  "/triton_python_backend_shm_region_7", 0, 8) == (
        "cannot register shared memory region 'x' with key "
        "'/triton_python_backend_shm_region_7' as the key contains the reserved prefix "
        "'triton_python_backend_shm_region_'")
    assert expect(Code.INVALID_ARG, manager.register, "x", key, 0, 0).startswith(
        "failed to register shared memory region 'x': unable to process address space")
    assert [r["name"] for r in manager.status()] == ["r1", "r2"]
    # Only Triton's HTTP frontend requires a name: over gRPC "" is a name.
    manager.register("", key, 0, 8)
    assert sorted(r["name"] for r in manager.status()) == ["", "r1", "r2"]
    manager.unregister("")  # "" is also "every region"
    assert manager.status() == []


def test_unaligned_offset_maps_the_right_bytes(manager, posix_shm):
    seg, key = posix_shm(3 * mmap.ALLOCATIONGRANULARITY)
    seg.buf[100:116] = bytes(range(16))
    manager.register("u", key, 100, 16)
    lease = manager.acquire("u", 0, 16)
    assert bytes(lease.memory()) == bytes(range(16))
    lease.release()


def test_cuda_without_gpu_is_refused(manager, monkeypatch):
    monkeypatch.setattr(shm_mod, "_cuda_state", [None])
    assert not manager.cuda_available()
    # Triton built without GPUs: INVALID_ARG, whatever the arguments.
    assert expect(Code.INVALID_ARG, manager.register_cuda, "g", b"\0" * 64, 0, 1024) == (
        "failed to register CUDA shared memory region: 'g', GPUs not supported")
    assert expect(Code.INVALID_ARG, manager.register_cuda, "", b"", 0, 0) == (
        "failed to register CUDA shared memory region: '', GPUs not supported")
    assert manager.status(None, "cuda") == []
    manager.unregister(None, "cuda")  # perf_analyzer's unregister-all succeeds
    manager.unregister("g", "cuda")


def test_cuda_region_status_texts(manager):
    # A CUDA region as the manager records one (no GPU needed to check texts).
    region = shm_mod._Region("g", "", 0, 4096, shm_mod.CUDA, 1)
    manager._regions["g"] = region
    assert manager.status(None, "cuda") == [{"name": "g", "device_id": 1, "byte_size": 4096}]
    assert manager.status(None) == []
    assert expect(Code.NOT_FOUND, manager.status, "g") == (
        "The region named 'g' is registered as CUDA shared memory, not system shared memory")
    manager.unregister("g", "system")  # another kind: nothing happens
    assert "g" in manager._regions
    del manager._regions["g"]


# ---------------------------------------------------------------- use by requests


def test_acquire_bounds(manager, posix_shm):
    _, key = posix_shm(64)
    manager.register("r", key, 0, 64)
    assert expect(Code.NOT_FOUND, manager.acquire, "q", 0, 4) == (
        "Unable to find shared memory region: 'q'")
    assert expect(Code.INVALID_ARG, manager.acquire, "r", 64, 0) == (
        "Invalid offset for shared memory region: 'r'")
    assert expect(Code.INVALID_ARG, manager.acquire, "r", 8, 57) == (
        "Invalid offset + byte size for shared memory region: 'r'")
    assert expect(Code.INVALID_ARG, manager.acquire, "r", 8, (1 << 64) - 4) == (
        "Integer overflow detected: byte_size (18446744073709551612) + offset (8) exceeds "
        "maximum value (18446744073709551615) for region 'r'")
    manager.acquire("r", 60, 4).release()


def test_input_array_is_a_view_and_checks_size(manager, posix_shm):
    seg, key = posix_shm(128)
    data = np.arange(16, dtype=np.float32)
    seg.buf[64:128] = data.tobytes()
    manager.register("r", key, 0, 128)
    arr, lease = manager.input_array("r", 64, 64, "FP32", [1, 16])
    np.testing.assert_array_equal(arr, data.reshape(1, 16))
    assert not arr.flags.writeable
    seg.buf[64:68] = np.float32(42).tobytes()  # the client writes: the view sees it
    assert arr[0, 0] == 42
    lease.release()
    lease.release()  # idempotent
    msg = expect(Code.INVALID_ARG, manager.input_array, "r", 64, 60, "FP32", [1, 16],
                 input_name="INPUT0", model_name="m", request_id="7")
    assert msg == ("[request id: 7] input byte size mismatch for input 'INPUT0' for model 'm'. "
                   "Expected 64, got 60")
    assert manager._regions["r"].refs == 0  # a failed input released its lease


def test_bytes_input_from_region(manager, posix_shm):
    raw = serialize_bytes_tensor(np.array([b"ab", b"", b"xyz"], dtype=np.object_))
    seg, key = posix_shm(64)
    seg.buf[:len(raw)] = raw
    manager.register("s", key, 0, 64)
    arr, lease = manager.input_array("s", 0, len(raw), "BYTES", [3])
    assert arr.tolist() == [b"ab", b"", b"xyz"]
    lease.release()
    assert expect(Code.INVALID_ARG, manager.input_array, "s", 0, len(raw), "BYTES", [4],
                  input_name="I", model_name="m") == (
        "[request id: <id_unknown>] expected 4 string elements for inference input 'I' for "
        "model 'm', got 3")


def test_output_writer(manager, posix_shm):
    seg, key = posix_shm(64)
    manager.register("o", key, 0, 64)
    lease = manager.output_writer("o", 16, 32)
    out = np.arange(8, dtype=np.float32)
    assert lease.write("OUT", out) == 32
    assert bytes(seg.buf[16:48]) == out.tobytes()
    assert expect(Code.INTERNAL, lease.write, "OUT", np.arange(9, dtype=np.float32)) == (
        "shared memory size specified with the request for output 'OUT' (32 bytes) should be "
        "at least 36 bytes to hold the results")
    strings = np.array([b"hi", b"there"], dtype=np.object_)
    n = lease.write("S", strings, "BYTES")
    assert bytes(seg.buf[16:16 + n]) == serialize_bytes_tensor(strings)
    lease.release()


def test_unregister_in_flight_is_deferred(manager, posix_shm):
    _, key = posix_shm(64)
    manager.register("r", key, 0, 64)
    manager.register("other", key, 0, 64)
    arr, lease = manager.input_array("r", 0, 64, "INT32", [16])
    manager.unregister("r")
    # still in the manager (and usable) until the request is done, as in Triton
    assert [s["name"] for s in manager.status()] == ["r", "other"]
    lease.release()
    assert [s["name"] for s in manager.status()] == ["other"]
    assert arr.sum() == 0  # a view that outlives the region still reads valid memory
    del arr
    gc.collect()
    manager.unregister()  # all
    assert manager.status() == []
    manager.unregister("never-registered")  # not an error


# ---------------------------------------------------------------- HTTP codec


def decode(doc, manager, body_extra=b""):
    body = json.dumps(doc).encode()
    headers = {"inference-header-content-length": str(len(body))} if body_extra else {}
    return decode_infer_request("m", "", headers.get(INFER_HEADER_LENGTH), body + body_extra,
                                shm=manager)


def test_codec_shm_inputs_and_outputs(manager, posix_shm):
    seg, key = posix_shm(256)
    a = np.arange(16, dtype=np.float32)
    seg.buf[:64] = a.tobytes()
    manager.register("in", key, 0, 128)
    manager.register("out", key, 128, 128)
    doc = {"id": "q", "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                  "parameters": {"shared_memory_region": "in",
                                                 "shared_memory_byte_size": 64}}],
           "outputs": [{"name": "OUTPUT0",
                        "parameters": {"shared_memory_region": "out",
                                       "shared_memory_offset": 16,
                                       "shared_memory_byte_size": 64}},
                       {"name": "OUTPUT1", "parameters": {"binary_data": False}}]}
    req = decode(doc, manager)
    assert type(req) is ShmInferRequest
    np.testing.assert_array_equal(req.inputs[0].data, a.reshape(1, 16))
    assert manager._regions["in"].refs == 1 and manager._regions["out"].refs == 1
    resp = InferResponse("m", "1", "q", [
        InferTensor("OUTPUT0", "FP32", [1, 16], (a * 2).reshape(1, 16)),
        InferTensor("OUTPUT1", "FP32", [1, 16], (a * 3).reshape(1, 16))])
    headers, body = encode_infer_response(resp, req)
    release_shm(req)
    assert manager._regions["in"].refs == 0 and manager._regions["out"].refs == 0
    doc = json.loads(body)
    assert doc["outputs"][0] == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
    assert doc["outputs"][1]["data"] == (a * 3).tolist()
    np.testing.assert_array_equal(np.frombuffer(seg.buf[144:208], np.float32), a * 2)


def test_codec_shm_errors_release_leases(manager, posix_shm):
    _, key = posix_shm(128)
    manager.register("r", key, 0, 128)
    shm_in = {"name": "INPUT0", "shape": [16], "datatype": "FP32",
              "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64}}

    def err(doc, code=Code.INVALID_ARG):
        from tests.unit.test_http_codec import triton_code
        with pytest.raises(ServerError) as ei:
            decode(doc, manager)
        msg = ei.value.message
        assert ei.value.code == triton_code(msg, code), ei.value
        assert manager._regions["r"].refs == 0
        return msg

    assert err({"inputs": [dict(shm_in, data=[1] * 16)]}) == (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
        "'shared_memory_region'")
    both = dict(shm_in, parameters=dict(shm_in["parameters"], binary_data_size=64))
    assert err({"inputs": [both]}).endswith("But set 'binary_data_size' 'shared_memory_region'")
    assert err({"inputs": [shm_in], "outputs": [
        {"name": "O", "parameters": {"shared_memory_region": "r", "classification": 2}}]}) == (
        "Output can't set both 'shared_memory_region' and 'classification'")
    assert err({"inputs": [shm_in], "outputs": [
        {"name": "O", "parameters": {"shared_memory_region": "r", "binary_data": True}}]}) == (
        "Output can't set both 'shared_memory_region' and 'binary_data'")
    assert err({"inputs": [shm_in], "outputs": [
        {"name": "O", "parameters": {"shared_memory_region": "zz"}}]}, Code.NOT_FOUND) == (
        "Unable to find shared memory region: 'zz'")
    bad = dict(shm_in, parameters={"shared_memory_region": 5})
    assert err({"inputs": [bad]}) == (
        "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string")
    bad = dict(shm_in, parameters={"shared_memory_region": "r", "shared_memory_offset": -1})
    assert err({"inputs": [bad]}) == (
        "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as "
        "unsigned-integer")
    bad = dict(shm_in, parameters={"shared_memory_region": "r", "shared_memory_byte_size": "8"})
    assert err({"inputs": [bad]}).startswith("Unable to parse 'shared_memory_byte_size'")
    bad = dict(shm_in, parameters={"shared_memory_region": "r", "shared_memory_offset": 100,
                                   "shared_memory_byte_size": 64})
    assert err({"inputs": [bad]}) == "Invalid offset + byte size for shared memory region: 'r'"
    # a later input failing releases the lease an earlier one took
    assert err({"inputs": [shm_in, {"name": "B", "shape": [1], "datatype": "FP32"}]}).startswith(
        "Input must set only one of the following fields")


# ---------------------------------------------------------------- raw binary requests


def raw_decode(body, config, model="m"):
    return decode_infer_request(model, "", "0", body, model_config=lambda name, version: config)


def cfg(dims, data_type="TYPE_FP32", mbs=0, n=1):
    return {"max_batch_size": mbs,
            "input": [{"name": f"IN{i}", "data_type": data_type, "dims": dims} for i in range(n)]}


def test_raw_binary_requests():
    a = np.arange(12, dtype=np.float32)
    req = raw_decode(a.tobytes(), cfg([-1], mbs=8))
    t = req.inputs[0]
    assert (t.name, t.datatype, t.shape) == ("IN0", "FP32", [1, 12])
    np.testing.assert_array_equal(t.data, a.reshape(1, 12))
    assert req.parameters == {"binary_data_output": True}
    req = raw_decode(a.tobytes(), cfg([3, -1]))
    assert req.inputs[0].shape == [3, 4]
    req = raw_decode(b"hello", cfg([1], "TYPE_STRING"))
    assert req.inputs[0].data.tolist() == [b"hello"]

    def err(body, config):
        return expect(Code.INVALID_ARG, raw_decode, body, config)

    assert err(a.tobytes(), cfg([16], n=2)) == (
        "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced "
        "but got 2 inputs in 'm' model configuration")
    assert err(a.tobytes(), cfg([-1, -1])) == (
        "[request id: <id_unknown>] The shape of the raw input 'IN0' can not be deduced because "
        "there are more than one variable-sized dimension")
    assert err(b"x", cfg([2], "TYPE_STRING")) == (
        "[request id: <id_unknown>] For BYTE datatype raw input 'IN0', the model must have "
        "input shape [1]")
    assert err(a.tobytes(), cfg([16])) == (
        "[request id: <id_unknown>] input byte size mismatch for input 'IN0' for model 'm'. "
        "Expected 64, got 48")
    assert expect(Code.INVALID_ARG, decode_infer_request, "m", "",
                  "0", b"x" * 20, 10,
                  model_config=lambda name, version: cfg([-1], "TYPE_UINT8")) == (
        "Raw input has a byte_size (20 bytes) that exceeds the maximum allowed value of 10 "
        "bytes. Use --http-max-input-size to increase the limit.")


def test_json_input_limits():
    doc = {"inputs": [{"name": "I", "shape": [1 << 40], "datatype": "FP32", "data": [1.0]}]}
    msg = expect(Code.INVALID_ARG, decode_infer_request, "m", "", None,
                 json.dumps(doc).encode(), 1 << 20)
    assert msg == ("JSON input 'I' has a byte_size (4398046511104 bytes) that exceeds the maximum "
                   "allowed value of 1048576 bytes. Use --http-max-input-size to increase the "
                   "limit.")
    doc["inputs"][0]["shape"] = [1 << 40, 1 << 40]
    msg = expect(Code.INVALID_ARG, decode_infer_request, "m", "", None,
                 json.dumps(doc).encode())
    assert msg == ("invalid shape for input 'I': shape [1099511627776,1099511627776] causes total "
                   "element count to exceed maximum size of 9223372036854775807")


# ---------------------------------------------------------------- --http-restricted-api


def test_parse_restricted_api():
    assert parse_restricted_api(["model-repository,shared-memory:admin-key=s3cret",
                                 "inference:infer-key=v"]) == {
        "model-repository": ("admin-key", "s3cret"),
        "shared-memory": ("admin-key", "s3cret"),
        "inference": ("infer-key", "v")}
    assert parse_restricted_api([]) == {}
    with pytest.raises(ValueError, match="unknown restricted api 'bogus'"):
        parse_restricted_api(["bogus:k=v"])
    with pytest.raises(ValueError, match="can not be specified in multiple config groups"):
        parse_restricted_api(["health:k=v", "health:k2=v2"])
    for bad in ("health", "health:k", "health:=v", ":k=v", "health:k="):
        with pytest.raises(ValueError) as ei:
            parse_restricted_api([bad])
        assert str(ei.value) == ("--http-restricted-api option format is "
                                 f"'<config name>:<setting>=<value>'. Got {bad}")


def test_posix_shm_fixture_cleans_up(posix_shm):
    seg, key = posix_shm(8)
    assert os.path.exists("/dev/shm" + key) or not os.path.isdir("/dev/shm")
