"""Throughput and latency of a Triton Python model (add_sub, `backend: "python"`)
on pyserver and on real Triton, driven by C load generators: wrk (HTTP JSON)
and h2load (gRPC, a prepared ModelInfer body).

  python bench/python_backend.py [--duration 3] [--rounds 3] [--concurrency 1 16 64 128]
                                 [--instances 1 2] [--size 16] [--batching]
                                 [--systems pyserver triton] [--protocols http grpc]
                                 [--grpc-timeout SECONDS] [--env pyserver-NAME:KEY=VALUE ...]

Both systems load the same files: tests/models/python/add_sub/1/model.py
(Triton's add_sub example in our words: one response per request, output
types from the config) and a config of FP32[size] inputs (no batching, as the
example; --batching adds max_batch_size 64 + dynamic_batching). Triton is the
tritonserver 2.51 bundled in the nvidia-pytriton wheel, installed into
bench/.venvs/triton on first use (bench/systems.py says how its stub is
started). For each instance count it starts the systems one after the other,
measuring each one's time from process start to READY (and, on pyserver,
each worker's own start time from the server log), then drives them in
alternation, row by row, so background-load drift hits both alike: each load
generator at each concurrency, a warm-up, then a fixed window, --rounds
times. Prints infer/s, p50, p99, errors, c_max/peak (of the median rounds)
and, at c16, pyserver/Triton per protocol (the median of the rounds' ratios,
each round's pair run back to back); the JSON document at the end. Each row
also has the server's CPU per inference (its whole process tree, from /proc,
over the inferences its statistics counted) and its busiest thread's (on
these shared cores the load generator's CPU sets the rate too). A system pyserver-NAME is this
checkout again with its own environment (--env pyserver-NAME:KEY=VALUE), for
an A/B of a setting in one run: its ratios against pyserver are printed too.
Non-2xx answers, socket errors and gRPC calls without an answer are counted,
never hidden. Needs `wrk` and `h2load` (`make bench` installs them).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_PY = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
sys.path.insert(0, str(ROOT))

from bench import loadgen, systems  # noqa: E402
from pyserver.testing import ADD_SUB_CONFIG  # noqa: E402


def add_sub_request(size: int, batching: bool):
    """The workload of bench/workloads.py at this size and shape."""
    import numpy as np

    from bench.workloads import ADD_SUB_PY, Tensor, Workload

    shape = (1, size) if batching else (size,)
    a = np.arange(size, dtype=np.float32).reshape(shape)
    b = np.full(shape, 2.5, dtype=np.float32)
    return Workload("add_sub", "add_sub", ADD_SUB_PY,
                    inputs=[Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)],
                    outputs={"OUTPUT0": a + b, "OUTPUT1": a - b}, dims={}, mlserver_class="AddSub")


def write_repo(repo: Path, args, instances: int) -> None:
    model = repo / "add_sub"
    (model / "1").mkdir(parents=True)
    shutil.copy(MODEL_PY, model / "1" / "model.py")
    extra = "dynamic_batching { }" if args.batching else ""
    (model / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
        name="add_sub", backend='backend: "python"', max_batch_size=64 if args.batching else 0,
        size=args.size, instances=instances, extra=extra))


def drive(server, protocol: str, conns: int, args, tmp: Path, bodies: dict, answer) -> dict:
    return loadgen.drive(server, protocol, "add_sub", conns, args.duration, args.warmup,
                         bodies["http"], bodies["grpc"], answer, tmp / "h2load.log",
                         grpc_headers=(f"grpc-timeout: {args.grpc_timeout}S",)
                         if args.grpc_timeout else ())


def bench_instances(args, tmp: Path, instances: int, bodies: dict) -> list[dict]:
    """Start each system in turn (so its time to READY is its own), then
    drive them alternately, row by row: a drift in the machine's background
    load then hits both alike. One run dict per system."""
    servers, runs = {}, {}
    try:
        for system in args.systems:
            repo = tmp / f"models-{system}-{instances}"
            write_repo(repo, args, instances)
            log_path = tmp / f"{system}-{instances}.log"
            if system.startswith("pyserver"):
                server = systems.start_pyserver(repo, log_path, ["add_sub"],
                                                extra_env=args.envs.get(system), name=system,
                                                checkout=args.checkouts.get(system))
            else:
                server = systems.STARTERS[system](repo, log_path, ["add_sub"])
            run = runs[system] = {"system": system, "instances": instances, "rows": []}
            try:
                run["seconds_to_ready"] = round(server.wait_ready(120), 3)
            except RuntimeError as err:
                print(f"{system} instances {instances}: {err}", file=sys.stderr)
                run["error"] = str(err)[-1500:]
                server.stop()
                continue
            servers[system] = server
            if system.startswith("pyserver"):
                text = log_path.read_text(errors="replace")
                shm = re.search(r"tensors through (\w+) shared memory", text)
                run.update(worker_start_ms=[float(m) for m in re.findall(r"ready in (\d+) ms", text)],
                           shm=shm.group(1) if shm else None)
        for protocol in args.protocols:
            answers = {n: loadgen.h2load_answer_bytes(s.grpc_port, bodies["grpc"]) if protocol == "grpc"
                       else None for n, s in servers.items()}
            # Rounds outermost: every concurrency once per round, so a slow
            # stretch of minutes hits all of them (c_max/peak) and both systems.
            for round_no in range(args.rounds):
                for conns in args.concurrency:
                    for system, server in servers.items():
                        count0, cpu0 = server.model_counts("add_sub")[0], server.thread_cpu()
                        r = drive(server, protocol, conns, args, tmp, bodies, answers[system])
                        cpu1, count = server.thread_cpu(), server.model_counts("add_sub")[0] - count0
                        server.settle()
                        spent, busiest = systems.cpu_spent(cpu0, cpu1)
                        row = {"protocol": protocol, "concurrency": conns, "round": round_no,
                               "infer_per_s": r["infer_per_s"], "p50_ms": r["p50_ms"],
                               "p99_ms": r["p99_ms"], "errors": r["errors"],
                               "cpu_us_per_infer": round(spent * 1e6 / count, 1) if count else None,
                               "busiest_us_per_infer":
                                   round(busiest * 1e6 / count, 1) if count else None}
                        runs[system]["rows"].append(row)
                        print(f"{system:>8} instances {instances} {protocol:<4} c{conns:<4} "
                              f"round {round_no + 1} {row['infer_per_s']:>9.0f} infer/s  "
                              f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                              f"errors {row['errors']}  CPU {row['cpu_us_per_infer']} us/inf "
                              f"(busiest thread {row['busiest_us_per_infer']})",
                              file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    top = max(args.concurrency)
    for run in runs.values():
        for protocol in args.protocols:
            rows = [r for r in run["rows"] if r["protocol"] == protocol]
            series = {c: statistics.median(r["infer_per_s"] for r in rows if r["concurrency"] == c)
                      for c in args.concurrency} if rows else {}
            if series and max(series.values()):
                run[f"{protocol}_median_infer_per_s"] = {f"c{c}": v for c, v in series.items()}
                run[f"{protocol}_peak_infer_per_s"] = max(series.values())
                run[f"{protocol}_c{top}_over_peak"] = round(series[top] / max(series.values()), 3)
    return list(runs.values())


def ratios_at(runs: list[dict], conc: int, system: str = "pyserver",
              base: str = "triton") -> list[dict]:
    """``system``/``base`` (infer/s, and the CPU per inference where both
    have it) at one concurrency, per instance count and protocol: each
    round's pair (run back to back) gives a ratio; the median round counts,
    so a slow minute that hits one system's window moves one ratio, not the
    answer."""
    found = {}
    for run in runs:
        for r in run.get("rows", []):
            if r["concurrency"] == conc:
                found[(run["system"], run["instances"], r["protocol"], r.get("round", 0))] = r
    pairs = {}
    for (name, instances, protocol, round_no), py in found.items():
        tri = found.get((base, instances, protocol, round_no))
        if name == system and tri and tri["infer_per_s"]:
            pairs.setdefault((instances, protocol), []).append((py, tri))
    out = []
    for (instances, protocol), rounds in sorted(pairs.items()):
        ratios = sorted(py["infer_per_s"] / tri["infer_per_s"] for py, tri in rounds)
        cpu, busiest = ([py[key] / tri[key] for py, tri in rounds if py.get(key) and tri.get(key)]
                        for key in ("cpu_us_per_infer", "busiest_us_per_infer"))
        out.append({"instances": instances, "protocol": protocol, "concurrency": conc,
                    "system": system, "base": base,
                    "over_base": round(statistics.median(ratios), 2),
                    "rounds": [round(x, 2) for x in ratios],
                    "cpu_over_base": round(statistics.median(cpu), 2) if cpu else None,
                    "busiest_over_base": round(statistics.median(busiest), 2) if busiest else None,
                    "p99_ms": {system: statistics.median(py["p99_ms"] for py, _ in rounds),
                               base: statistics.median(tri["p99_ms"] for _, tri in rounds)}})
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3,
                   help="times each row runs, the systems alternating; medians count")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 128])
    p.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    p.add_argument("--size", type=int, default=16, help="elements per input (FP32)")
    p.add_argument("--batching", action="store_true",
                   help="max_batch_size 64 + dynamic_batching (the model then gets lists of requests)")
    p.add_argument("--systems", nargs="+", default=["pyserver", "triton"],
                   help="pyserver, triton, or pyserver-NAME (this checkout with its own --env, "
                        "or another with --checkout)")
    p.add_argument("--protocols", nargs="+", default=["http", "grpc"], choices=["http", "grpc"])
    p.add_argument("--grpc-timeout", type=int, default=0, metavar="SECONDS",
                   help="a deadline on every gRPC call (grpc-timeout, as tritonclient's "
                        "client_timeout sends it); 0: none")
    systems.add_variant_options(p)
    args = p.parse_args()
    for system in args.systems:
        if system != "triton" and not system.startswith("pyserver"):
            p.error(f"unknown system {system!r}: pyserver, triton or pyserver-NAME")
    args.envs, args.checkouts = systems.variant_options(args)
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install wrk nghttp2-client; `make bench` does it)")
    if "triton" in args.systems:
        failed = systems.ensure_venvs(["triton"], lambda m: print(m, file=sys.stderr))
        if failed:
            print(f"Triton unavailable, pyserver only: {failed['triton'][-500:]}", file=sys.stderr)
            args.systems = [s for s in args.systems if s != "triton"]
    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-python-"))
    try:
        w = add_sub_request(args.size, args.batching)
        bodies = {"grpc": tmp / "add_sub.grpc.bin",
                  "http": loadgen.wrk_script(tmp / "json.lua", w.json_body(),
                                             {"Content-Type": "application/json"})}
        bodies["grpc"].write_bytes(w.grpc_body())
        runs = [run for n in args.instances for run in bench_instances(args, tmp, n, bodies)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pairs = [(s, "triton") for s in args.systems if s != "triton" and "triton" in args.systems]
    pairs += [(s, "pyserver") for s in args.systems
              if s.startswith("pyserver-") and "pyserver" in args.systems]
    results = {"model": f"python add_sub FP32[{args.size}] ({MODEL_PY.relative_to(ROOT)})",
               "batching": "dynamic" if args.batching else "none", "runs": runs,
               "ratios_c16": [r for system, base in pairs for r in ratios_at(runs, 16, system, base)]}
    for r in results["ratios_c16"]:
        system, base = r["system"], r["base"]
        print(f"{system}/{base} c16 instances {r['instances']} {r['protocol']:<4} "
              f"{r['over_base']:.2f}x median of {r['rounds']}, CPU per inference "
              f"{r['cpu_over_base']}x, busiest thread's {r['busiest_over_base']}x  "
              f"(p99 {r['p99_ms'][system]} vs {r['p99_ms'][base]} ms)",
              file=sys.stderr)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
