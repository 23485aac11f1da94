"""Triton's in-process API on pyserver against the same server over gRPC
(tritonclient, what a program does without an in-process API), in one run,
alternated.

  python bench/inprocess_api.py [--seconds S] [--rounds N]

Model: ONNX add_sub (1x16 FP32, no batcher). Rows:
  sync c1     one thread: model.infer(...) / grpcclient.infer(...) in a loop
  async c16   16 coroutines on one loop: async_infer / tritonclient's grpc.aio
For each: infer/s and the CPU per inference of everything involved (the
in-process case is one process; the gRPC case is the client process plus
the server's process tree), and the busiest thread's CPU per inference.
Prints JSON rows and the ratios gRPC / in-process (CPU: > 1 means the
in-process API is cheaper). Not a test: timings vary with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.systems import start_pyserver, thread_cpu  # noqa: E402
from pyserver.testing import write_add_sub  # noqa: E402

CONCURRENCY = 16


def measure(pids, run, seconds: float) -> dict:
    """Runs ``run(deadline) -> count`` and reports rate and CPU per inference."""
    before = thread_cpu(pids)
    start = time.perf_counter()
    count = run(start + seconds)
    wall = time.perf_counter() - start
    after = thread_cpu(pids)
    spent = {k: after[k] - before.get(k, 0.0) for k in after}
    total = sum(spent.values())
    return {"infer_per_s": count / wall, "cpu_us_per_infer": total / count * 1e6,
            "busiest_thread_us_per_infer": max(spent.values()) / count * 1e6, "count": count}


def inputs():
    ones = np.ones((1, 16), np.float32)
    return {"INPUT0": ones, "INPUT1": ones}


def inprocess_rows(repo: Path, seconds: float) -> list[dict]:
    import pyserver.inprocess as tritonserver

    server = tritonserver.Server(model_repository=str(repo)).start(wait_until_ready=True)
    model = server.model("add_sub")
    data = inputs()

    def sync(deadline):
        n = 0
        while time.perf_counter() < deadline:
            for response in model.infer(inputs=data):
                np.from_dlpack(response.outputs["OUTPUT0"])
            n += 1
        return n

    def concurrent(deadline):
        async def worker():
            n = 0
            while time.perf_counter() < deadline:
                async for response in model.async_infer(inputs=data):
                    np.from_dlpack(response.outputs["OUTPUT0"])
                n += 1
            return n

        async def main():
            return sum(await asyncio.gather(*(worker() for _ in range(CONCURRENCY))))

        return asyncio.run(main())

    sync(time.perf_counter() + 1.0)  # warm
    me = [os.getpid()]
    rows = [{"system": "in-process", "row": "sync c1", **measure(me, sync, seconds)},
            {"system": "in-process", "row": f"async c{CONCURRENCY}",
             **measure(me, concurrent, seconds)}]
    server.stop()
    return rows


def grpc_rows(repo: Path, seconds: float, log: Path) -> list[dict]:
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as aioclient

    server = start_pyserver(repo, log, ["add_sub"])
    try:
        server.wait_ready()
        url = f"127.0.0.1:{server.grpc_port}"
        data = inputs()

        def request_inputs(module):
            out = []
            for name, value in data.items():
                t = module.InferInput(name, list(value.shape), "FP32")
                t.set_data_from_numpy(value)
                out.append(t)
            return out

        client = grpcclient.InferenceServerClient(url)
        sync_inputs = request_inputs(grpcclient)

        def sync(deadline):
            n = 0
            while time.perf_counter() < deadline:
                client.infer("add_sub", sync_inputs).as_numpy("OUTPUT0")
                n += 1
            return n

        def concurrent(deadline):
            async def main():
                aio = aioclient.InferenceServerClient(url)
                aio_inputs = request_inputs(aioclient)

                async def worker():
                    n = 0
                    while time.perf_counter() < deadline:
                        (await aio.infer("add_sub", aio_inputs)).as_numpy("OUTPUT0")
                        n += 1
                    return n

                try:
                    return sum(await asyncio.gather(*(worker() for _ in range(CONCURRENCY))))
                finally:
                    await aio.close()

            return asyncio.run(main())

        sync(time.perf_counter() + 1.0)
        pids = [os.getpid()] + server.pids()
        rows = [{"system": "grpc", "row": "sync c1", **measure(pids, sync, seconds)},
                {"system": "grpc", "row": f"async c{CONCURRENCY}",
                 **measure(pids, concurrent, seconds)}]
        client.close()
        return rows
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        write_add_sub(repo, max_batch_size=8)
        rows = []
        for r in range(args.rounds):  # alternated: in-process first on even rounds
            order = ("in-process", "grpc") if r % 2 == 0 else ("grpc", "in-process")
            for system in order:
                got = inprocess_rows(repo, args.seconds) if system == "in-process" \
                    else grpc_rows(repo, args.seconds, Path(tmp) / f"server{r}.log")
                for row in got:
                    row["round"] = r
                rows += got
    print(json.dumps(rows, indent=1))
    print("\nmedian over rounds; ratio = gRPC / in-process")
    for label in ("sync c1", f"async c{CONCURRENCY}"):
        med = {}
        for system in ("in-process", "grpc"):
            picked = [x for x in rows if x["system"] == system and x["row"] == label]
            med[system] = {k: statistics.median(x[k] for x in picked)
                           for k in ("infer_per_s", "cpu_us_per_infer",
                                     "busiest_thread_us_per_infer")}
        a, b = med["in-process"], med["grpc"]
        print(f"{label:10s} infer/s in-process {a['infer_per_s']:8.0f} gRPC {b['infer_per_s']:8.0f} "
              f"({a['infer_per_s'] / b['infer_per_s']:.2f}x) | CPU/infer {a['cpu_us_per_infer']:5.0f} "
              f"vs {b['cpu_us_per_infer']:5.0f} us ({b['cpu_us_per_infer'] / a['cpu_us_per_infer']:.2f}x)"
              f" | busiest thread {a['busiest_thread_us_per_infer']:4.0f} vs "
              f"{b['busiest_thread_us_per_infer']:4.0f} us")
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
