"""Engine overhead: enqueue -> batch -> completion, csrc engine vs a pure-Python
asyncio batcher, in one run.

  python bench/engine_overhead.py [--requests N]

Part 1, throughput: a no-op model (the instance completes each batch at
once); producers on the event loop each send requests one after another.
Reports µs of wall time per request for the engine and for the reference
(ReferenceBatcher + run_in_executor, the usual Python design) at 1 and 16
concurrent producers, and the ratio.

Part 2, latency added by dynamic batching at concurrency 1: p50 from enqueue
to completion with max_queue_delay 100 µs (Triton semantics: the request
waits for the delay) minus the delay, and with our eager policy (total).

Prints a JSON document and a summary; not a test (timings vary with load).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop  # noqa: E402

from pyserver.engine import CompletionQueue, ModelStats, Scheduler, now_ns  # noqa: E402
from pyserver.reference_batcher import ReferenceBatcher  # noqa: E402


class Req:
    __slots__ = ("future", "t0")

    def __init__(self, future):
        self.future = future
        self.t0 = time.perf_counter_ns()


class EngineBatcher:
    """The server's arrangement: csrc scheduler, one instance thread, the
    completion queue watched by the loop."""

    def __init__(self, config):
        self.loop = asyncio.get_running_loop()
        self.cq = CompletionQueue()
        self.sched = Scheduler.dynamic(config, ModelStats(), self.cq)
        self.loop.add_reader(self.cq.fd, self._drain)
        self.inflight = 0
        self.spin_scheduled = False
        self.spin_s = min(config.get("max_queue_delay_microseconds", 0), 1000) / 1e6 + 100e-6
        self.thread = threading.Thread(target=self._instance, daemon=True)
        self.thread.start()

    def _instance(self):
        sched = self.sched
        batch = sched.next_batch()
        while batch is not None:
            t = now_ns()
            batch = sched.complete_and_next(batch, t, t, t, t)

    def _drain(self):
        for batch, _code, _msg in self.cq.drain():
            self.inflight -= len(batch.requests)
            for r in batch.requests:
                r.future.set_result(None)

    def submit(self, req):
        # As Server.submit: the only request in flight spins for its
        # completion instead of sleeping in epoll.
        self.sched.enqueue(req, 1)
        self.inflight += 1
        if self.inflight == 1 and not self.spin_scheduled:
            self.spin_scheduled = True
            self.loop.call_soon(self._spin)

    def _spin(self):
        self.spin_scheduled = False
        if self.inflight == 1 and self.cq.spin_wait(self.spin_s):
            self._drain()

    def close(self):
        self.sched.stop()
        self.thread.join()
        self.loop.remove_reader(self.cq.fd)


class PythonBatcher:
    """The obvious pure-Python design: an asyncio batcher task, execution in a
    one-thread executor (the instance), futures resolved on the loop."""

    def __init__(self, config):
        self.loop = asyncio.get_running_loop()
        self.ref = ReferenceBatcher(config["max_batch_size"], config.get("preferred_batch_size", ()),
                                    config.get("max_queue_delay_microseconds", 0), config.get("eager", False))
        self.pool = ThreadPoolExecutor(1)
        self.task = self.loop.create_task(self._run())

    async def _run(self):
        while True:
            batch = await self.ref.next_batch()
            await self.loop.run_in_executor(self.pool, _noop_model, batch)
            for r in batch:
                r.future.set_result(None)

    def submit(self, req):
        self.ref.enqueue(req, 1)

    def close(self):
        self.task.cancel()
        self.pool.shutdown()


def _noop_model(batch):
    return None


async def throughput(cls, config, producers: int, total: int) -> float:
    b = cls(config)
    loop = asyncio.get_running_loop()
    per = total // producers

    async def producer():
        for _ in range(per):
            r = Req(loop.create_future())
            b.submit(r)
            await r.future

    await asyncio.gather(*(producer() for _ in range(min(producers, 4))))  # warm-up
    start = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(producers)))
    elapsed = time.perf_counter() - start
    b.close()
    return elapsed / (per * producers) * 1e6


async def latency_p50(cls, config, n: int) -> float:
    b = cls(config)
    loop = asyncio.get_running_loop()
    samples = []
    for i in range(n + 50):
        r = Req(loop.create_future())
        b.submit(r)
        await r.future
        if i >= 50:
            samples.append((time.perf_counter_ns() - r.t0) / 1000)
    b.close()
    return statistics.median(samples)


async def main(args):
    base = {"max_batch_size": 64}
    results = {"throughput_us_per_request": {}, "latency_c1_us": {}}
    print(f"{'producers':>9} {'engine µs/req':>14} {'python µs/req':>14} {'python/engine':>14}")
    for producers in (1, 16):
        eng = await throughput(EngineBatcher, base, producers, args.requests)
        ref = await throughput(PythonBatcher, base, producers, args.requests)
        results["throughput_us_per_request"][f"c{producers}"] = {
            "engine": round(eng, 2), "python": round(ref, 2), "ratio_python_over_engine": round(ref / eng, 2)}
        print(f"{producers:>9} {eng:>14.1f} {ref:>14.1f} {ref / eng:>13.2f}x")

    delay_us = 100
    triton_mode = dict(base, max_batch_size=8, max_queue_delay_microseconds=delay_us)
    eager = dict(triton_mode, eager=True)
    n = args.latency_samples
    eng_t = await latency_p50(EngineBatcher, triton_mode, n)
    eng_e = await latency_p50(EngineBatcher, eager, n)
    ref_t = await latency_p50(PythonBatcher, triton_mode, n)
    ref_e = await latency_p50(PythonBatcher, eager, n)
    results["latency_c1_us"] = {
        "configured_delay_us": delay_us,
        "engine_triton_mode_p50": round(eng_t, 1),
        "engine_added_beyond_delay_p50": round(eng_t - delay_us, 1),
        "engine_eager_p50": round(eng_e, 1),
        "python_triton_mode_p50": round(ref_t, 1),
        "python_added_beyond_delay_p50": round(ref_t - delay_us, 1),
        "python_eager_p50": round(ref_e, 1),
    }
    print(f"\nconcurrency 1, max_queue_delay {delay_us} µs (p50, µs):")
    print(f"  engine: {eng_t:.1f} total, {eng_t - delay_us:.1f} beyond the delay; eager {eng_e:.1f}")
    print(f"  python: {ref_t:.1f} total, {ref_t - delay_us:.1f} beyond the delay; eager {ref_e:.1f}")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=40000)
    p.add_argument("--latency-samples", type=int, default=3000)
    uvloop.run(main(p.parse_args()))
