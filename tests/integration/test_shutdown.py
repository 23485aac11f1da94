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
