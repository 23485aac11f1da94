"""Triton's perf_analyzer against a decoupled Python model over gRPC
streaming (in a worker process, and on a server thread): it detects the
decoupled model from its config, asks for empty final responses and counts
every response until triton_final_response."""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest import use_execution_mode
from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)
from tests.integration.test_perf_analyzer import _perf_analyzer, run

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


@pytest.fixture(scope="module")
def perf_analyzer():
    return _perf_analyzer()


def test_perf_analyzer_streams_a_decoupled_python_model(perf_analyzer, tmp_path, python_mode,
                                                        start_grpc):  # noqa: F811
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "repeat", repo / "repeat")
    use_execution_mode(repo, python_mode)
    served = start_grpc(repo)
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"IN": [3]}]}))  # three responses per request
    text = run(perf_analyzer, served, "-m", "repeat", "-i", "grpc", "--streaming",
               "--input-data", str(data))
    assert "Detected decoupled model" in text, text
    requests = float(re.search(r"  Throughput: ([\d.]+) infer/sec", text).group(1))
    responses = float(re.search(r"Response Throughput: ([\d.]+) infer/sec", text).group(1))
    assert requests > 0 and responses == pytest.approx(3 * requests, rel=0.1), text
