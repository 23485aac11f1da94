"""The C load generators the suite drives, and their output parsed into
numbers: h2load (nghttp2-client) for gRPC unary with a prepared request body,
wrk for HTTP/1.1 with a Lua script. Parsing is kept pure so it is unit-tested
(tests/unit/test_bench_loadgen.py).

gRPC failures travel in trailers (grpc-status) on an HTTP 200, which h2load
does not look at. A failed unary call carries no DATA frame, though, and
every successful answer to the same prepared request has the same size, so
`ok = data bytes / bytes of one good answer` counts the successes; the rest
of the completed requests are reported as errors.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bench.wrk import lua_string, parse_wrk

GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"

_FINISHED = re.compile(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s")
_REQUESTS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                       r"(\d+) failed, (\d+) errored, (\d+) timeout")
_TRAFFIC = re.compile(r"traffic: \S+ \((\d+)\) total, \S+ \((\d+)\) headers .*?, \S+ \((\d+)\) data")


def percentile(sorted_values: list, q: float):
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n*q/100), at least 1
    return sorted_values[int(min(rank, len(sorted_values))) - 1]


def parse_h2load(out: str) -> dict:
    """h2load's summary as numbers: rate, completed and failed requests, and
    the DATA bytes received (see the module docstring for why)."""
    finished = _FINISHED.search(out)
    done = _REQUESTS.search(out)
    traffic = _TRAFFIC.search(out)
    if not finished or not done or not traffic:
        raise RuntimeError("unexpected h2load output:\n" + out[-2000:])
    return {"infer_per_s": float(finished.group(3)), "requests": int(done.group(3)),
            "h2_failed": int(done.group(5)) + int(done.group(6)) + int(done.group(7)),
            "data_bytes": int(traffic.group(3))}


def parse_h2load_log(text: str) -> dict:
    """p50/p99 in ms from h2load's --log-file (start µs, status, elapsed µs)."""
    lat = sorted(int(line.split("\t")[2]) for line in text.splitlines() if line.strip())
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    return {"p50_ms": None if p50 is None else round(p50 / 1000, 3),
            "p99_ms": None if p99 is None else round(p99 / 1000, 3)}


def grpc_errors(result: dict, answer_bytes: int | None) -> int:
    """Completed calls that carried no answer: h2 failures plus calls whose
    DATA bytes are missing (a grpc-status error is trailers only)."""
    errors = result["h2_failed"]
    if answer_bytes:
        ok = result["data_bytes"] // answer_bytes
        errors += max(0, result["requests"] - result["h2_failed"] - ok)
    elif answer_bytes == 0:
        errors = result["requests"]
    return errors


def grpc_frame(message: bytes) -> bytes:
    """The 5-byte gRPC prefix (not compressed, big-endian length) + message."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def h2load(port: int, body: Path, conns: int, seconds: float, warmup: float,
           log: Path, threads: int = 1, headers: tuple = ()) -> dict:
    """One h2load run against 127.0.0.1: one stream per connection
    (`-c N -m 1`), one client thread; a warm-up run, then the timed window.
    (Not --warm-up-time: h2load keeps counting DATA bytes through it.)
    ``headers``: more request headers ("name: value"), as a deadline's
    grpc-timeout."""
    def once(duration: float, log_file: Path | None) -> str:
        cmd = ["h2load", "-c", str(conns), "-m", "1", "-t", str(threads),
               "-D", f"{int(duration * 1000)}ms",
               "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", str(body),
               *[arg for h in headers for arg in ("-H", h)],
               f"http://127.0.0.1:{port}{GRPC_INFER_PATH}"]
        if log_file is not None:
            cmd[1:1] = ["--log-file", str(log_file)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout

    if warmup > 0:
        once(warmup, None)
    result = parse_h2load(once(seconds, log))
    result.update(parse_h2load_log(log.read_text() if log.exists() else ""))
    log.unlink(missing_ok=True)
    return result


def h2load_answer_bytes(port: int, body: Path, n: int = 4) -> int:
    """DATA bytes of one answer to the prepared request (n sequential calls)."""
    out = subprocess.run(
        ["h2load", "-n", str(n), "-c", "1", "-m", "1", "-t", "1",
         "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", str(body),
         f"http://127.0.0.1:{port}{GRPC_INFER_PATH}"],
        capture_output=True, text=True, timeout=60).stdout
    return parse_h2load(out)["data_bytes"] // n


def wrk_script(path: Path, body: bytes, headers: dict) -> Path:
    lines = ['wrk.method = "POST"', f"wrk.body = {lua_string(body)}"]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def wrk(url: str, script: Path, conns: int, seconds: float, warmup: float,
        threads: int = 1) -> dict:
    """wrk against url: a warm-up run, then the timed window (one thread by
    default: the server needs the other core more than wrk does)."""
    def once(duration: float) -> str:
        cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{max(1, round(duration))}s", "--timeout", "10s",
               "--latency", "-s", str(script), url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout

    if warmup > 0:
        once(warmup)
    out = once(seconds)
    result = parse_wrk(out)
    done = re.search(r"(\d+) requests in ", out)
    result["requests"] = int(done.group(1)) if done else None
    result["errors"] = result["non_2xx"] + result["socket_errors"]
    return only_successes(result, result["non_2xx"])


def drive(server, protocol: str, model: str, conns: int, seconds: float, warmup: float,
          script: Path, body: Path, answer_bytes: int | None, log: Path,
          threads: int = 1, grpc_headers: tuple = ()) -> dict:
    """One cell against ``server``'s ``model``: h2load over gRPC (``body``,
    ``grpc_headers`` besides gRPC's own; failed calls told from
    ``answer_bytes``, grpc_errors) or wrk over HTTP (``script``, the
    model's infer route), ``conns`` connections; infer/s counts good
    answers only, ``errors`` the others."""
    if protocol == "grpc":
        result = h2load(server.grpc_port, body, conns, seconds, warmup, log, threads,
                        grpc_headers)
        result["errors"] = grpc_errors(result, answer_bytes)
        return only_successes(result, result["errors"])
    return wrk(f"http://127.0.0.1:{server.http_port}/v2/models/{model}/infer", script, conns,
               seconds, warmup, threads)


def only_successes(result: dict, failed_answers: int) -> dict:
    """infer/s counts good answers only; the load generator's own rate
    (answers of any kind) stays as requests_per_s."""
    result["requests_per_s"] = result["infer_per_s"]
    if failed_answers and result.get("requests"):
        good = max(0, result["requests"] - failed_answers) / result["requests"]
        result["infer_per_s"] = round(result["infer_per_s"] * good, 1)
    return result
