"""gRPC unary throughput, latency and server CPU per call for a trivial
model, driven by h2load (a C load generator, so the client does not bound
the figure) with a prepared ModelInfer request body.

  python bench/grpc_protocol.py [--duration 5] [--concurrency 1 16 64]

Starts a pyserver process (Server + GrpcFrontend on a uvloop loop, the
frontend's own code; no HTTP) on 127.0.0.1 with an ONNX add_sub model (FP32
[16], max_batch_size 64, dynamic batching with Triton's defaults). For each
concurrency it runs h2load for a fixed window after a warm-up, one stream per
connection (``-c N -m 1``, as research/running-peers.md measured Triton),
and prints infer/s, p50/p99 (from h2load's per-request log) and the server's
CPU time per call: its event-loop (Python) thread alone and the whole
process, read from /proc. Every call's grpc-status is checked through the
model's statistics (success and failure counts), never assumed. Needs
`h2load` (Debian package nghttp2-client).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Triton 2.51 with a Python add_sub model on this machine kind, h2load gRPC
# (research/running-peers.md): infer/s, p99 ms.
TRITON = {1: (2298, 0.66), 16: (2947, 7.61)}
TRITON_BATCHING = {1: (1474, 1.17), 16: (4532, 7.77)}
PATH = "/inference.GRPCInferenceService/ModelInfer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_body() -> bytes:
    """A gRPC-framed ModelInferRequest as tritonclient sends it."""
    import numpy as np

    from pyserver._proto import message_class

    req = message_class("inference.ModelInferRequest")(model_name="add_sub")
    values = np.arange(16, dtype=np.float32).tobytes()
    for name in ("INPUT0", "INPUT1"):
        t = req.inputs.add(name=name, datatype="FP32")
        t.shape.extend([1, 16])
        req.raw_input_contents.append(values)
    for name in ("OUTPUT0", "OUTPUT1"):
        req.outputs.add(name=name)
    msg = req.SerializeToString()
    return struct.pack(">BI", 0, len(msg)) + msg


# ---------------------------------------------------------------- server side


async def _serve(repo: str, port: int, io_threads: int = 0):
    from pyserver.frontends.grpc import GrpcFrontend
    from pyserver.server.server import Server

    server = Server(repo)
    await server.start()
    grpc = GrpcFrontend(server, "127.0.0.1", port, io_threads=io_threads)
    await grpc.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await stop.wait()
    await grpc.stop(5)
    await server.stop()


def serve_main(repo: str, port: int, io_threads: int = 0):
    """``io_threads``: the gRPC socket pump's threads (--grpc-infer-thread-count).
    The process runs on the malloc the server command would pick (it may
    re-execute itself here: pyserver/runtime/allocator.py)."""
    from pyserver.runtime.allocator import reexec_with_preferred
    reexec_with_preferred()
    import uvloop

    uvloop.run(_serve(repo, port, io_threads))


# ---------------------------------------------------------------- client side


def cpu_split(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(user, kernel) CPU seconds of a process, or of one of its threads."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    return sum(cpu_split(pid, tid))


def model_counts(port: int) -> tuple[int, int, int]:
    """(successes, failures, ns spent computing: input gather, execution and
    output scatter, summed over executed batches) from the model's
    statistics (its inference_stats count a batch's time once per request)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
        inf = stats["inference_stats"]
        compute = sum(int(row.get(k, {}).get("ns", 0)) for row in stats.get("batch_stats", [])
                      for k in ("compute_input", "compute_infer", "compute_output"))
        return (int(inf.get("success", {}).get("count", 0)),
                int(inf.get("fail", {}).get("count", 0)), compute)
    finally:
        client.close()


def run_h2load(port: int, body: Path, conns: int, seconds: float, log: Path | None) -> dict:
    cmd = ["h2load", "-D", f"{int(seconds * 1000)}ms", "-c", str(conns), "-m", "1", "-t", "1",
           "-H", "content-type: application/grpc", "-H", "te: trailers", "-d", str(body),
           f"http://127.0.0.1:{port}{PATH}"]
    if log is not None:
        cmd[1:1] = ["--log-file", str(log)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
    done = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                     r"(\d+) failed, (\d+) errored, (\d+) timeout", out)
    if not m or not done:
        raise RuntimeError("unexpected h2load output:\n" + out)
    # Streams still open when the window closes are cut: h2load counts them
    # as started, not done, and the server sees each as a cancelled request
    # (a failure in the model's statistics, if it was still queued).
    result = {"infer_per_s": float(m.group(3)), "requests": int(done.group(3)),
              "h2_failed": int(done.group(5)) + int(done.group(6)) + int(done.group(7)),
              "cut_at_end": int(done.group(2)) - int(done.group(3))}
    if log is not None and log.exists():
        lat = sorted(int(line.split()[2]) for line in log.read_text().splitlines() if line)
        if lat:
            result["p50_ms"] = round(lat[len(lat) // 2] / 1000, 3)
            result["p99_ms"] = round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000, 3)
        log.unlink()
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--serve", nargs=2, metavar=("REPO", "PORT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve_main(args.serve[0], int(args.serve[1]))
    if shutil.which("h2load") is None:
        sys.exit("h2load is not installed (apt-get install nghttp2-client)")

    from pyserver.testing import write_add_sub

    tmp = Path(tempfile.mkdtemp(prefix="pyserver-grpc-bench-"))
    write_add_sub(tmp / "models", max_batch_size=64, extra="dynamic_batching { }")
    body = tmp / "request.bin"
    body.write_bytes(request_body())
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(tmp / "models"), str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    results = {"system": "pyserver", "protocol": "grpc (h2load, -m 1)",
               "model": "add_sub onnx FP32[16]", "batching": "triton (delay 0)", "rows": []}
    try:
        line = server.stdout.readline()
        if line.strip() != "READY":
            server.kill()
            sys.exit("server did not start: " + server.stderr.read()[-3000:])
        for conns in args.concurrency:
            run_h2load(port, body, conns, args.warmup, None)
            ok0, fail0, compute0 = model_counts(port)
            user0, kernel0 = cpu_split(server.pid, server.pid)
            proc0 = cpu_seconds(server.pid)
            row = run_h2load(port, body, conns, args.duration, tmp / "h2load.log")
            user1, kernel1 = cpu_split(server.pid, server.pid)
            proc1 = cpu_seconds(server.pid)
            ok1, fail1, compute1 = model_counts(port)
            n = max(row["requests"], 1)
            row = {"concurrency": conns, **row,
                   "grpc_ok": ok1 - ok0,
                   "grpc_failed": max(0, fail1 - fail0 - row["cut_at_end"]),
                   "loop_thread_us_per_call": round((user1 + kernel1 - user0 - kernel0) * 1e6 / n, 1),
                   # the loop thread's time in Python and native code, and in
                   # the kernel (socket reads and writes, epoll)
                   "loop_user_us_per_call": round((user1 - user0) * 1e6 / n, 1),
                   "loop_kernel_us_per_call": round((kernel1 - kernel0) * 1e6 / n, 1),
                   # the model's own work per call (gather, run, scatter): on
                   # the loop thread too when the model runs inline there
                   # (model/inline.py)
                   "model_compute_us_per_call": round((compute1 - compute0) / 1e3 / n, 1),
                   "process_cpu_us_per_call": round((proc1 - proc0) * 1e6 / n, 1)}
            ref = TRITON.get(conns)
            if ref:
                row["vs_triton"] = round(row["infer_per_s"] / ref[0], 2)
                row["vs_triton_batching"] = round(row["infer_per_s"] / TRITON_BATCHING[conns][0], 2)
            results["rows"].append(row)
            print(f"grpc c{conns:<3} {row['infer_per_s']:>9.0f} infer/s  p50 {row.get('p50_ms')} ms"
                  f"  p99 {row.get('p99_ms')} ms  loop {row['loop_thread_us_per_call']} us/call"
                  f" (user {row['loop_user_us_per_call']}, kernel {row['loop_kernel_us_per_call']},"
                  f" model {row['model_compute_us_per_call']})"
                  f"  process {row['process_cpu_us_per_call']} us/call  "
                  f"failed {row['h2_failed'] + row['grpc_failed']}", file=sys.stderr)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    results["reference"] = {"triton_2.51_python_add_sub": {f"c{c}": {"infer_per_s": v[0], "p99_ms": v[1]}
                                                           for c, v in TRITON.items()},
                            "triton_2.51_dynamic_batching": {
                                f"c{c}": {"infer_per_s": v[0], "p99_ms": v[1]}
                                for c, v in TRITON_BATCHING.items()}}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
