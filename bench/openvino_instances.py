"""Several OpenVINO instances of one model in one process: OpenVINO pins
every compiled model's inference threads to the same first cores (its CPU
pinning, on by default), so instances that each compile the model run on
the same cores. pyserver's openvino backend compiles a model version once
for all its instances, with a stream per instance (pyserver/backends/
openvino.py device_properties), as OpenVINO spreads a compiled model's
streams over the cores.

  python bench/openvino_instances.py [--instances 2] [--seconds 3] [--rounds 3]

One process, the MLP of bench/backend_overhead.py (FP32 1024 -> 4096 -> 16)
through OpenVINO, batches of 8. Each round runs, alternated, N threads (one
infer request each, back to back) on:

- all_pinned: a compiled model per thread, each with OpenVINO's default
  pinning and the thread's share of the cores (INFERENCE_NUM_THREADS);
- first_pinned: the same, only the first pinned (pyserver's design before
  it shared the compiled model);
- shared_streams: one compiled model with NUM_STREAMS = N and the shares'
  threads together (what pyserver does);

and a single model alone for scale. Prints infer/s of each and the ratios
(the median round), and the memory N instances add either way (compiled
models per instance against one shared, each in a fresh process). Not a test: the figures are the
machine's. Needs N <= the cores for the ratios to say much.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(compiled: list, seconds: float, rows) -> float:
    """Infer/s (rows per second) of the models run back to back, each on
    its own thread, for ``seconds``."""
    counts = [0] * len(compiled)
    stop = time.perf_counter() + seconds

    def loop(i):
        request = compiled[i].create_infer_request()
        while time.perf_counter() < stop:
            request.infer({0: rows})
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(compiled))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) * len(rows) / seconds


def _rss_mib() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024


def added_memory(model: Path, instances: int, shared: bool) -> int:
    """MiB of resident memory that ``instances`` instances add (in this
    process, which is fresh: see main's --rss-of)."""
    import openvino as ov

    core = ov.Core()
    before = _rss_mib()
    if shared:
        compiled = core.compile_model(core.read_model(str(model)), "CPU",
                                      {"NUM_STREAMS": instances})
        keep = [compiled.create_infer_request() for _ in range(instances)]
    else:
        keep = [core.compile_model(core.read_model(str(model)), "CPU",
                                   {"INFERENCE_NUM_THREADS": 1}).create_infer_request()
                for _ in range(instances)]
    added = _rss_mib() - before
    del keep
    return added


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rss-of", nargs=2, metavar=("MODEL", "shared|separate"),
                   help=argparse.SUPPRESS)  # one memory measurement, in a fresh process
    args = p.parse_args()
    if args.rss_of:
        print(added_memory(Path(args.rss_of[0]), args.instances, args.rss_of[1] == "shared"))
        return

    import numpy as np
    import openvino as ov

    from pyserver.backends._common import compute_cores
    from pyserver.testing import mlp_onnx, mlp_weights

    folder = Path(tempfile.mkdtemp())
    (folder / "mlp.onnx").write_bytes(mlp_onnx(mlp_weights(1024, 4096, 16)))
    core = ov.Core()
    threads = max(1, compute_cores() // args.instances)  # as the loader shares the cores

    def compile_all(pinned: list) -> list:
        return [core.compile_model(core.read_model(str(folder / "mlp.onnx")), "CPU",
                                   {"INFERENCE_NUM_THREADS": threads, "ENABLE_CPU_PINNING": pin})
                for pin in pinned]

    n = args.instances
    shared = core.compile_model(core.read_model(str(folder / "mlp.onnx")), "CPU",
                                {"INFERENCE_NUM_THREADS": threads * n, "NUM_STREAMS": n})
    setups = {"all_pinned": compile_all([True] * n),
              "first_pinned": compile_all([True] + [False] * (n - 1)),
              "shared_streams": [shared] * n,
              "one_alone": compile_all([True])}
    rows = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    results = {name: [] for name in setups}
    for r in range(args.rounds):
        order = list(setups) if r % 2 == 0 else list(reversed(setups))
        for name in order:
            results[name].append(run(setups[name], args.seconds, rows))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()),
              file=sys.stderr)
    med = {k: statistics.median(v) for k, v in results.items()}
    memory = {how: int(subprocess.run(
        [sys.executable, __file__, "--instances", str(n), "--rss-of", str(folder / "mlp.onnx"),
         how], check=True, capture_output=True, text=True).stdout)
        for how in ("separate", "shared")}
    print(json.dumps({"instances": n, "inference_threads_each": threads, "cores": os.cpu_count(),
                      "infer_per_s": {k: round(v, 1) for k, v in med.items()},
                      "first_pinned_over_all_pinned": round(med["first_pinned"]
                                                            / med["all_pinned"], 3),
                      "shared_streams_over_first_pinned": round(med["shared_streams"]
                                                                / med["first_pinned"], 3),
                      "memory_added_mib": memory},
                     indent=2))


if __name__ == "__main__":
    main()
