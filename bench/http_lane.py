"""The HTTP infer lane against the designs it replaces, with a light client
(wrk, JSON add_sub bodies), all in one run.

  python bench/http_lane.py [--models add_sub_onnx add_sub add_sub_dyn]
                            [--concurrency 16 64] [--rounds 3] [--duration 3]

Four servers on the same repository, started one after the other and
driven in alternation, cell by cell, so that the machine's drift hits all
alike:

- loop: connections on the event loop's own transports, the lane off
  (`PYSERVER_HTTP_LANE=0`): every request parsed and routed by the
  connection (HttpConnection);
- lane: the default: the lane's reader in front of each connection on the
  loop, infer requests to routed targets run without the connection's
  Python (engine/protocol/http_lane.pyx);
- pump: `--http-thread-count 1`, the lane off: the pump's thread reads and
  writes, the connection parses on the loop;
- pump-lane: `--http-thread-count 1`: infer requests read on the pump's
  thread and handed to the loop whole.

For each cell: infer/s, p99, the server's CPU per inference (its whole
process tree, from /proc) and its busiest thread's, then each design's
ratios against loop (medians of the rounds' back-to-back ratios). Models
are bench/perf_analyzer.py's: add_sub_onnx (ONNX Runtime, run on the loop),
add_sub (the Python backend) and add_sub_dyn (the same with dynamic
batching).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import loadgen  # noqa: E402
from bench.perf_analyzer import MODELS, start, write_repo  # noqa: E402

DESIGNS = {
    "loop": ({"PYSERVER_HTTP_LANE": "0"}, []),
    "lane": ({}, []),
    "pump": ({"PYSERVER_HTTP_LANE": "0"}, ["--http-thread-count", "1"]),
    "pump-lane": ({}, ["--http-thread-count", "1"]),
}


def body(model: str) -> bytes:
    batched = MODELS[model]["max_batch_size"] > 0
    shape = [1, 16] if batched else [16]
    return json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": list(range(16))},
        {"name": "INPUT1", "datatype": "FP32", "shape": shape, "data": [2.5] * 16}]}).encode()


def measure(server, model: str, script: Path, conc: int, args) -> dict:
    server.settle()
    url = f"http://127.0.0.1:{server.http_port}/v2/models/{model}/infer"
    count0, threads0, tree0 = server.model_counts(model)[0], server.thread_cpu(), \
        server.cpu_seconds()
    result = loadgen.wrk(url, script, conc, args.duration, 0)
    count = server.model_counts(model)[0] - count0
    threads1, tree1 = server.thread_cpu(), server.cpu_seconds()
    busiest = max((threads1[k] - threads0.get(k, 0.0) for k in threads1), default=0.0)
    count = max(count, 1)
    return {"infer_per_s": result["infer_per_s"], "p99_ms": result["p99_ms"],
            "errors": result["errors"], "tree_us": (tree1 - tree0) * 1e6 / count,
            "busiest_us": busiest * 1e6 / count}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["add_sub_onnx", "add_sub", "add_sub_dyn"],
                   choices=list(MODELS))
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=1.0)
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_repo(tmp / "repo", args.models)
        scripts = {m: loadgen.wrk_script(tmp / f"{m}.lua", body(m),
                                         {"Content-Type": "application/json"})
                   for m in args.models}
        servers = {}
        try:
            for name, (env, flags) in DESIGNS.items():
                servers[name] = start(f"pyserver-{name}", tmp / "repo", tmp / f"{name}.log",
                                      args.models, env, flags)
                servers[name].wait_ready(240)
            # warm every model on every server (the lane needs a routed target)
            for s in servers.values():
                for m in args.models:
                    loadgen.wrk(f"http://127.0.0.1:{s.http_port}/v2/models/{m}/infer",
                                scripts[m], 4, args.warmup, 0)
            rows = []
            for model in args.models:
                for conc in args.concurrency:
                    runs = {name: [] for name in DESIGNS}
                    for _ in range(args.rounds):
                        for name, server in servers.items():
                            runs[name].append(measure(server, model, scripts[model], conc, args))
                    rows.append((model, conc, runs))
                    report_row(model, conc, runs)
                    time.sleep(0.2)
        finally:
            for s in servers.values():
                s.stop()
    print(json.dumps([{"model": m, "concurrency": c, "runs": r} for m, c, r in rows], indent=1))


def _median(runs: list, key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _ratio(a: list, b: list, key: str) -> float:
    return statistics.median(x[key] / y[key] for x, y in zip(a, b) if y[key])


def report_row(model: str, conc: int, runs: dict) -> None:
    print(f"\n{model} c{conc}")
    print(f"  {'design':9} {'infer/s':>9} {'p99 ms':>7} {'tree µs/inf':>12} {'busiest µs/inf':>15}"
          f" {'errors':>6}")
    for name, r in runs.items():
        print(f"  {name:9} {_median(r, 'infer_per_s'):9.0f} {_median(r, 'p99_ms'):7.2f} "
              f"{_median(r, 'tree_us'):12.1f} {_median(r, 'busiest_us'):15.1f} "
              f"{sum(x['errors'] for x in r):6d}")
    base = runs["loop"]
    for name, r in runs.items():
        if name == "loop":
            continue
        print(f"  {name}/loop: infer/s {_ratio(r, base, 'infer_per_s'):.2f}x, "
              f"tree CPU {_ratio(r, base, 'tree_us'):.2f}x, "
              f"busiest {_ratio(r, base, 'busiest_us'):.2f}x, "
              f"p99 {_ratio(r, base, 'p99_ms'):.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
