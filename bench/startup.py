"""Time to READY for a repository of many small ONNX models.

Writes N add_sub models (pyserver.testing) into a temporary repository,
starts `python -m pyserver` on it and polls /v2/health/ready; prints JSON
with the seconds from process start to ready, and the same for an
`import pyserver` baseline (interpreter + imports) so the load path itself
shows. Every model is then checked READY in the repository index.

    .venv/bin/python bench/startup.py [--models 500] [--load-threads 4]

With --store s3 the same repository also goes into a bucket of moto's S3
server (started here on 127.0.0.1, `pip install 'moto[server]'`), and the
server starts on s3://127.0.0.1:PORT/bucket/repo twice: cold (an empty
TRITON_AWS_MOUNT_DIRECTORY: every object downloaded) and cached (the same
folder again: objects listed, none fetched); it prints the three times and
their ratios, and how many cached files the cached start rewrote.

    .venv/bin/python bench/startup.py --store s3 --models 200
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


def time_to_ready(repo: Path | str, load_threads: int, extra: list[str],
                  env: dict | None = None) -> tuple[float, str, int]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyserver", "--model-repository", str(repo),
         "--http-port", str(port), "--http-address", "127.0.0.1", "--allow-grpc=false",
         "--allow-metrics=false", f"--model-load-thread-count={load_threads}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(env or {})})
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


S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
          "AWS_DEFAULT_REGION": "us-east-1"}


class MotoServer:
    """moto's S3 server on a free port, in its own process."""

    def __enter__(self):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise SystemExit("moto's server did not start")
                time.sleep(0.05)
        self.endpoint = f"127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(10)


def upload(repo: Path, endpoint: str, bucket: str) -> float:
    """The repository's files as objects under repo/ (16 at a time); seconds."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    os.environ.update(S3_ENV)
    client = boto3.client("s3", endpoint_url=f"http://{endpoint}")
    client.create_bucket(Bucket=bucket)
    started = time.monotonic()
    files = [p for p in sorted(repo.rglob("*")) if p.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: client.put_object(Bucket=bucket, Key=f"repo/{p.relative_to(repo).as_posix()}",
                                                  Body=p.read_bytes()), files))
    return time.monotonic() - started


def mtimes(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()
            and ".pyserver-sync" not in p.parts}


def bench_s3(args, repo: Path, tmp: str) -> None:
    """Local disk, S3 cold, S3 cached: time to READY of each, and ratios."""
    def ready_in(where, env=None):
        elapsed, out, ready = time_to_ready(where, args.load_threads, [], env)
        if ready != args.models:
            tail = "\n".join(out.splitlines()[-20:])
            raise SystemExit(f"only {ready} of {args.models} models READY from {where}\n{tail}")
        return elapsed

    with MotoServer() as moto:
        upload_s = upload(repo, moto.endpoint, "bench")
        uri = f"s3://{moto.endpoint}/bench/repo"
        local, cold, cached, rewritten = [], [], [], []
        for run in range(args.runs):
            local.append(ready_in(repo))
            mount = Path(tmp) / f"mount-{run}"  # empty: every object downloaded
            env = {**S3_ENV, "TRITON_AWS_MOUNT_DIRECTORY": str(mount)}
            cold.append(ready_in(uri, env))
            before = mtimes(mount)
            cached.append(ready_in(uri, env))  # the same folder: nothing to fetch
            after = mtimes(mount)
            rewritten.append(sum(1 for k, v in after.items() if before.get(k) != v))
    best = {"local": min(local), "s3_cold": min(cold), "s3_cached": min(cached)}
    print(json.dumps({
        "models": args.models,
        "objects": sum(1 for p in repo.rglob("*") if p.is_file()),
        "load_threads": args.load_threads,
        "cpu_count": os.cpu_count(),
        "local_s": [round(t, 2) for t in local],
        "s3_cold_s": [round(t, 2) for t in cold],
        "s3_cached_s": [round(t, 2) for t in cached],
        "cached_files_rewritten": rewritten,
        "upload_s": round(upload_s, 2),
        "ratio_cold_vs_local": round(best["s3_cold"] / best["local"], 2),
        "ratio_cached_vs_local": round(best["s3_cached"] / best["local"], 2),
        "ratio_cold_vs_cached": round(best["s3_cold"] / best["s3_cached"], 2),
    }, indent=2))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=500)
    p.add_argument("--load-threads", type=int, default=4)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--target-s", type=float, default=10.0)
    p.add_argument("--store", choices=("local", "s3"), default="local",
                   help="s3: also from moto's S3 server, cold and cached, against local disk")
    args = p.parse_args()
    if args.store == "s3":
        with tempfile.TemporaryDirectory(prefix="pyserver-startup-") as tmp:
            repo = Path(tmp) / "repo"
            write_repository(repo, args.models)
            bench_s3(args, repo, tmp)
        return
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
