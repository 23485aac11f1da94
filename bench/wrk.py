"""wrk (the C HTTP load generator) for the benchmarks: request bodies as Lua
scripts, a run, and its output parsed into numbers."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lua_string(data: bytes) -> str:
    """Any bytes as a Lua string literal (every byte escaped)."""
    return '"' + "".join(f"\\{b}" for b in data) + '"'


def parse_wrk(out: str) -> dict:
    def dur(text):
        m = re.match(r"([\d.]+)(us|ms|s)", text)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v

    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if found is None:
        raise RuntimeError("wrk printed no result:\n" + out[-2000:])
    result = {"infer_per_s": float(found.group(1))}
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        m = re.search(rf"^\s+{pct}%\s+(\S+)", out, re.M)
        result[key] = round(dur(m.group(1)), 3) if m else None
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    result["non_2xx"] = int(bad.group(1)) if bad else 0
    result["socket_errors"] = sum(int(x) for x in errors.groups()) if errors else 0
    return result


def run_wrk(url: str, script: Path, conns: int, seconds: float, threads: int = 1) -> dict:
    cmd = ["wrk", f"-t{min(threads, conns)}", f"-c{conns}", f"-d{max(1, round(seconds))}s",
           "--latency", "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    return parse_wrk(out)
