"""engine/admission.pyx: Server.submit's common case compiled, against the
general path it stands in for (which requests take which path, and that
both give the same answers, errors and books)."""

import asyncio

import numpy as np
import pytest

from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import ImmediateFuture, InferRequest, InferTensor
from pyserver.server.server import Server
from pyserver.testing import write_add_sub

A = np.arange(16, dtype=np.float32).reshape(1, 16)


def request(model="add_sub", version="", parameters=None, shape=(1, 16)):
    a = np.zeros(shape, np.float32) if shape != (1, 16) else A
    return InferRequest(model, version, "", [InferTensor("INPUT0", "FP32", list(shape), a),
                                             InferTensor("INPUT1", "FP32", list(shape), a)],
                        [], dict(parameters or {}))


@pytest.fixture
def paths(monkeypatch):
    """Which of the server's general entry points each submit reached."""
    taken = []
    general, resolved = Server._submit_general, Server._submit_resolved

    def on_general(self, req, future):
        taken.append("general")
        return general(self, req, future)

    def on_resolved(self, mv, req, future):
        taken.append("resolved")
        return resolved(self, mv, req, future)

    monkeypatch.setattr(Server, "_submit_general", on_general)
    monkeypatch.setattr(Server, "_submit_resolved", on_resolved)
    return taken


def serve(repo, check, **kwargs):
    async def main():
        server = Server(str(repo), **kwargs)
        await server.start()
        try:
            await check(server)
        finally:
            await server.stop()
    asyncio.run(main())


async def answer(server, req, future=None):
    fut = server.submit(req, future)
    if isinstance(fut, ImmediateFuture):
        done = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: done.set_result(f.result()))
        return await asyncio.wait_for(done, 10)
    return await asyncio.wait_for(fut, 10)


def test_a_plain_request_takes_no_general_path_and_is_answered(tmp_path, paths):
    write_add_sub(tmp_path, extra="dynamic_batching { }")

    async def check(server):
        for future in (None, ImmediateFuture()):
            response = await answer(server, request(), future)
            np.testing.assert_array_equal(response.outputs[0].data, A + A)
        # what the frontends call is the same path
        done = asyncio.get_running_loop().create_future()
        server.submitter(request(), ImmediateFuture()).add_done_callback(
            lambda f: done.set_result(f.result()))
        np.testing.assert_array_equal((await done).outputs[1].data, A - A)
        assert paths == []
        assert server.inflight == 0 and server._handles == {}

    serve(tmp_path, check)


def test_requests_the_common_case_leaves_alone_take_the_general_path(tmp_path, paths):
    write_add_sub(tmp_path)
    write_add_sub(tmp_path, name="two", versions=(1, 2), extra="version_policy: { all { } }")
    write_add_sub(tmp_path, name="cached", extra="response_cache { enable: true }")

    async def check(server):
        cases = [
            (request(parameters={"note": "x"}), ["general", "resolved"]),  # parameters to check
            (request(version="1"), ["general", "resolved"]),  # a version to parse
            (request("two"), ["general", "resolved"]),  # which version: the general rule
            (request("cached"), ["resolved"]),  # the response cache serves it
            (request("cached"), ["resolved"]),  # (a hit now)
        ]
        for req, expected in cases:
            paths.clear()
            response = await answer(server, req)
            np.testing.assert_array_equal(response.outputs[0].data, A + A)
            assert paths == expected, req.model_name
        assert server.inflight == 0

    serve(tmp_path, check, response_cache_byte_size=1 << 20)


def test_errors_are_the_general_paths(tmp_path, paths):
    write_add_sub(tmp_path)

    async def check(server):
        # validation runs compiled, with the same rule and text
        with pytest.raises(ServerError) as fast:
            server.submit(request(shape=(1, 15)))
        with pytest.raises(ServerError) as general:
            server._submit_general(request(shape=(1, 15)), None)
        assert paths == ["general", "resolved"]  # (the direct call above)
        assert fast.value.code == general.value.code == Code.INVALID_ARG
        assert fast.value.message == general.value.message
        assert "unexpected shape for input 'INPUT0'" in fast.value.message
        paths.clear()
        with pytest.raises(ServerError, match="Request for unknown model: 'nope' is not found"):
            server.submit(request("nope"))
        assert paths == ["general"]
        assert server.inflight == 0 and server._handles == {}
        server.begin_shutdown()
        paths.clear()
        with pytest.raises(ServerError, match="Server is stopping"):
            server.submit(request())
        assert paths == ["general"]

    serve(tmp_path, check)


def test_a_request_queued_by_the_common_case_is_counted_and_can_be_cancelled(tmp_path, paths):
    # a batch waits up to 10 s for a second request: this one stays queued
    write_add_sub(tmp_path, extra="dynamic_batching { preferred_batch_size: [ 2 ] "
                                  "max_queue_delay_microseconds: 10000000 }")

    async def check(server):
        fut = server.submit(request())
        assert server.inflight == 1 and fut in server._handles
        server.cancel(fut)
        with pytest.raises((ServerError, asyncio.CancelledError)) as err:
            await asyncio.wait_for(fut, 10)
        if isinstance(err.value, ServerError):
            assert err.value.code == Code.CANCELLED
        await asyncio.sleep(0.05)
        assert server.inflight == 0 and server._handles == {}
        assert paths == []

    serve(tmp_path, check)
