"""Dynamic batching rules end to end: over HTTP, through the engine, into a
backend that records what it ran."""

import asyncio
import functools
import threading

import numpy as np
import pytest
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from pyserver.backends import register_backend


class RecordingBackend:
    """OUT = IN; records each batch's IN values in execution order. A value
    of 999 blocks until released (to hold an instance busy)."""

    batches: list = []
    release = threading.Event()

    def __init__(self, model_path, config, instance_name, device, threads):
        pass

    def execute(self, inputs):
        x = inputs["IN"]
        if (x == 999).any():
            RecordingBackend.release.wait(10)
        RecordingBackend.batches.append([float(v) for v in x.reshape(-1)])
        return {"OUT": x.copy()}


def write_model(repo, name, scheduling, max_batch_size=8):
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "1" / "model").write_text("")
    (d / "config.pbtxt").write_text(f"""
name: "{name}"
backend: "recording"
default_model_filename: "model"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
{scheduling}
""")


@pytest.fixture(autouse=True)
def recording():
    register_backend("recording", RecordingBackend)
    RecordingBackend.batches = []
    RecordingBackend.release = threading.Event()
    yield
    RecordingBackend.release.set()


async def infer_value(client, model, v, **kw):
    """One [[v]] request to ``model``; kw: tritonclient's infer arguments."""
    inp = aioclient.InferInput("IN", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[v]], np.float32))
    return await client.infer(model, [inp], **kw)


async def send_all(url, model, values, priorities=None, timeouts=None):
    client = aioclient.InferenceServerClient(url)
    try:
        async def one(i, v):
            kw = {}
            if priorities:
                kw["priority"] = priorities[i]
            if timeouts:
                kw["timeout"] = timeouts[i]
            return await infer_value(client, model, v, **kw)

        tasks = []
        for i, v in enumerate(values):
            tasks.append(asyncio.ensure_future(one(i, v)))
            await asyncio.sleep(0.02)  # keep arrival order deterministic
        return await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await client.close()


def test_biggest_preferred_batch_wins(tmp_path, start_server, monkeypatch):
    # Triton's L0_batcher test_multi_batch_use_biggest_preferred.
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "6")
    write_model(tmp_path, "m", "dynamic_batching { preferred_batch_size: [ 2, 6 ] "
                               "max_queue_delay_microseconds: 10000000 }")
    s = start_server(tmp_path)
    results = asyncio.run(send_all(s.url, "m", [1, 2, 3, 4, 5, 6]))
    assert [r.as_numpy("OUT")[0][0] for r in results] == [1, 2, 3, 4, 5, 6]
    assert RecordingBackend.batches == [[1, 2, 3, 4, 5, 6]]
    stats = s.run(s.server.model_statistics, "m")
    assert stats["execution_count"] == 1 and stats["inference_count"] == 6


def test_priority_levels_reorder_the_queue(tmp_path, start_server, monkeypatch):
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    write_model(tmp_path, "p", "dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
                max_batch_size=1)
    s = start_server(tmp_path)
    asyncio.run(send_all(s.url, "p", [1, 2, 3], priorities=[2, 2, 1]))
    assert RecordingBackend.batches == [[3], [1], [2]]


def test_queue_full_and_timeout_answer_503(tmp_path, start_server):
    write_model(tmp_path, "q", """dynamic_batching {
  default_queue_policy { max_queue_size: 1 default_timeout_microseconds: 1000000
                         allow_timeout_override: true } }""", max_batch_size=1)
    s = start_server(tmp_path)
    # 999 occupies the only instance; 2 waits in the queue (the only slot) and
    # times out; 3 finds the queue full.
    async def main():
        client = aioclient.InferenceServerClient(s.url)
        try:
            one = functools.partial(infer_value, client, "q")
            busy = asyncio.ensure_future(one(999))
            await asyncio.sleep(0.2)
            queued = asyncio.ensure_future(one(2, timeout=300000))
            await asyncio.sleep(0.05)
            full = await asyncio.gather(one(3), return_exceptions=True)
            await asyncio.sleep(0.5)
            RecordingBackend.release.set()
            return await asyncio.gather(busy, queued, return_exceptions=True), full[0]
        finally:
            await client.close()

    (busy, queued), full = asyncio.run(main())
    assert busy.as_numpy("OUT")[0][0] == 999
    assert isinstance(full, InferenceServerException)
    assert full.status() == "503" and "Exceeds maximum queue size" in full.message()
    assert isinstance(queued, InferenceServerException)
    assert queued.status() == "503" and "Request timeout expired" in queued.message()
    stats = s.run(s.server.model_statistics, "q")
    assert stats["failure_reasons"]["REJECTED"] == 1


def test_queued_request_times_out_while_the_instance_is_busy(tmp_path, start_server):
    """#21 item 12: the answer comes when the request's own timeout passes,
    not when the busy instance frees up (it never does until released)."""
    write_model(tmp_path, "t", """dynamic_batching {
  default_queue_policy { default_timeout_microseconds: 60000000 allow_timeout_override: true } }""",
                max_batch_size=1)
    s = start_server(tmp_path)

    async def main():
        client = aioclient.InferenceServerClient(s.url)
        try:
            one = functools.partial(infer_value, client, "t")
            busy = asyncio.ensure_future(one(999))
            await asyncio.sleep(0.2)
            start = asyncio.get_running_loop().time()
            queued = await asyncio.gather(one(2, timeout=100000), return_exceptions=True)
            waited = asyncio.get_running_loop().time() - start
            still_busy = not busy.done()
            RecordingBackend.release.set()
            return queued[0], waited, still_busy, await busy
        finally:
            await client.close()

    queued, waited, still_busy, busy = asyncio.run(main())
    assert isinstance(queued, InferenceServerException)
    assert queued.status() == "503" and "Request timeout expired" in queued.message()
    assert still_busy and 0.09 <= waited < 5.0
    assert busy.as_numpy("OUT")[0][0] == 999
    assert RecordingBackend.batches == [[999]]


def test_preserve_ordering_with_two_instances(tmp_path, start_server):
    write_model(tmp_path, "o", "dynamic_batching { preserve_ordering: true }\n"
                               "instance_group [ { count: 2 kind: KIND_CPU } ]", max_batch_size=1)
    s = start_server(tmp_path)
    # The first request blocks its instance; the second finishes first on the
    # other instance but must be answered after the first.
    done_order = []

    async def main():
        client = aioclient.InferenceServerClient(s.url)
        try:
            async def one(v):
                inp = aioclient.InferInput("IN", [1, 1], "FP32")
                inp.set_data_from_numpy(np.array([[v]], np.float32))
                r = await client.infer("o", [inp])
                done_order.append(v)
                return r
            first = asyncio.ensure_future(one(999))
            await asyncio.sleep(0.2)
            second = asyncio.ensure_future(one(5))
            await asyncio.sleep(0.3)
            assert RecordingBackend.batches == [[5]]  # ran, but held back
            assert done_order == []
            RecordingBackend.release.set()
            await asyncio.gather(first, second)
        finally:
            await client.close()

    asyncio.run(main())
    assert done_order == [999, 5]


def test_a_gpu_group_gets_its_count_on_each_listed_gpu(tmp_path, start_server):
    """Triton's rule for KIND_GPU: `count` instances on every GPU of the
    group; each instance is told its device (here a backend that records
    it: no GPU is needed to place instances)."""
    from pyserver.backends._common import instance_placement

    write_model(tmp_path, "g", "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] },\n"
                               "                 { count: 1 kind: KIND_CPU } ]")
    s = start_server(tmp_path)
    mv = s.server.models.resolve("g", "")
    placed = [(i.name, instance_placement(mv.config, i.name)) for i in mv.instances]
    assert placed == [("g_0_0", ("KIND_GPU", 0)), ("g_0_1", ("KIND_GPU", 0)),
                      ("g_0_2", ("KIND_GPU", 1)), ("g_0_3", ("KIND_GPU", 1)),
                      ("g_1_0", ("KIND_CPU", 0))]
