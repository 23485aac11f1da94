"""Iterative sequences (sequence_batching { iterative_sequence: true }): a
Python model releases a request with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
and it runs again in a later batch, as Triton's Python backend does it
(request rescheduling), over HTTP and gRPC, in both execution modes."""

import concurrent.futures
import json
import queue
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from pyserver.frontends.grpc import GrpcFrontend
from pyserver.kernel.types import InferRequest, InferTensor
from pyserver.model.sequence import NOT_ITERATIVE
from tests.integration.conftest import use_execution_mode

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"


def _variant(repo: Path, name: str, edit) -> None:
    """A copy of the iterative model under ``name``, its config edited."""
    shutil.copytree(MODELS / "iterative", repo / name)
    config = repo / name / "config.pbtxt"
    config.write_text(edit(config.read_text().replace('name: "iterative"', f'name: "{name}"')))


@pytest.fixture
def served(tmp_path, start_server, python_mode):
    repo = tmp_path / "models"
    repo.mkdir()
    shutil.copytree(MODELS / "iterative", repo / "iterative")
    _variant(repo, "iterative_stream", lambda c: c + "model_transaction_policy { decoupled: true }\n")
    # The same model without iterative_sequence: rescheduling is refused.
    plain = lambda c: c[:c.index("# Runs")] + c[c.index("input ["):]  # noqa: E731
    _variant(repo, "not_iterative", plain)
    _variant(repo, "not_iterative_stream",
             lambda c: plain(c) + "model_transaction_policy { decoupled: true }\n")
    use_execution_mode(repo, python_mode)
    s = start_server(repo)
    frontend = GrpcFrontend(s.server, "127.0.0.1", 0)
    s.call(frontend.start())
    s.grpc_url = f"127.0.0.1:{frontend.port}"
    yield s
    s.call(frontend.stop(5))


def _http_infer(url, model, n, mode=""):
    client = httpclient.InferenceServerClient(url)
    try:
        inp = httpclient.InferInput("IN", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[n]], np.int32))
        return client.infer(model, [inp], parameters={"mode": mode} if mode else None)
    finally:
        client.close()


def _runs(result) -> list:
    return json.loads(result.as_numpy("NOTE").reshape(-1)[0])


def test_rescheduled_requests_run_again_sharing_batches(served):
    # Six requests of two runs each on four sequence slots: four start
    # together, run twice in batches of four, and their ends free the slots
    # for the last two (idle slots are kept for a minute).
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: _http_infer(served.url, "iterative", 2), range(6)))
    ids = set()
    for result in results:
        assert result.as_numpy("OUT").tolist() == [[2]]
        runs = _runs(result)
        assert len(runs) == 2
        corr = runs[0]["corr"]
        assert corr > 0 and all(r["corr"] == corr for r in runs)  # one sequence of its own
        assert [r["flags"] for r in runs] == [1, 0]  # START on the first run only
        assert all(corr in r["with"] for r in runs)
        ids.add(corr)
    assert len(ids) == 6
    batch_sizes = [r["batch"] for result in results for r in _runs(result)]
    assert max(batch_sizes) == 4  # runs of different requests shared a batch
    # Statistics count every run.
    client = httpclient.InferenceServerClient(served.url)
    stats = client.get_inference_statistics("iterative")["model_stats"][0]
    client.close()
    assert stats["inference_count"] == 12


def test_rescheduled_request_over_grpc(served):
    client = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        inp = grpcclient.InferInput("IN", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[3]], np.int32))
        result = client.infer("iterative", [inp])
    finally:
        client.close()
    assert result.as_numpy("OUT").tolist() == [[3]]
    assert [r["flags"] for r in _runs(result)] == [1, 0, 0]


def test_decoupled_rescheduled_request_streams_each_run(served):
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(lambda result, error: got.put((result, error)))
    try:
        for n in (3, 1):
            inp = grpcclient.InferInput("IN", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[n]], np.int32))
            client.async_stream_infer("iterative_stream", [inp], request_id=f"r{n}",
                                      enable_empty_final_response=True)
        seen = {"r3": [], "r1": []}
        finals = set()
        while len(finals) < 2:
            result, error = got.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                finals.add(response.id)
            if response.outputs:
                seen[response.id].append(int(result.as_numpy("OUT").reshape(-1)[0]))
        assert seen == {"r3": [2, 1, 0], "r1": [0]}
    finally:
        client.stop_stream()
        client.close()


def test_rescheduling_a_model_that_is_not_iterative_fails_the_request(served):
    with pytest.raises(InferenceServerException) as err:
        _http_infer(served.url, "not_iterative", 2)
    assert err.value.status() == "400"
    assert NOT_ITERATIVE in err.value.message()
    # A request that needs no second run is answered as usual.
    assert _http_infer(served.url, "not_iterative", 1).as_numpy("OUT").tolist() == [[1]]
    # Decoupled: the stream ends with the error after what was sent.
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(lambda result, error: got.put((result, error)))
    try:
        inp = grpcclient.InferInput("IN", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[2]], np.int32))
        client.async_stream_infer("not_iterative_stream", [inp])
        result, error = got.get(timeout=30)
        assert error is None and int(result.as_numpy("OUT").reshape(-1)[0]) == 1
        result, error = got.get(timeout=30)
        assert error is not None and NOT_ITERATIVE in str(error)
    finally:
        client.stop_stream()
        client.close()


def test_a_response_for_a_rescheduled_request_is_refused(served):
    with pytest.raises(InferenceServerException) as err:
        _http_infer(served.url, "iterative", 2, mode="answer_too")
    message = err.value.message()
    assert message.startswith("Failed to process the request(s) for model 'iterative_0_0', "
                              "message: Expected a None object in the execute function return "
                              "list for reschduled request, found type '<class '")
    assert message.endswith("InferenceResponse'>'.")
    # Its sequence ended with the failed batch: the model keeps serving.
    assert _http_infer(served.url, "iterative", 2).as_numpy("OUT").tolist() == [[2]]


def test_cancelling_a_rescheduled_request_ends_its_sequence(served):
    server = served.server
    arrays = [InferTensor("IN", "INT32", [1, 1], np.array([[1_000_000]], np.int32))]

    def executions():
        return server.model_statistics("iterative")["execution_count"]

    future = served.run(server.submit, InferRequest("iterative", "", "", arrays, [], {}))
    deadline = time.monotonic() + 10
    while executions() < 2:  # it has run, been rescheduled, and run again
        assert time.monotonic() < deadline
        time.sleep(0.05)
    served.run(server.cancel, future)
    time.sleep(0.6)  # a lone sequence runs every 200 ms (its batching delay)
    settled = executions()
    time.sleep(0.6)
    assert executions() == settled  # it runs no more
    with pytest.raises(Exception):
        served.run(future.result)
    # Its slot is free again: four new sequences take all four.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _http_infer(served.url, "iterative", 1), range(4)))
    assert [r.as_numpy("OUT").tolist() for r in results] == [[[1]]] * 4


def test_a_client_that_goes_away_ends_its_iterative_stream(served):
    got = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(lambda result, error: got.put((result, error)))
    inp = grpcclient.InferInput("IN", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[1_000_000]], np.int32))
    client.async_stream_infer("iterative_stream", [inp])
    for _ in range(3):  # it runs, and streams each run
        result, error = got.get(timeout=30)
        assert error is None
    client.stop_stream(cancel_requests=True)
    client.close()

    def executions():
        return served.server.model_statistics("iterative_stream")["execution_count"]

    time.sleep(0.6)
    settled = executions()
    time.sleep(0.6)
    assert executions() == settled  # it runs no more
    # Its slot is free: four new sequences take all four.
    client = grpcclient.InferenceServerClient(served.grpc_url)
    done = queue.Queue()
    client.start_stream(lambda result, error: done.put((result, error)))
    try:
        for k in range(4):
            inp = grpcclient.InferInput("IN", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[1]], np.int32))
            client.async_stream_infer("iterative_stream", [inp], request_id=str(k))
        finals = [done.get(timeout=30) for _ in range(4)]
        assert all(error is None for _, error in finals)
    finally:
        client.stop_stream()
        client.close()
