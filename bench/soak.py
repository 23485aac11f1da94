"""A soak (#27): at least --requests infers over HTTP (wrk) and gRPC
(h2load) on the ONNX add_sub model and a Python add_sub model, leg after
leg, against one server; its RSS and open file descriptors (whole process
tree) at the start, after each leg and at the end, and the end/start ratios.

  python bench/soak.py [--requests 1000000] [--leg-seconds 10] [--connections 16]
                       [--server-arg=--http-thread-count=1 ...]

Prints JSON: {"legs": [...], "start": {...}, "end": {...}, "rss_ratio",
"fds_ratio", "requests", "errors"}. A server that leaks shows a ratio that
grows with --requests; a healthy one stays near 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.connections import bodies  # noqa: E402
from bench.loadgen import h2load, wrk  # noqa: E402
from bench.systems import start_pyserver  # noqa: E402


def footprint(server) -> dict:
    rss = fds = 0
    for pid in server.pids():
        try:
            with open(f"/proc/{pid}/status") as f:
                rss += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            fds += len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, StopIteration):
            continue
    return {"rss_mb": round(rss / 1024, 1), "fds": fds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--leg-seconds", type=float, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--server-arg", action="append", default=[], metavar="FLAG",
                    help="a pyserver flag for the soaked server (repeatable), e.g. "
                    "--server-arg=--http-thread-count=1 to soak the socket pump")
    args = ap.parse_args()
    from pyserver.testing import write_add_sub

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        repo = tmp / "repo"
        write_add_sub(repo, extra="dynamic_batching { }")
        shutil.copytree(ROOT / "tests" / "models" / "python" / "add_sub", repo / "python_add_sub")
        config = repo / "python_add_sub" / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "add_sub"',
                                                     'name: "python_add_sub"'))
        models = {"add_sub": bodies(tmp, "add_sub", (1, 16)),
                  "python_add_sub": bodies(tmp, "python_add_sub", (4,))}  # no batch dimension
        server = start_pyserver(repo, tmp / "server.log", list(models),
                                extra_args=args.server_arg)
        legs, total, errors = [], 0, 0
        try:
            server.wait_ready()
            start = footprint(server)
            n = 0
            while total < args.requests:
                model = ("add_sub", "python_add_sub")[n // 2 % 2]
                protocol = ("http", "grpc")[n % 2]
                script, body = models[model]
                if protocol == "http":
                    r = wrk(f"http://127.0.0.1:{server.http_port}/v2/models/{model}/infer",
                            script, args.connections, args.leg_seconds, warmup=0)
                else:
                    r = h2load(server.grpc_port, body, args.connections, args.leg_seconds,
                               warmup=0, log=tmp / "h2load.log")
                    r["errors"] = r.get("h2_failed", 0)
                done = int(r.get("requests") or r["infer_per_s"] * args.leg_seconds)
                total += done
                errors += int(r.get("errors", 0))
                leg = {"model": model, "protocol": protocol, "requests": done,
                       "infer_per_s": round(r["infer_per_s"], 1), "errors": r.get("errors", 0),
                       **footprint(server)}
                legs.append(leg)
                print(json.dumps(leg), file=sys.stderr)
                n += 1
            server.settle()
            end = footprint(server)
        finally:
            server.stop()
    print(json.dumps({"requests": total, "errors": errors, "start": start, "end": end,
                      "rss_ratio": round(end["rss_mb"] / start["rss_mb"], 3),
                      "fds_ratio": round(end["fds"] / max(1, start["fds"]), 3),
                      "legs": legs}, indent=1))


if __name__ == "__main__":
    main()
