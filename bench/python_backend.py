"""Throughput and latency of a Triton Python model (add_sub, `backend: "python"`)
served by pyserver, driven by wrk (a C load generator) over HTTP JSON.

  python bench/python_backend.py [--duration 5] [--concurrency 1 16 64 128]
                                 [--instances 1 2] [--size 16] [--batching]

For each instance count it starts `python -m pyserver` on 127.0.0.1 with
tests/models/python/add_sub/1/model.py (Triton's add_sub example in our
words: one response per request, output types from the config) and a config
of FP32[size] inputs (no batching, as the example; --batching adds
max_batch_size 64 + dynamic_batching), measures the time from process start
to READY and each worker's own start time (from the server log), then runs
wrk at each concurrency for a fixed window after a warm-up and prints
infer/s, p50, p99 and the c_max / peak ratio as JSON. Non-2xx answers and
socket errors are counted, never hidden. Needs `wrk`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_PY = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from wrk import free_port, lua_string, run_wrk  # noqa: E402

from pyserver.testing import ADD_SUB_CONFIG  # noqa: E402


def write_script(folder: Path, size: int, batching: bool) -> Path:
    shape = [1, size] if batching else [size]
    values = list(range(size))
    body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": values},
        {"name": "INPUT1", "shape": shape, "datatype": "FP32", "data": values}]}).encode()
    path = folder / "json.lua"
    path.write_text(f'wrk.method = "POST"\nwrk.body = {lua_string(body)}\n'
                    'wrk.headers["Content-Type"] = "application/json"\n')
    return path






def wait_ready(port: int, server: subprocess.Popen, log_path: Path, timeout: float = 120) -> float:
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                if b" 200 " in s.recv(1024):
                    return time.monotonic() - started
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            sys.exit("server did not start: " + log_path.read_text()[-3000:])
        time.sleep(0.02)


def bench_instances(args, tmp: Path, script: Path, instances: int) -> dict:
    repo = tmp / f"models-{instances}"
    model = repo / "add_sub"
    (model / "1").mkdir(parents=True)
    shutil.copy(MODEL_PY, model / "1" / "model.py")
    extra = "dynamic_batching { }" if args.batching else ""
    (model / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
        name="add_sub", backend='backend: "python"', max_batch_size=64 if args.batching else 0,
        size=args.size, instances=instances, extra=extra))
    port = free_port()
    log_path = tmp / f"server-{instances}.log"
    with open(log_path, "w") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "pyserver", "--model-repository", str(repo),
             "--http-address", "127.0.0.1", "--http-port", str(port),
             "--allow-metrics", "false", "--allow-grpc", "false"],
            stdout=log_file, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        to_ready = wait_ready(port, server, log_path)
        worker_ms = [float(m) for m in re.findall(r"ready in (\d+) ms", log_path.read_text())]
        shm = re.search(r"tensors through (\w+) shared memory", log_path.read_text())
        url = f"http://127.0.0.1:{port}/v2/models/add_sub/infer"
        rows = []
        for conns in args.concurrency:
            run_wrk(url, script, conns, args.warmup, args.wrk_threads)
            row = {"instances": instances, "concurrency": conns,
                   **run_wrk(url, script, conns, args.duration, args.wrk_threads)}
            rows.append(row)
            print(f"instances {instances} c{conns:<4} {row['infer_per_s']:>9.0f} infer/s  "
                  f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                  f"errors {row['non_2xx'] + row['socket_errors']}", file=sys.stderr)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    peak = max(r["infer_per_s"] for r in rows)
    top = max(args.concurrency)
    at_top = next(r["infer_per_s"] for r in rows if r["concurrency"] == top)
    return {"instances": instances, "seconds_to_ready": round(to_ready, 3),
            "worker_start_ms": worker_ms, "shm": shm.group(1) if shm else None,
            "peak_infer_per_s": peak, f"c{top}_over_peak": round(at_top / peak, 3), "rows": rows}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 128])
    p.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    p.add_argument("--size", type=int, default=16, help="elements per input (FP32)")
    p.add_argument("--batching", action="store_true",
                   help="max_batch_size 64 + dynamic_batching (the model then gets lists of requests)")
    p.add_argument("--wrk-threads", type=int, default=1)
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk; `make bench` does it)")
    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-python-"))
    try:
        script = write_script(tmp, args.size, args.batching)
        results = {"system": "pyserver", "model": f"python add_sub FP32[{args.size}]",
                   "encoding": "http-json", "batching": "dynamic" if args.batching else "none",
                   "runs": [bench_instances(args, tmp, script, n) for n in args.instances]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
