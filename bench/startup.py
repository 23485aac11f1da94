"""Time to READY for a repository of many small ONNX models.

Writes N add_sub models (pyserver.testing) into a temporary repository,
starts `python -m pyserver` on it and polls /v2/health/ready; prints JSON
with the seconds from process start to ready, and the same for an
`import pyserver` baseline (interpreter + imports) so the load path itself
shows. Every model is then checked READY in the repository index.

    .venv/bin/python bench/startup.py [--models 500] [--load-threads 4]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_repository(root: Path, count: int) -> None:
    from pyserver.testing import ADD_SUB_CONFIG, add_sub_onnx
    blob = add_sub_onnx(16)
    for i in range(count):
        name = f"add_sub_{i:04d}"
        d = root / name
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
            name=name, backend='platform: "onnxruntime_onnx"', size=16, max_batch_size=8,
            instances=1, extra=""))
        (d / "1" / "model.onnx").write_bytes(blob)


def time_to_ready(repo: Path, load_threads: int, extra: list[str]) -> tuple[float, str, int]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserver", "--model-repository", str(repo),
         "--http-port", str(port), "--http-address", "127.0.0.1", "--allow-grpc=false",
         "--allow-metrics=false", f"--model-load-thread-count={load_threads}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise SystemExit("server exited:\n" + proc.stdout.read())
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        req = urllib.request.Request(f"{url}/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            rows = json.loads(r.read())
        ready = sum(1 for row in rows if row.get("state") == "READY")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    return elapsed, out, ready


def import_baseline() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import pyserver.cli, pyserver.server.server, "
                    "pyserver.frontends.http, onnxruntime"], check=True)
    return time.monotonic() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=500)
    p.add_argument("--load-threads", type=int, default=4)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--target-s", type=float, default=10.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="pyserver-startup-") as tmp:
        repo = Path(tmp)
        t0 = time.monotonic()
        write_repository(repo, args.models)
        write_s = time.monotonic() - t0
        baseline = import_baseline()
        times = []
        for _ in range(args.runs):
            elapsed, out, ready = time_to_ready(repo, args.load_threads, [])
            if ready != args.models:
                tail = "\n".join(out.splitlines()[-20:])
                raise SystemExit(f"only {ready} of {args.models} models READY\n{tail}")
            times.append(elapsed)
    best = min(times)
    print(json.dumps({
        "models": args.models,
        "load_threads": args.load_threads,
        "cpu_count": os.cpu_count(),
        "time_to_ready_s": [round(t, 2) for t in times],
        "best_s": round(best, 2),
        "per_model_ms": round((best - baseline) / args.models * 1000, 2),
        "import_baseline_s": round(baseline, 2),
        "write_repository_s": round(write_s, 2),
        "target_s": args.target_s,
        "within_target": best < args.target_s,
    }, indent=2))


if __name__ == "__main__":
    main()
