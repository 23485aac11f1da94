"""tritonclient's asyncio clients (grpc.aio, http.aio) as a user would run
them: N tasks each sending one request after another for a fixed window.
A Python client tops out near 1-2k req/s on 2 cores (research/
running-peers.md), so this runs at low concurrency only: it shows what a
user's own client sees, not the server's ceiling."""

from __future__ import annotations

import asyncio
import time

from bench.loadgen import percentile


def _inputs(module, workload):
    inputs = []
    for t in workload.inputs:
        tensor = module.InferInput(t.name, list(t.value.shape), t.datatype)
        tensor.set_data_from_numpy(t.value)
        inputs.append(tensor)
    return inputs


async def _drive(client, module, workload, conc: int, seconds: float, warmup: float) -> dict:
    inputs = _inputs(module, workload)
    outputs = [module.InferRequestedOutput(n) for n in workload.outputs]
    latencies: list[float] = []
    errors = [0]
    first_error: list[str] = []
    measuring = [False]

    async def worker(deadline: float):
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                await client.infer(workload.name, inputs, outputs=outputs)
            except Exception as err:  # counted and reported, never hidden
                if measuring[0]:
                    errors[0] += 1
                    if not first_error:
                        first_error.append(str(err)[:200])
                await asyncio.sleep(0.001)
                continue
            if measuring[0]:
                latencies.append(time.perf_counter() - t0)

    if warmup > 0:
        await asyncio.gather(*(worker(time.perf_counter() + warmup) for _ in range(conc)))
    measuring[0] = True
    start = time.perf_counter()
    await asyncio.gather(*(worker(start + seconds) for _ in range(conc)))
    elapsed = time.perf_counter() - start
    latencies.sort()
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    result = {"infer_per_s": round(len(latencies) / elapsed, 1), "requests": len(latencies) + errors[0],
              "errors": errors[0], "p50_ms": None if p50 is None else round(p50 * 1000, 3),
              "p99_ms": None if p99 is None else round(p99 * 1000, 3)}
    if first_error:
        result["first_error"] = first_error[0]
    return result


async def _run(protocol: str, port: int, workload, conc: int, seconds: float, warmup: float) -> dict:
    if protocol == "grpc":
        import tritonclient.grpc.aio as module
        client = module.InferenceServerClient(f"127.0.0.1:{port}")
    else:
        import tritonclient.http.aio as module
        client = module.InferenceServerClient(f"127.0.0.1:{port}", conn_limit=max(conc, 1))
    try:
        return await _drive(client, module, workload, conc, seconds, warmup)
    finally:
        await client.close()


def run(protocol: str, port: int, workload, conc: int, seconds: float, warmup: float) -> dict:
    try:
        import uvloop
        return uvloop.run(_run(protocol, port, workload, conc, seconds, warmup))
    except ImportError:
        return asyncio.run(_run(protocol, port, workload, conc, seconds, warmup))
