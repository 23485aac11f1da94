"""What the GIL costs request-handling threads that each enter Python per
request: ONNX Runtime's run of add_sub (the pybind session's ``run``, which
releases the GIL around the model, as a direct run on the loop calls it)
from 1, 2, ... threads of one process, the thread counts alternated.

  python bench/gil_contention.py [--runs 40000] [--threads 1 2] [--batch 1 8]
                                 [--rounds 2]

Prints, per batch size and thread count, runs/s, wall and process CPU µs
per run (the median round), and the ratios against one thread; a run of
batch B answers B requests, so it is Python entered once per B requests. Issue #28's candidate of
native request-handling threads that enter Python per request for the model
stands or falls on this: if N threads that each take the GIL per run made
N times the runs, Python could stay per request there; where they make
fewer, for as much CPU or more, the GIL's hand-offs cost more than the
parallel part gains, and Python must be entered per batch (or not at all)
on those threads. bench/README.md, "Threads that enter Python per request".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # as pyserver's CPU default for a small model
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def measure(sess, runs: int, threads: int, batch: int) -> dict:
    import numpy as np

    inputs = sess.get_inputs()
    shape = [d if isinstance(d, int) else batch for d in inputs[0].shape]
    feed = {i.name: np.ones(shape, np.float32) for i in inputs}
    outputs = [o.name for o in sess.get_outputs()]
    run = sess._sess.run  # the binding's own call, as batch_execution.NamedRun makes it
    each = runs // threads

    def work():
        for _ in range(each):
            run(outputs, feed, None)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    done = each * threads
    return {"runs_per_s": done / wall, "wall_us": wall * 1e6 / done, "cpu_us": cpu * 1e6 / done}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=40000)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from pyserver.testing import add_sub_onnx

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model.onnx"
        model.write_bytes(add_sub_onnx(16, batching=True))
        sess = session(model)
        measure(sess, 2000, 1, 1)  # warm-up
        cells = [(b, n) for b in args.batch for n in args.threads]
        rows: dict[tuple, list[dict]] = {c: [] for c in cells}
        for _ in range(args.rounds):
            for b, n in cells:  # alternated within each round
                rows[b, n].append(measure(sess, args.runs // b, n, b))
    for b in args.batch:
        base = None
        for n in args.threads:
            med = {k: statistics.median(r[k] for r in rows[b, n]) for k in rows[b, n][0]}
            if base is None:
                base = med
            print(f"batch {b:3d}, {n} thread(s): {med['runs_per_s']:9.0f} runs/s  wall "
                  f"{med['wall_us']:6.2f} µs/run  CPU {med['cpu_us']:6.2f} µs/run  vs 1 thread: "
                  f"{med['runs_per_s'] / base['runs_per_s']:.2f}x runs/s, "
                  f"{med['cpu_us'] / base['cpu_us']:.2f}x CPU/run")


if __name__ == "__main__":
    main()
