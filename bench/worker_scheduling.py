"""A Python model's worker scheduling policies side by side: "auto" (the
default: SCHED_BATCH until the worker's groups wait for a core too often),
"batch" (SCHED_BATCH always) and "normal" (SCHED_OTHER), each set through
PYSERVER_PYTHON_SCHED.

  python bench/worker_scheduling.py [--cells 2:batch:http:16 2:plain:grpc:16 ...]
                                    [--rounds 2] [--duration 6] [--warmup 3]

A cell is INSTANCES:BATCHING:PROTOCOL:CONCURRENCY (BATCHING "batch" for
max_batch_size 64 + dynamic_batching, "plain" for none) of the add_sub model
of bench/python_backend.py, driven by wrk (HTTP) or h2load (gRPC). Each round
runs the three policies one after the other on a fresh server per policy (so
"auto" starts from SCHED_BATCH every time), cell by cell. Prints infer/s, p50,
p99 and how many workers left SCHED_BATCH (the server's log line), then per
cell the medians and the ratios against "batch". The defaults are the cells
where the policies differed on 2 cores: 2 instances with dynamic batching
over HTTP at c16 (SCHED_BATCH's p99 4-6 ms) and 2 unbatched instances over
gRPC at c16 (SCHED_BATCH's most infer/s).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import loadgen, systems  # noqa: E402
from bench.python_backend import add_sub_request, write_repo  # noqa: E402

POLICIES = ("auto", "batch", "normal")
SWITCH_LINE = "leaves SCHED_BATCH"


def parse_cell(text: str) -> tuple[int, bool, str, int]:
    instances, batching, protocol, concurrency = text.split(":")
    if batching not in ("batch", "plain") or protocol not in ("http", "grpc"):
        raise argparse.ArgumentTypeError(f"bad cell {text!r}: INSTANCES:batch|plain:http|grpc:C")
    return int(instances), batching == "batch", protocol, int(concurrency)


def cell_name(cell) -> str:
    instances, batching, protocol, conns = cell
    return f"{instances}:{'batch' if batching else 'plain'}:{protocol}:{conns}"


def run_cell(cell, policy: str, args, tmp: Path) -> dict:
    instances, batching, protocol, conns = cell
    folder = Path(tempfile.mkdtemp(dir=tmp))
    write_repo(folder / "repo", argparse.Namespace(batching=batching, size=16), instances)
    log = folder / "server.log"
    server = systems.start_pyserver(folder / "repo", log, ["add_sub"],
                                    extra_env={"PYSERVER_PYTHON_SCHED": policy})
    try:
        server.wait_ready(120)
        w = add_sub_request(16, batching)
        if protocol == "http":
            script = loadgen.wrk_script(folder / "json.lua", w.json_body(),
                                        {"Content-Type": "application/json"})
            r = loadgen.wrk(f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/infer",
                            script, conns, args.duration, args.warmup)
        else:
            body = folder / "add_sub.grpc.bin"
            body.write_bytes(w.grpc_body())
            r = loadgen.h2load(server.grpc_port, body, conns, args.duration, args.warmup,
                               folder / "h2load.log")
    finally:
        server.stop()
    return {"infer_per_s": r["infer_per_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "left_sched_batch": log.read_text(errors="replace").count(SWITCH_LINE)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", nargs="+", type=parse_cell,
                   default=[parse_cell("2:batch:http:16"), parse_cell("2:plain:grpc:16")])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=float, default=6)
    p.add_argument("--warmup", type=float, default=3)
    args = p.parse_args()
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install wrk nghttp2-client; `make bench` does it)")
    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-sched-"))
    rows = []
    try:
        for round_no in range(args.rounds):
            for cell in args.cells:
                for policy in POLICIES:
                    row = {"cell": cell_name(cell), "policy": policy, "round": round_no,
                           **run_cell(cell, policy, args, tmp)}
                    rows.append(row)
                    print(f"{row['cell']:<18} {policy:>6} round {round_no + 1}: "
                          f"{row['infer_per_s']:>8.0f} infer/s  p50 {row['p50_ms']} ms  "
                          f"p99 {row['p99_ms']} ms  workers that left SCHED_BATCH "
                          f"{row['left_sched_batch']}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = []
    for cell in dict.fromkeys(r["cell"] for r in rows):
        med = {policy: {key: statistics.median(r[key] for r in rows
                                               if r["cell"] == cell and r["policy"] == policy)
                        for key in ("infer_per_s", "p99_ms")} for policy in POLICIES}
        for policy in POLICIES:
            entry = {"cell": cell, "policy": policy, **med[policy],
                     "infer_per_s_vs_batch": round(med[policy]["infer_per_s"]
                                                   / med["batch"]["infer_per_s"], 3),
                     "p99_vs_batch": round(med[policy]["p99_ms"] / med["batch"]["p99_ms"], 3)}
            summary.append(entry)
            print(f"{cell:<18} {policy:>6}: median {entry['infer_per_s']:>8.0f} infer/s "
                  f"({entry['infer_per_s_vs_batch']:.2f}x batch), p99 {entry['p99_ms']} ms "
                  f"({entry['p99_vs_batch']:.2f}x batch)", file=sys.stderr)
    print(json.dumps({"rows": rows, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
