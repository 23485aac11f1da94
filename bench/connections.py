"""Many keep-alive connections at once (#27, defect 9): HTTP through wrk and
gRPC through h2load, each with N connections of one request at a time, on
the ONNX add_sub model, alternated round by round on one server.

  python bench/connections.py [--connections 1024] [--seconds 10] [--rounds 2]
                              [--client-threads 2]
  python bench/ab.py --baseline ../old -- connections.py   # against a tree before

Prints JSON rows {protocol, connections, round, infer_per_s, p50_ms, p99_ms,
errors, cpu_us_per_infer (the server's process tree), busiest_thread_us
(its busiest thread's CPU per inference)} and, last, a row of the
HTTP / gRPC p99 ratio (the target: within 3x).

What it showed: uvloop's own listener (loop.create_server) takes one
connection from the accept queue per loop iteration, so under load the last
of 1,024 clients waited seconds with their first request sent (HTTP p99
5-6 s); pyserver/frontends/listener.py drains the queue at once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import grpc_frame, h2load, wrk, wrk_script  # noqa: E402
from bench.systems import start_pyserver  # noqa: E402


def bodies(tmp: Path, model: str = "add_sub", shape: tuple = (1, 16)) -> tuple[Path, Path]:
    """An add_sub request to ``model`` (inputs of ``shape``): a wrk Lua
    script (JSON) and an h2load body (a framed ModelInferRequest)."""
    import math

    import numpy as np

    from pyserver._proto import message_class

    count = math.prod(shape)
    doc = {"inputs": [{"name": n, "datatype": "FP32", "shape": list(shape),
                       "data": list(range(count))} for n in ("INPUT0", "INPUT1")]}
    script = wrk_script(tmp / f"{model}.lua", json.dumps(doc).encode(),
                        {"Content-Type": "application/json"})
    request = message_class("inference.ModelInferRequest")(model_name=model)
    for n in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=n, datatype="FP32")
        t.shape.extend(shape)
        request.raw_input_contents.append(np.arange(count, dtype=np.float32).tobytes())
    body = tmp / f"{model}.grpc"
    body.write_bytes(grpc_frame(request.SerializeToString()))
    return script, body


def measure(server, protocol: str, conns: int, seconds: float, script: Path,
            grpc_body: Path, tmp: Path, threads: int) -> dict:
    server.settle()
    cpu0 = server.cpu_seconds()
    threads0 = server.thread_cpu()
    if protocol == "http":
        result = wrk(f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/infer", script,
                     conns, seconds, warmup=0, threads=threads)
    else:
        result = h2load(server.grpc_port, grpc_body, conns, seconds, warmup=0,
                        log=tmp / "h2load.log", threads=threads)
        result.setdefault("errors", result.get("h2_failed", 0))
    cpu = server.cpu_seconds() - cpu0
    threads1 = server.thread_cpu()
    busiest = max((threads1[t] - threads0.get(t, 0.0) for t in threads1), default=0.0)
    done = max(1.0, result["infer_per_s"] * seconds)
    return {"protocol": protocol, "connections": conns,
            "infer_per_s": round(result["infer_per_s"], 1),
            "p50_ms": result.get("p50_ms"), "p99_ms": result.get("p99_ms"),
            "errors": result.get("errors", 0),
            "cpu_us_per_infer": round(cpu / done * 1e6, 1),
            "busiest_thread_us": round(busiest / done * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    # two client threads, as the red team ran: they leave the server's loop
    # less CPU, which is when a slow accept shows
    ap.add_argument("--client-threads", type=int, default=2)
    args = ap.parse_args()
    from pyserver.testing import write_add_sub

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_add_sub(tmp / "repo", extra="dynamic_batching { }")
        script, grpc_body = bodies(tmp)
        server = start_pyserver(tmp / "repo", tmp / "server.log", ["add_sub"])
        rows = []
        try:
            server.wait_ready()
            for r in range(args.rounds):
                order = ("http", "grpc") if r % 2 == 0 else ("grpc", "http")
                for protocol in order:
                    row = measure(server, protocol, args.connections, args.seconds, script,
                                  grpc_body, tmp, args.client_threads)
                    row["round"] = r
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
        finally:
            server.stop()
    p99 = {p: statistics.median(row["p99_ms"] for row in rows if row["protocol"] == p)
           for p in ("http", "grpc")}
    rows.append({"protocol": "http/grpc", "connections": args.connections,
                 "p99_ratio": round(p99["http"] / p99["grpc"], 2) if p99["grpc"] else None})
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
