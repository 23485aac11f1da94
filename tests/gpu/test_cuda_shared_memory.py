"""CUDA shared memory end to end, as perf_analyzer --shared-memory cuda and
Triton's simple_*_cudashm_client examples use it: a client process
allocates device memory, exports it (cudaIpcGetMemHandle), registers it over
HTTP and gRPC, writes its inputs there, names the regions in its requests
and reads the outputs the server wrote there. The client is its own process
because CUDA refuses to open an IPC handle in the process that made it.

Needs a GPU and CuPy (the server's CUDA shared memory runs on CuPy's
runtime bindings); skips, saying which is missing, otherwise."""

import subprocess
import sys
import textwrap

import pytest

from pyserver.testing import write_add_sub
from tests.gpu.conftest import no_gpu

cupy = pytest.importorskip("cupy", reason="CUDA shared memory needs CuPy (cupy-cuda12x or cupy-cuda13x)")


try:
    _gpus, _why = cupy.cuda.runtime.getDeviceCount(), "it counts 0 devices"
except Exception as err:  # e.g. a cupy-cuda13x wheel over an older driver
    _gpus, _why = 0, str(err)
if _gpus == 0:
    no_gpu(f"CuPy finds no CUDA device to use ({_why})")

# The client: registers an input region (INPUT0 then INPUT1) and an output
# region (OUTPUT0 then OUTPUT1) on device 0, runs add_sub twice through
# them (different values), checks the sums, the status and the unregister.
CLIENT = textwrap.dedent('''
    import base64, sys
    import cupy, numpy as np
    protocol, url = sys.argv[1], sys.argv[2]
    if protocol == "grpc":
        import tritonclient.grpc as client_module
    else:
        import tritonclient.http as client_module
    client = client_module.InferenceServerClient(url)
    rt = cupy.cuda.runtime
    nbytes = 16 * 4
    inp, out = cupy.cuda.alloc(2 * nbytes), cupy.cuda.alloc(2 * nbytes)

    def handle(mem):
        raw = base64.b64encode(bytes(rt.ipcGetMemHandle(mem.ptr)))
        return raw if protocol == "grpc" else raw.decode()  # the HTTP client sends it as JSON

    client.unregister_cuda_shared_memory()
    client.register_cuda_shared_memory("in", handle(inp), 0, 2 * nbytes)
    client.register_cuda_shared_memory("out", handle(out), 0, 2 * nbytes)
    status = client.get_cuda_shared_memory_status()
    # gRPC: a map by region name; HTTP: a list of region objects
    names = sorted(status.regions) if protocol == "grpc" else sorted(r["name"] for r in status)
    assert names == ["in", "out"], status
    for step in range(2):
        a = np.arange(16, dtype=np.float32).reshape(1, 16) + step
        b = np.full((1, 16), 5 + step, dtype=np.float32)
        rt.memcpy(inp.ptr, a.ctypes.data, nbytes, rt.memcpyHostToDevice)
        rt.memcpy(inp.ptr + nbytes, b.ctypes.data, nbytes, rt.memcpyHostToDevice)
        inputs = [client_module.InferInput("INPUT0", [1, 16], "FP32"),
                  client_module.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_shared_memory("in", nbytes)
        inputs[1].set_shared_memory("in", nbytes, offset=nbytes)
        outputs = [client_module.InferRequestedOutput("OUTPUT0"),
                   client_module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("out", nbytes)
        outputs[1].set_shared_memory("out", nbytes, offset=nbytes)
        result = client.infer("add_sub", inputs, outputs=outputs)
        # named in the answer (shape, no data): the values are in the region
        answered = result.get_output("OUTPUT0")
        assert answered is not None, result.get_response()
        if protocol == "grpc":
            assert list(answered.shape) == [1, 16]
            # an empty raw_output_contents entry per output, as Triton adds
            assert not any(result.get_response().raw_output_contents)
        else:
            assert answered["shape"] == [1, 16] and "data" not in answered, answered
        got = np.empty((2, 16), np.float32)
        rt.memcpy(got.ctypes.data, out.ptr, 2 * nbytes, rt.memcpyDeviceToHost)
        assert (got[0] == (a + b)[0]).all() and (got[1] == (a - b)[0]).all(), got
    client.unregister_cuda_shared_memory("in")
    client.unregister_cuda_shared_memory()
    status = client.get_cuda_shared_memory_status()
    assert len(status.regions if protocol == "grpc" else status) == 0, status
    print("ok")
''')


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_regions_carry_inputs_and_outputs(tmp_path, serve, protocol):
    write_add_sub(tmp_path)
    s = serve(tmp_path, allow_client_shm=True)
    url = s.grpc_url if protocol == "grpc" else s.url
    run = subprocess.run([sys.executable, "-c", CLIENT, protocol, url], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr
    stats = s.run(s.server.model_statistics, "add_sub")
    assert stats["inference_stats"]["success"]["count"] == 2
