"""Custom batching, as Triton has it: a library built for Triton's
TRITONBACKEND_ModelBatch* API (tests/backends_c/volume_batching.c, compiled
at test time) found in the backend's folder, or named by a model's
TRITON_BATCH_STRATEGY_PATH, ends the dynamic batcher's batches (over HTTP and
gRPC); a library
that is missing, outside the model's folder, incomplete or failing fails
the model's load with Triton's text, and the server keeps serving."""

from __future__ import annotations

import ctypes
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .test_grpc import start_grpc  # noqa: F401  (fixture)
from .test_triton_c_backend import CC, build_backend, build_library, write_model

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the test libraries")

# 300 ms of batching delay: without the library all 8 requests would share
# one batch; with 16 bytes per batch and 8 per request, batches hold 2.
IDENTITY = '''backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
parameters { key: "MAX_BATCH_VOLUME_BYTES" value { string_value: "%s" } }
'''
PLAIN = IDENTITY.replace('parameters { key: "MAX_BATCH_VOLUME_BYTES" value { string_value: "%s" } }\n',
                         "")
PYTHON = '''backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
parameters { key: "MAX_BATCH_VOLUME_BYTES" value { string_value: "8" } }
parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { string_value: "%s" } }
'''
ECHO = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
'''


def infer_many(url: str, model: str, n: int = 8, client=httpclient) -> None:
    def call(i):
        x = np.full((1, 2), float(i), dtype=np.float32)  # 8 bytes
        inp = client.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(x)
        out = client.InferenceServerClient(url).infer(model, [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, x)

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(call, range(n)))


def batch_sizes(url: str, model: str) -> dict[int, int]:
    stats = httpclient.InferenceServerClient(url).get_inference_statistics(model)
    return {b["batch_size"]: b["compute_infer"]["count"]
            for b in stats["model_stats"][0]["batch_stats"]}


def test_strategy_from_backend_folder_and_from_parameter(tmp_path, start_grpc):  # noqa: F811
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    # shared by every identity model: the backend's folder
    build_library("volume_batching", backends / "identity" / "batchstrategy.so")
    write_model(repo, "identity", IDENTITY % "16")
    write_model(repo, "echo", "")
    library = build_library("volume_batching", repo / "echo" / "lib" / "volume.so")
    (repo / "echo" / "config.pbtxt").write_text('name: "echo"\n' + PYTHON % library)
    (repo / "echo" / "1" / "model.py").write_text(ECHO)
    s = start_grpc(repo, backend_directory=str(backends))

    infer_many(s.url, "identity")
    infer_many(s.grpc_url, "identity", client=grpcclient)
    sizes = batch_sizes(s.url, "identity")
    assert sum(size * count for size, count in sizes.items()) == 16
    assert max(sizes) == 2, sizes  # the library's volume, not the 300 ms delay

    infer_many(s.url, "echo", 4)  # 8 bytes per batch: one request each
    assert batch_sizes(s.url, "echo") == {1: 4}


def test_without_a_library_the_delay_batches(tmp_path, start_server):
    """The same model and load with no library form larger batches: what
    the test above sees is the library's doing."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    write_model(repo, "identity", PLAIN)
    s = start_server(repo, backend_directory=str(backends))
    infer_many(s.url, "identity")
    assert max(batch_sizes(s.url, "identity")) > 2


def load_error(client, name: str) -> str:
    with pytest.raises(InferenceServerException) as err:
        client.load_model(name)
    assert err.value.status() == "400"
    return err.value.message()


def test_bad_libraries_fail_the_load(tmp_path, start_server):
    backends, repo = tmp_path / "backends", tmp_path / "models"
    identity = build_backend(backends, "identity")
    library = build_library("volume_batching", tmp_path / "outside" / "volume.so")
    write_model(repo, "identity", PLAIN)

    def model(name: str, text: str) -> Path:
        write_model(repo, name, text)
        return repo / name

    model("escapes", IDENTITY % "16" + 'parameters { key: "TRITON_BATCH_STRATEGY_PATH" '
                    f'value {{ string_value: "{library}" }} }}\n')
    missing = model("missing", IDENTITY % "16")
    with (missing / "config.pbtxt").open("a") as f:
        f.write('parameters { key: "TRITON_BATCH_STRATEGY_PATH" value { string_value: "'
                f'{missing / "nothing.so"}" }} }}\n')
    incomplete = model("incomplete", IDENTITY % "16")
    shutil.copy(identity, incomplete / "1" / "batchstrategy.so")  # a backend, not a strategy
    failing = model("failing", PLAIN)  # the library wants MAX_BATCH_VOLUME_BYTES
    build_library("volume_batching", failing / "batchstrategy.so")
    model("sequence", PLAIN.replace(
        "dynamic_batching { max_queue_delay_microseconds: 300000 }",
        "sequence_batching { }") + 'parameters { key: "TRITON_BATCH_STRATEGY_PATH" '
        f'value {{ string_value: "{library}" }} }}\n')

    s = start_server(repo, backend_directory=str(backends), model_control_mode="explicit",
                     load_models=["identity"])
    client = httpclient.InferenceServerClient(s.url)
    assert "Batching library path escapes model repository." in load_error(client, "escapes")
    assert f"Batching library path not found: {missing / 'nothing.so'}" in \
        load_error(client, "missing")
    assert (f"{incomplete / '1' / 'batchstrategy.so'} does not define all required custom "
            "batching functions for model incomplete") in load_error(client, "incomplete")
    assert "Unable to find MAX_BATCH_VOLUME_BYTES parameter in model config" in \
        load_error(client, "failing")
    assert ("TRITON_BATCH_STRATEGY_PATH cannot be specified with sequence batcher, using "
            "default batching strategy") in load_error(client, "sequence")
    for name in ("escapes", "missing", "incomplete", "failing", "sequence"):
        assert not client.is_model_ready(name)
    infer_many(s.url, "identity", 2)  # the server keeps serving


def test_unloading_under_load_answers_every_request_and_finalizes_the_library(
        tmp_path, start_server):
    """Requests queued under the library when its model unloads are each
    answered (or refused), none hangs, and once the model is gone the
    library's batcher and every batch record it made are finalized."""
    backends, repo = tmp_path / "backends", tmp_path / "models"
    build_backend(backends, "identity")
    library = build_library("volume_batching", backends / "identity" / "batchstrategy.so")
    write_model(repo, "identity", IDENTITY % "16")
    s = start_server(repo, backend_directory=str(backends), model_control_mode="explicit",
                     load_models=["identity"])
    counters = ctypes.CDLL(str(library))  # the server's copy: same path, same handle
    assert counters.volume_batching_live() == 1  # the batcher
    client = httpclient.InferenceServerClient(s.url)

    def call(i):
        x = np.full((1, 2), float(i), dtype=np.float32)
        inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(x)
        try:
            out = httpclient.InferenceServerClient(s.url, network_timeout=30).infer(
                "identity", [inp]).as_numpy("OUTPUT0")
        except InferenceServerException as err:
            return err.status()
        np.testing.assert_array_equal(out, x)
        return "ok"

    with ThreadPoolExecutor(12) as pool:
        outcomes = [pool.submit(call, i) for i in range(12)]
        time.sleep(0.1)  # queued, most behind the 300 ms delay
        client.unload_model("identity")
        results = [f.result(timeout=60) for f in outcomes]
    assert set(results) <= {"ok", "400", "503"}, results
    assert not client.is_model_ready("identity")
    assert counters.volume_batching_live() == 0  # finalized by the unload itself
