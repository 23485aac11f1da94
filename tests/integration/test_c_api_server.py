"""Triton's in-process C API from a C program: tests/c_api/server_program.c,
compiled against our tritonserver.h and linked with -ltritonserver as a
user's program is, starts a server with TRITONSERVER_ServerNew (Python
started inside it by the library), queries it, runs inferences through
TRITONSERVER_ServerInferAsync and stops it. Each test runs the program on
its own repository and checks what it printed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pyserver.engine import triton_c
from pyserver.testing import ADD_SUB_CONFIG, write_add_sub

ROOT = Path(__file__).resolve().parents[2]
HEADERS = ROOT / "csrc" / "include" / "pyserver" / "triton"
ENGINE = Path(triton_c.__file__).parent
PYTHON_ADD_SUB = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the test program")


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("c_api") / "server_program"
    subprocess.run([CC, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE", "-Wall",
                    "-Werror", "-pthread", f"-I{HEADERS}",
                    str(ROOT / "tests" / "c_api" / "server_program.c"), "-o", str(out),
                    f"-L{ENGINE}", "-ltritonserver", f"-Wl,-rpath,{ENGINE}"], check=True)
    return out


def run(program: Path, repo: Path, mode: str, *more: Path,
        **env) -> tuple[int, dict[str, list[str]]]:
    """The program's exit code and its lines by step ("step: what")."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(env)
    done = subprocess.run([str(program), str(repo), mode, *map(str, more)], capture_output=True,
                          text=True, timeout=180, env=environment)
    steps: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        step, _, what = line.partition(": ")
        steps.setdefault(step, []).append(what)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, steps


def test_a_c_program_serves_the_onnx_model_in_process(program, tmp_path):
    write_add_sub(tmp_path / "repo")
    rc, steps = run(program, tmp_path / "repo", "serve")
    assert rc == 0, steps
    assert steps["server"] == ["live and ready"]
    assert steps["api"] == ["1.34"]
    metadata = json.loads(steps["metadata"][0])
    assert metadata["name"] == "c-program" and "statistics" in metadata["extensions"]
    assert json.loads(steps["index"][0]) == [{"name": "add_sub", "version": "1",
                                              "state": "READY"}]
    assert steps["add_sub ready"] == ["1"]
    model = json.loads(steps["model metadata"][0])
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    config = json.loads(steps["model config"][0])
    assert config["max_batch_size"] == 8 and config["input"][1]["name"] == "INPUT1"
    assert steps["config version 2"] == [
        "Unsupported: model configuration version 2 not supported, supported versions are: 1"]
    assert steps["unknown model metadata"] == [
        "Not found: Request for unknown model: 'no_such_model' is not found"]
    assert steps["infer"] == ["right"] * 3
    assert steps["infer wrong input"] == [  # core's model lookup: no request id in it
        "Invalid argument: unexpected inference input 'WRONG' for model 'add_sub'"]
    assert steps["infer unknown model"][0].startswith("Not found: ")
    stats = json.loads(steps["statistics"][0])["model_stats"][0]
    assert stats["name"] == "add_sub" and stats["inference_count"] == 3
    assert steps["batch properties"] == ["first dim"]
    assert steps["metrics"] == ['nv_inference_request_success{model="add_sub",version="1"} 3']
    assert steps["poll"] == ["ok"]
    assert steps["live after stop"] == ["0"]
    assert steps["metadata after stop"] == ["Unavailable: Server is not running"]
    assert steps["infer after stop"] == ["Unavailable: Server is not running"]
    assert "deleted" in steps


def test_a_python_model_gets_its_worker_from_a_c_program(program, tmp_path):
    """The Python model's worker is started with the interpreter pyserver was
    built with, not the program itself."""
    model = tmp_path / "repo" / "add_sub"
    (model / "1").mkdir(parents=True)
    shutil.copy(PYTHON_ADD_SUB, model / "1" / "model.py")
    (model / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
        name="add_sub", backend='backend: "python"', size=16, max_batch_size=8, instances=1,
        extra=""))
    rc, steps = run(program, tmp_path / "repo", "serve")
    assert rc == 0, steps
    assert steps["infer"] == ["right"] * 3
    assert steps["infer wrong input"][0].startswith("Invalid argument: ")


def test_explicit_model_control_from_a_c_program(program, tmp_path):
    write_add_sub(tmp_path / "repo")
    write_add_sub(tmp_path / "second", name="add_sub2")
    rc, steps = run(program, tmp_path / "repo", "explicit", tmp_path / "second")
    assert rc == 0, steps
    assert steps["ready index before load"] == ["[]"]
    assert steps["infer before load"][0].startswith("Not found: ")
    assert steps["load unknown"][0].startswith("Internal: failed to load 'no_such_model'")
    assert steps["infer"] == ["right"] * 3
    assert steps["add_sub ready after unload"] == ["0"]
    # a repository registered while the server runs, then unregistered
    assert steps["register with a name mapping"][0].startswith("Unsupported: ")
    assert steps["add_sub2 ready"] == ["1"]
    assert steps["infer add_sub2"] == ["right"]
    assert steps["load after unregister"][0].startswith("Internal: failed to load 'add_sub2'")


def test_strict_model_config_is_the_c_api_default(program, tmp_path):
    """Triton's C API leaves auto-complete off unless the program turns
    strict model config off (its command line does the opposite): a config
    with no inputs is then the model's whole config, and the model fails to
    load. The "loose" run also names another config file
    (configs/alt.pbtxt)."""
    repo = tmp_path / "repo"
    write_add_sub(repo, name="bare")
    (repo / "bare" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    (repo / "bare" / "configs").mkdir()
    (repo / "bare" / "configs" / "alt.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 2\n')
    rc, steps = run(program, repo, "strict")
    assert rc == 4, steps
    assert steps["server new"] == [
        "Internal: failed to load all models (bare: unable to load model 'bare', configuration "
        "expects 0 inputs, model provides 2)"]
    rc, steps = run(program, repo, "loose")
    assert rc == 0, steps
    config = json.loads(steps["bare config"][0])
    assert [t["name"] for t in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["max_batch_size"] == 2


def test_server_new_fails_with_tritons_text_when_a_model_fails(program, tmp_path):
    repo = tmp_path / "repo"
    write_add_sub(repo)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    rc, steps = run(program, repo, "serve")
    assert rc == 4
    assert steps["server new"][0].startswith("Internal: failed to load all models (broken: ")
    rc, steps = run(program, tmp_path / "missing", "serve")
    assert rc == 4
    assert steps["server new"] == [f"Internal: failed to stat file {tmp_path / 'missing'}"]


def test_server_new_says_why_python_cannot_start(program, tmp_path):
    write_add_sub(tmp_path / "repo")
    rc, steps = run(program, tmp_path / "repo", "serve", PYSERVER_LIBPYTHON="/no/libpython.so")
    assert rc == 4
    assert steps["server new"][0].startswith(
        "Unavailable: could not load the Python runtime /no/libpython.so: ")


def test_a_python_program_calls_the_c_api_through_ctypes(tmp_path):
    """A process that already runs Python (this one) and calls
    TRITONSERVER_ServerNew through ctypes: the library uses the running
    interpreter instead of starting one."""
    import ctypes

    write_add_sub(tmp_path / "repo")
    lib = ctypes.CDLL(str(ENGINE / "libtritonserver.so"))
    lib.TRITONSERVER_ErrorMessage.restype = ctypes.c_char_p
    for name in ("TRITONSERVER_ServerOptionsNew", "TRITONSERVER_ServerOptionsSetModelRepositoryPath",
                 "TRITONSERVER_ServerOptionsSetStrictModelConfig", "TRITONSERVER_ServerNew",
                 "TRITONSERVER_ServerIsReady", "TRITONSERVER_ServerModelMetadata",
                 "TRITONSERVER_MessageSerializeToJson", "TRITONSERVER_MessageDelete",
                 "TRITONSERVER_ServerDelete", "TRITONSERVER_ServerOptionsDelete"):
        getattr(lib, name).restype = ctypes.c_void_p

    def ok(err):
        assert not err, lib.TRITONSERVER_ErrorMessage(ctypes.c_void_p(err)).decode()

    options, server = ctypes.c_void_p(), ctypes.c_void_p()
    ok(lib.TRITONSERVER_ServerOptionsNew(ctypes.byref(options)))
    ok(lib.TRITONSERVER_ServerOptionsSetModelRepositoryPath(options,
                                                            str(tmp_path / "repo").encode()))
    ok(lib.TRITONSERVER_ServerOptionsSetStrictModelConfig(options, ctypes.c_bool(False)))
    ok(lib.TRITONSERVER_ServerNew(ctypes.byref(server), options))
    ok(lib.TRITONSERVER_ServerOptionsDelete(options))
    try:
        ready = ctypes.c_bool(False)
        ok(lib.TRITONSERVER_ServerIsReady(server, ctypes.byref(ready)))
        assert ready.value
        message, base, size = ctypes.c_void_p(), ctypes.c_char_p(), ctypes.c_size_t()
        ok(lib.TRITONSERVER_ServerModelMetadata(server, b"add_sub", ctypes.c_int64(-1),
                                                ctypes.byref(message)))
        ok(lib.TRITONSERVER_MessageSerializeToJson(message, ctypes.byref(base),
                                                   ctypes.byref(size)))
        assert json.loads(ctypes.string_at(base, size.value))["name"] == "add_sub"
        ok(lib.TRITONSERVER_MessageDelete(message))
    finally:
        ok(lib.TRITONSERVER_ServerDelete(server))


PIPELINE = """name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
ensemble_scheduling { step [ {
  model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
"""

TIMESTAMPS = ("REQUEST_START QUEUE_START COMPUTE_START COMPUTE_INPUT_END COMPUTE_OUTPUT_START "
              "COMPUTE_END REQUEST_END")


def test_a_c_program_traces_its_own_requests(program, tmp_path):
    """TRITONSERVER_InferenceTraceNew / _TensorNew given to ServerInferAsync:
    the request's activities reach the program's callbacks in order, its
    tensors at the TENSORS level, then the trace comes back to its release
    callback naming its model, version, request id and context; a refused
    request's trace still comes back; an ensemble's step reports as a child
    trace with a new id under the program's. Server-side tracing is off
    throughout (no --trace-config), and an untraced request after them runs."""
    write_add_sub(tmp_path / "repo")
    (tmp_path / "repo" / "pipeline" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "pipeline" / "config.pbtxt").write_text(PIPELINE)
    rc, steps = run(program, tmp_path / "repo", "trace")
    assert rc == 0, steps
    own = "own[id=own parent=0 model={model} version=1 request=c-program context=ctx-1]"
    assert steps["timestamps"] == ["right"]
    assert steps["timestamps id"] == ["set"]
    assert steps["timestamps activities"] == [TIMESTAMPS]
    assert steps["timestamps released"] == [own.format(model="add_sub")]
    assert steps["timestamps in order"] == ["yes"]

    assert steps["tensors"] == ["right"]
    words = steps["tensors activities"][0].split()
    assert " ".join(w for w in words if ":" not in w) == TIMESTAMPS
    tensors = [w for w in words if ":" in w]
    assert tensors == [  # INPUT0 = 0..15, INPUT1 = 2: last elements 15, 2, 17 and 13
        "TENSOR_QUEUE_INPUT:INPUT0:FP32:64:1x16:cpu:last=15",
        "TENSOR_QUEUE_INPUT:INPUT1:FP32:64:1x16:cpu:last=2",
        "TENSOR_BACKEND_INPUT:INPUT0:FP32:64:1x16:cpu:last=15",
        "TENSOR_BACKEND_INPUT:INPUT1:FP32:64:1x16:cpu:last=2",
        "TENSOR_BACKEND_OUTPUT:OUTPUT0:FP32:64:1x16:cpu:last=17",
        "TENSOR_BACKEND_OUTPUT:OUTPUT1:FP32:64:1x16:cpu:last=13",
    ], tensors

    assert steps["refused"][0].startswith("Invalid argument: ")
    assert steps["refused released"] == [own.format(model="add_sub")]

    assert steps["ensemble"] == ["right"]
    activities = steps["ensemble activities"][0].split()
    assert [a for a in activities if not a.startswith("child:")] == [
        "REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert [a[6:] for a in activities if a.startswith("child:")] == TIMESTAMPS.split()
    assert steps["ensemble released"] == [
        "child[id=new parent=own model=add_sub version=1 request=c-program context=] "
        + own.format(model="pipeline")]
    assert steps["untraced"] == ["right"]
    assert "deleted" in steps
