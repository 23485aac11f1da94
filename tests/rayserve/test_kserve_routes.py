"""The KServe v2 routes a Ray Serve replica answers (pyserver.rayserve.kserve),
over an in-process ``tritonserver.Server`` with no Ray: bodies as
tritonclient writes them (JSON and binary tensors), BYTES both ways, the
request's id, parameters and sequence flags reaching the model through the
API, and errors in Triton's shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

tritonserver = pytest.importorskip("tritonserver")

import tritonclient.http as httpclient  # noqa: E402

from pyserver.rayserve.kserve import KServeRoutes  # noqa: E402
from pyserver.testing import write_add_sub  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


@pytest.fixture(scope="module")
def routes(tmp_path_factory):
    repo = tmp_path_factory.mktemp("kserve_repo")
    write_add_sub(repo)
    shutil.copytree(MODELS / "bytes_echo", repo / "bytes_echo")
    server = tritonserver.Server(model_repository=str(repo)).start(wait_until_ready=True)
    yield KServeRoutes(server)
    server.stop()


async def _infer(routes, model, inputs, outputs=None, **kwargs):
    body, header_length = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs, **kwargs)
    headers = {} if header_length is None else {"inference-header-content-length":
                                                str(header_length)}
    status, answer_headers, answer = await routes.handle(
        "POST", f"/v2/models/{model}/infer", headers, body)
    answer_headers = dict(answer_headers)
    if status != 200:
        return status, json.loads(answer)
    length = answer_headers.get("Inference-Header-Content-Length")
    return status, httpclient.InferenceServerClient.parse_response_body(
        answer, header_length=None if length is None else int(length))


async def test_health_metadata_and_unknown_routes(routes):
    assert (await routes.handle("GET", "/v2/health/live", {}, b""))[0] == 200
    assert (await routes.handle("GET", "/v2/health/ready", {}, b""))[0] == 200
    status, _, body = await routes.handle("GET", "/v2", {}, b"")
    assert status == 200 and json.loads(body)["extensions"]
    status, _, body = await routes.handle("GET", "/v2/models/bytes_echo/versions/1", {}, b"")
    assert status == 200 and json.loads(body)["name"] == "bytes_echo"
    status, _, body = await routes.handle("GET", "/v2/models/add_sub/stats", {}, b"")
    assert status == 200 and json.loads(body)["model_stats"]
    status, _, body = await routes.handle("GET", "/v2/models/nope/config", {}, b"")
    assert status == 404 and set(json.loads(body)) == {"error"}
    status, _, body = await routes.handle("GET", "/v2/nowhere", {}, b"")
    assert status == 404 and json.loads(body) == {"error": "Not Found"}
    status, _, body = await routes.handle("GET", "/v2/models/add_sub/infer", {}, b"")
    assert status == 405 and set(json.loads(body)) == {"error"}
    status, _, body = await routes.handle("POST", "/v2/repository/index", {},
                                          b'{"ready": true}')
    assert status == 200 and {r["name"] for r in json.loads(body)} == {"add_sub", "bytes_echo"}


@pytest.mark.parametrize("binary", [True, False])
async def test_bytes_both_ways(routes, binary):
    text = np.array([[b"ab", b"hello"]], dtype=np.object_)
    tensor = httpclient.InferInput("TEXT", [1, 2], "BYTES")
    tensor.set_data_from_numpy(text, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("UPPER", binary_data=binary),
               httpclient.InferRequestedOutput("LENGTHS", binary_data=binary)]
    status, result = await _infer(routes, "bytes_echo", [tensor], outputs)
    assert status == 200
    # (tritonclient gives JSON BYTES back as str, binary ones as bytes)
    upper = [[x if isinstance(x, bytes) else x.encode() for x in row]
             for row in result.as_numpy("UPPER").tolist()]
    assert upper == [[b"AB", b"HELLO"]]
    assert result.as_numpy("LENGTHS").tolist() == [[2, 5]]
    assert [o["name"] for o in result.get_response()["outputs"]] == ["UPPER", "LENGTHS"]


async def test_request_id_parameters_and_timeout_reach_the_model(routes):
    tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"x"]], dtype=np.object_))
    status, result = await _infer(routes, "bytes_echo", [tensor], request_id="id-1",
                                  parameters={"color": "red"}, timeout=5_000_000)
    assert status == 200
    response = result.get_response()
    assert response["id"] == "id-1"
    parameters = response["parameters"]
    assert parameters["request_id"] == "id-1"
    assert json.loads(parameters["params"]) == {"color": "red"}
    assert parameters["timeout"] == 5_000_000


async def test_errors_in_triton_shape(routes):
    a = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.ones((1, 16), np.float32))
    status, doc = await _infer(routes, "add_sub", [a])
    assert status == 400 and "INPUT1" in doc["error"]
    b = httpclient.InferInput("INPUT1", [1, 16], "FP32")
    b.set_data_from_numpy(np.ones((1, 16), np.float32))
    status, doc = await _infer(routes, "add_sub", [a, b],
                               [httpclient.InferRequestedOutput("OUTPUT9")])
    assert status == 400 and "OUTPUT9" in doc["error"]
    status, doc = await _infer(routes, "add_sub", [a, b],
                               [httpclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert status == 501 and "classification" in doc["error"]
    status, _, body = await routes.handle("POST", "/v2/models/add_sub/infer",
                                          {"inference-header-content-length": "999"}, b"{}")
    assert status == 400 and set(json.loads(body)) == {"error"}
    status, _, body = await routes.handle("POST", "/v2/models/add_sub/infer",
                                          {"content-encoding": "br"}, b"{}")
    assert status == 501 and set(json.loads(body)) == {"error"}


async def test_sequence_parameters_become_the_api_correlation_id_and_flags(routes):
    tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"x"]], dtype=np.object_))
    status, result = await _infer(routes, "bytes_echo", [tensor], sequence_id=42,
                                  sequence_start=True, sequence_end=True)
    assert status == 200, result
    parameters = result.get_response()["parameters"]
    assert parameters["correlation_id"] == 42
    assert parameters["flags"] == int(tritonserver.RequestFlag.SEQUENCE_START
                                      | tritonserver.RequestFlag.SEQUENCE_END)
    assert json.loads(parameters["params"]) == {}
