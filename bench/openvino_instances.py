"""Several OpenVINO instances in one process: OpenVINO pins every compiled
model's inference threads to the same first cores (its CPU pinning, on by
default), so instances that each get their share of the cores run on the
same ones. pyserver's openvino backend leaves OpenVINO's pinning to the
process's first instance only (pyserver/backends/openvino.py _Pinning).

  python bench/openvino_instances.py [--instances 2] [--seconds 3] [--rounds 3]

One process, the MLP of bench/backend_overhead.py (FP32 1024 -> 4096 -> 16)
through OpenVINO, batches of 8. Each round runs, alternated, N compiled
models on N threads (one infer request each, back to back, INFERENCE_NUM_
THREADS = the instance's share of the cores as pyserver gives it):

- all_pinned: every model compiled with OpenVINO's default pinning (what
  pyserver did before);
- first_pinned: the first pinned, the others not (what it does now);

and a single model alone for scale. Prints infer/s of each and the ratio
first_pinned / all_pinned (the median round). Not a test: the figures are
the machine's. Needs N <= the cores for the ratio to say much.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

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
    setups = {"all_pinned": compile_all([True] * n),
              "first_pinned": compile_all([True] + [False] * (n - 1)),
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
    print(json.dumps({"instances": n, "inference_threads_each": threads, "cores": os.cpu_count(),
                      "infer_per_s": {k: round(v, 1) for k, v in med.items()},
                      "first_pinned_over_all_pinned": round(med["first_pinned"]
                                                            / med["all_pinned"], 3)}, indent=2))


if __name__ == "__main__":
    main()
