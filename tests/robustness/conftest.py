"""The server the fuzzers attack: the CLI in its own process (its file
descriptors and memory are its own), with an ONNX model, a Python model and
a decoupled one. PYSERVER_FUZZ_SEED and PYSERVER_FUZZ_COUNT replay a run."""

import os
import shutil
from pathlib import Path

import pytest

from pyserver.testing import write_add_sub
from tests.integration.conftest import start_server  # noqa: F401 (fixture)
from tests.integration.test_cli import start_cli, wait_until_ready

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"
SEED = int(os.environ.get("PYSERVER_FUZZ_SEED", "0"))
COUNT = int(os.environ.get("PYSERVER_FUZZ_COUNT", "300"))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Target:
    def __init__(self, proc, client, ports):
        self.proc, self.client = proc, client
        self.http_port, self.grpc_port = ports[0], ports[1]

    def check_alive_and_correct(self):
        """The server is up and a correct infer gives correct numbers."""
        import numpy as np
        import tritonclient.http as httpclient

        assert self.proc.poll() is None, "the server died"
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for t in inputs:
            t.set_data_from_numpy(a)
        result = self.client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 0 * a)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    repo = tmp_path_factory.mktemp("fuzz_repo")
    write_add_sub(repo)
    write_add_sub(repo, name="add_sub_batched", extra="dynamic_batching { }")
    for name in ("bytes_echo", "repeat"):
        shutil.copytree(MODELS / name, repo / name)
    proc, client, ports = start_cli(["--model-repository", str(repo),
                                     "--model-control-mode", "explicit",
                                     "--load-model", "*", "--allow-client-shm", "true",
                                     "--log-verbose", "0"])
    try:
        wait_until_ready(client, proc, timeout=90)
        yield Target(proc, client, ports)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except Exception:
            proc.kill()
