"""EXECUTION_ENV_PATH: a Python model's workers run in the model's own
environment (a conda-pack style archive, or a folder), as Triton's stub
does, and a bad environment fails the load with the reason."""

import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

MODEL = '''
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

import env_marker  # only the model's environment has it


class TritonPythonModel:
    def execute(self, requests):
        where = f"{env_marker.WHERE}|{sys.prefix}".encode()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([where], np.object_))])
                for _ in requests]
'''

CONFIG = '''
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{path}" }} }}
{extra}
'''


@pytest.fixture(scope="module")
def environment(tmp_path_factory):
    """A Python environment of the server's version with a package of its
    own (env_marker); numpy comes from the server's (a .pth file)."""
    folder = tmp_path_factory.mktemp("env") / "model_env"
    subprocess.run([sys.executable, "-m", "venv", "--copies", "--without-pip", str(folder)],
                   check=True, timeout=120)
    site = next((folder / "lib").glob("python3*/site-packages"))
    (site / "env_marker.py").write_text('WHERE = "model-env"\n')
    (site / "server_numpy.pth").write_text(str(Path(np.__file__).parent.parent) + "\n")
    return folder


def _model(repo: Path, name: str, path: str, extra: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(MODEL)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, path=path, extra=extra))


def _where(url: str, model: str) -> list:
    with httpclient.InferenceServerClient(url) as client:
        inp = httpclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], np.int32))
        out = client.infer(model, [inp]).as_numpy("OUT")[0]
    return out.decode().split("|")


def test_models_run_in_their_own_environment(tmp_path, start_server, environment):
    repo = tmp_path / "models"
    _model(repo, "from_folder", str(environment))
    # A conda-pack style archive in the model's folder, named as Triton's docs do.
    _model(repo, "from_archive", "$$TRITON_MODEL_DIRECTORY/model_env.tar.gz",
           extra="instance_group [ { count: 2 kind: KIND_CPU } ]")
    with tarfile.open(repo / "from_archive" / "model_env.tar.gz", "w:gz") as tar:
        tar.add(environment, arcname=".")
    s = start_server(repo)
    assert _where(s.url, "from_folder") == ["model-env", str(environment)]
    marker, prefix = _where(s.url, "from_archive")
    assert marker == "model-env"
    assert Path(prefix).name.startswith("pyserver-env-")  # unpacked once, for both instances
    assert (Path(prefix) / "bin").is_dir()


@pytest.mark.parametrize("path, extra, reason", [
    ("/nonexistent/env.tar.gz", "", "does not exist"),
    ("$$TRITON_MODEL_DIRECTORY/1/model.py", "", "is neither a folder nor a .tar.gz"),
    ("{env}", 'parameters { key: "pyserver_execution_mode" value { string_value: "thread" } }',
     'needs pyserver_execution_mode "process"'),
    ("{other_python}", "", "pyserver's workers need"),
])
def test_an_unusable_environment_fails_the_load(tmp_path, start_server, environment, path, extra,
                                                reason):
    # An "environment" whose Python is another version.
    other = tmp_path / "other_env"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "python3").write_text("#!/bin/sh\necho cpython-27\n")
    (other / "bin" / "python3").chmod(0o755)
    repo = tmp_path / "models"
    _model(repo, "bad_env", path.format(env=environment, other_python=other), extra)
    _model(repo, "good", str(environment))
    s = start_server(repo, exit_on_error=False)
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert index["bad_env"]["state"] == "UNAVAILABLE"
    assert "EXECUTION_ENV_PATH" in index["bad_env"]["reason"]
    assert reason in index["bad_env"]["reason"]
    assert _where(s.url, "good")[0] == "model-env"  # the rest keeps serving
