"""perf_analyzer (Triton's own load generator, the binary in tritonclient's
wheel) as a load client for the benchmarks, beside wrk and h2load
(bench/loadgen.py): where it is, the environment it starts in, one run at
one concurrency, and its CSV report parsed into numbers.

perf_analyzer links libcudart.so.12 even for CPU-only runs; the
nvidia-cuda-runtime-cu12 wheel in the project's .venv provides it (as
tests/integration/test_perf_analyzer.py sets it up).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

MAIN_BIN = Path(__file__).resolve().parents[1] / ".venv" / "bin"


def binary() -> tuple[str, dict]:
    """perf_analyzer's path and the environment it runs in; RuntimeError
    when it is missing or does not start here."""
    path = shutil.which("perf_analyzer", path=str(MAIN_BIN)) or shutil.which("perf_analyzer")
    if path is None:
        raise RuntimeError("perf_analyzer is not installed (tritonclient[all]'s wheel ships it)")
    env = dict(os.environ)
    lib = Path(path).resolve().parents[1] / "lib"
    for found in sorted(lib.glob("python3*/site-packages/nvidia/cuda_runtime/lib")):
        env["LD_LIBRARY_PATH"] = f"{found}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    probe = subprocess.run([path, "--version"], capture_output=True, text=True, env=env)
    if "Perf Analyzer Version" not in probe.stdout + probe.stderr:
        raise RuntimeError(f"perf_analyzer does not start: {(probe.stderr or probe.stdout).strip()}")
    return path, env


def parse_csv(text: str) -> dict:
    """perf_analyzer's -f report (one concurrency): infer/s and the client's
    p50/p99/average latency in ms."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise RuntimeError("perf_analyzer wrote an empty report")
    row = rows[0]

    def ms(key):
        value = row.get(key)
        return round(float(value) / 1000, 3) if value not in (None, "") else None

    return {"infer_per_s": float(row["Inferences/Second"]), "p50_ms": ms("p50 latency"),
            "p99_ms": ms("p99 latency"), "avg_ms": ms("Avg latency")}


def run(tool: tuple[str, dict], url: str, protocol: str, model: str, concurrency: int,
        window_ms: int, trials: int = 3, use_async: bool = True, timeout: float = 300,
        request_rate: int = 0, prefix: list | None = None) -> dict:
    """One perf_analyzer run at one concurrency, or at one fixed request
    rate (``request_rate`` > 0: requests sent on a constant schedule
    whatever is in flight, so that two servers get the same load):
    ``trials`` windows of ``window_ms`` (the stability check is off: the
    benchmark alternates the systems and takes medians itself). Returns
    parse_csv's numbers; RuntimeError with perf_analyzer's output when it
    fails. ``prefix``: words before the command (``taskset -c 1``)."""
    path, env = tool
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        report = Path(tmp) / "report.csv"
        load = ["--request-rate-range", str(request_rate)] if request_rate > 0 else \
            ["--concurrency-range", str(concurrency)]
        cmd = [*(prefix or []), path, "-m", model, "-u", url, "-i", protocol, *load,
               "--measurement-interval", str(window_ms),
               "--max-trials", str(trials), "-s", "1000", "--percentile", "50", "-f", str(report)]
        if use_async:
            cmd.append("-a")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if out.returncode == -signal.SIGSEGV and protocol == "http" and use_async:
            # tritonclient's async HTTP client reads a CURLMsg after freeing
            # its easy handle (AsyncTransfer: msg->msg after
            # curl_easy_cleanup); when many answers land in one curl turn it
            # now and then crashes on that. Said on stderr; run once more.
            print(f"perf_analyzer crashed (SIGSEGV, its HTTP client) on {model} c{concurrency};"
                  " running the cell again", file=sys.stderr)
            report.unlink(missing_ok=True)
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if out.returncode != 0 or not report.exists():
            raise RuntimeError(f"perf_analyzer failed ({out.returncode}):\n"
                               f"{(out.stdout + out.stderr)[-2000:]}")
        return parse_csv(report.read_text())
