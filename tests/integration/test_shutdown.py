"""Graceful shutdown: readiness drops at once, new requests are refused,
accepted ones finish."""

import asyncio

import numpy as np
import pytest

from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferTensor
from tests.integration.test_scheduling import RecordingBackend, recording, write_model  # noqa: F401 (autouse fixture)


def test_drain_lets_accepted_requests_finish(tmp_path, start_server):
    write_model(tmp_path, "slow", "", max_batch_size=0)
    s = start_server(tmp_path)

    def request(v):
        return InferRequest("slow", inputs=[InferTensor("IN", "FP32", [1], np.array([v], np.float32))])

    async def scenario():
        server = s.server
        inflight = server.submit(request(999))  # blocks in the backend until released
        await asyncio.sleep(0.1)
        server.begin_shutdown()
        assert not server.is_ready()
        with pytest.raises(ServerError) as err:
            server.submit(request(1))
        assert err.value.code == Code.UNAVAILABLE
        drained = asyncio.ensure_future(server.drain(10))
        await asyncio.sleep(0.1)
        assert not drained.done()
        RecordingBackend.release.set()
        assert await drained is True
        response = await inflight
        return response.outputs[0].data

    assert s.call(scenario()).tolist() == [999.0]


SLEEPER_CONFIG = """name: "sleeper"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
SLEEPER_MODEL = """import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            time.sleep(float(x[0]))  # IN seconds; never interrupted
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""


def _sleeper_repo(tmp_path, mode):
    from tests.integration.conftest import use_execution_mode

    (tmp_path / "sleeper" / "1").mkdir(parents=True)
    (tmp_path / "sleeper" / "config.pbtxt").write_text(SLEEPER_CONFIG)
    (tmp_path / "sleeper" / "1" / "model.py").write_text(SLEEPER_MODEL)
    use_execution_mode(tmp_path, mode)


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_sigterm_exits_within_the_exit_timeout(tmp_path, mode):
    """#27 defect 5: SIGTERM with unary and streaming gRPC calls and HTTP
    requests in flight on a model that sleeps 30 s per request: after
    --exit-timeout-secs every one is answered once, UNAVAILABLE with the
    reason, and the process is gone soon after (a thread stuck in a
    thread-mode model does not hold it)."""
    import queue
    import signal
    import threading
    import time

    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    from tests.integration.test_cli import start_cli, wait_until_ready

    _sleeper_repo(tmp_path, mode)
    proc, client, ports = start_cli(["--model-repository", str(tmp_path),
                                     "--exit-timeout-secs", "2"])
    try:
        wait_until_ready(client, proc)
        gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        answers = queue.Queue()

        def inputs(module):
            t = module.InferInput("IN", [1], "FP32")
            t.set_data_from_numpy(np.array([30.0], np.float32))
            return [t]

        for _ in range(3):
            gclient.async_infer("sleeper", inputs(grpcclient),
                                lambda result, error: answers.put(("grpc", error)),
                                client_timeout=60)
        sclient = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        sclient.start_stream(lambda result, error: answers.put(("stream", error)))
        sclient.async_stream_infer("sleeper", inputs(grpcclient))

        def http_call():
            c = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}", network_timeout=60)
            try:
                c.infer("sleeper", inputs(httpclient))
                answers.put(("http", None))
            except Exception as e:
                answers.put(("http", e))

        threads = [threading.Thread(target=http_call) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # all accepted
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=40)
        took = time.monotonic() - started
        for t in threads:
            t.join(10)
        got = []
        while len(got) < 6:
            got.append(answers.get(timeout=10))
        time.sleep(0.5)
        extra = []
        while not answers.empty():
            kind, error = answers.get()
            # the stream call itself ends as its connection closes: that
            # notice is no answer to a request
            if kind == "stream" and "this request" not in str(error):
                continue
            extra.append((kind, error))
        assert not extra, [(k, str(e)[:60]) for k, e in extra]  # nothing answered twice
        sclient.stop_stream()
        assert proc.returncode == 0, out
        assert took < 2 + 4, f"exit took {took:.1f} s\n{out}"
        reason = "its exit timeout (2 s) passed before this request completed"
        for kind, error in got:
            assert error is not None, kind
            assert reason in str(error), (kind, error)
            if kind == "grpc":
                assert error.status() == "StatusCode.UNAVAILABLE"
            elif kind == "http":
                assert error.status() == "503"
            # (a stream's error arrives in the message: no status of its own)
        assert "requests still in flight were failed" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("io_flags", [[], ["--http-thread-count=2", "--grpc-infer-thread-count=2"]],
                         ids=["loop", "socket-pump"])
def test_sigterm_lets_calls_finish_within_the_exit_timeout(tmp_path, io_flags):
    """What finishes inside --exit-timeout-secs is answered normally, also
    when the connections' reads and writes are the socket pump's."""
    import signal
    import time

    import tritonclient.grpc as grpcclient

    from tests.integration.test_cli import start_cli, wait_until_ready

    _sleeper_repo(tmp_path, "process")
    proc, client, ports = start_cli(["--model-repository", str(tmp_path),
                                     "--exit-timeout-secs", "20", *io_flags])
    try:
        wait_until_ready(client, proc)
        gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[1]}")
        results = []
        t = grpcclient.InferInput("IN", [1], "FP32")
        t.set_data_from_numpy(np.array([1.5], np.float32))
        gclient.async_infer("sleeper", [t], lambda result, error: results.append((result, error)))
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=40)
        assert proc.returncode == 0, out
        assert time.monotonic() - started < 10, out  # the drain, not the 20 s bound
        assert len(results) == 1 and results[0][1] is None
        assert results[0][0].as_numpy("OUT").tolist() == [1.5]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
