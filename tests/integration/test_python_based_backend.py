"""Triton's Python-based backends: a model.py in BACKEND_DIR/NAME/ runs every
model whose config says `backend: "NAME"`, with the Python backend; the
model's own folder is its model_repository, the backend's folder is on its
path, and its auto_complete_config fills the models' configs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from pyserver.kernel.errors import ServerError

from .conftest import PYTHON_MODES, THREAD_MODE

# A backend written as Triton's vLLM backend is: one model.py, a helper
# module beside it, the model's settings in its config's parameters.
BACKEND_MODEL = textwrap.dedent('''
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils

    import scaling  # beside this file: the backend's folder is on the path


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            if not config.as_dict()["input"]:
                config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]})
                config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]})
                config.add_output({"name": "WHERE", "data_type": "TYPE_STRING", "dims": [1]})
            config.set_max_batch_size(8)
            return config

        def initialize(self, args):
            config = json.loads(args["model_config"])
            self.factor = float(config["parameters"]["factor"]["string_value"])
            self.where = json.dumps({"model_repository": args["model_repository"],
                                     "model_version": args["model_version"],
                                     "model_name": args["model_name"], "file": __file__})

        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                where = np.array([[self.where.encode()]] * x.shape[0], dtype=np.object_)
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", scaling.scale(x, self.factor)),
                    pb_utils.Tensor("WHERE", where)]))
            return responses
''')


def write_backend(root: Path, name: str = "scaler") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(BACKEND_MODEL)
    (folder / "scaling.py").write_text("def scale(x, factor):\n    return (x * factor).astype(x.dtype)\n")
    return folder


def write_model(repo: Path, name: str, backend: str, factor: float, extra: str = "") -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        f'backend: "{backend}"\n'
        f'parameters {{ key: "factor" value {{ string_value: "{factor}" }} }}\n{extra}\n')
    return folder


def http_infer(url: str, model: str, x: np.ndarray):
    client = httpclient.InferenceServerClient(url)
    tensor = httpclient.InferInput("IN", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    return result.as_numpy("OUT"), json.loads(result.as_numpy("WHERE")[0][0])


@pytest.fixture
def layout(tmp_path):
    backends, repo = tmp_path / "backends", tmp_path / "models"
    write_backend(backends)
    write_model(repo, "double", "scaler", 2)
    write_model(repo, "triple", "scaler", 3, THREAD_MODE)  # on the server's threads
    return backends, repo


def test_two_models_on_one_python_based_backend(layout, start_server):
    backends, repo = layout
    s = start_server(repo, backend_directory=str(backends))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for model, factor, mode in (("double", 2, PYTHON_MODES[0]), ("triple", 3, PYTHON_MODES[1])):
        out, where = http_infer(s.url, model, x)
        np.testing.assert_array_equal(out, x * factor)
        # the model's own folder is its repository; the code is the backend's
        assert where["model_repository"] == str(repo / model), mode
        assert where["model_name"] == model and where["model_version"] == "1"
        assert Path(where["file"]) == backends / "scaler" / "model.py"
        config = httpclient.InferenceServerClient(s.url).get_model_config(model)
        assert config["backend"] == "scaler" and config["max_batch_size"] == 8
        assert [i["name"] for i in config["input"]] == ["IN"]  # auto-completed by the backend
        assert [o["name"] for o in config["output"]] == ["OUT", "WHERE"]


def test_runtime_model_py_and_lookup_errors(tmp_path, start_server):
    backends, repo = tmp_path / "backends", tmp_path / "models"
    write_backend(backends)
    write_model(repo, "named", "scaler", 5, 'runtime: "model.py"')
    s = start_server(repo, backend_directory=str(backends))
    np.testing.assert_array_equal(http_infer(s.url, "named", np.ones((1, 2), np.float32))[0],
                                  np.full((1, 2), 5, np.float32))

    missing = tmp_path / "missing"
    write_model(missing, "nobody", "no_such_backend", 1)
    with pytest.raises(ServerError) as err:
        start_server(missing, backend_directory=str(backends))
    assert "unable to find backend library for backend 'no_such_backend', try specifying " \
           "runtime on the model configuration" in err.value.message

    asked = tmp_path / "asked"
    write_model(asked, "asked", "absent", 1, 'runtime: "model.py"')
    with pytest.raises(ServerError) as err:
        start_server(asked, backend_directory=str(backends))
    assert "unable to find Python backend based backend library 'model.py' for backend " \
           f"'absent', searched: '{backends / 'absent' / 'model.py'}'" in err.value.message


def test_a_model_of_the_python_backend_runs_its_own_model_py(tmp_path, start_server):
    """backend: "python" is the built-in Python backend, with the model's own
    model.py, even where the backend directory has a python/model.py."""
    import shutil

    backends = tmp_path / "backends"
    write_backend(backends, "python")
    repo = tmp_path / "models"
    shutil.copytree(Path(__file__).parents[1] / "models" / "python" / "add_sub", repo / "add_sub")
    s = start_server(repo, backend_directory=str(backends))
    client = httpclient.InferenceServerClient(s.url)
    a, b = np.ones(4, np.float32), np.full(4, 2, np.float32)
    inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_backend_directory_flag_over_grpc(layout):
    """`tritonserver --backend-directory DIR`, as Triton's command line."""
    import socket

    backends, repo = layout
    ports = []
    for _ in range(3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    http, grpc, metrics = ports
    proc = subprocess.Popen([sys.executable, "-m", "pyserver", f"--model-repository={repo}",
                             f"--backend-directory={backends}", f"--http-port={http}",
                             f"--grpc-port={grpc}", f"--metrics-port={metrics}",
                             "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                             "--metrics-address=127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if client.is_server_ready():
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "not ready"
            time.sleep(0.2)
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        for model, factor in (("double", 2), ("triple", 3)):
            tensor = grpcclient.InferInput("IN", [1, 4], "FP32")
            tensor.set_data_from_numpy(x)
            result = client.infer(model, [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUT"), x * factor)
        client.close()
    finally:
        proc.terminate()
        proc.wait(30)
