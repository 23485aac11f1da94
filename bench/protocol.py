"""HTTP protocol throughput and latency of a trivial model, driven by wrk (a C
load generator, so the client does not bound the figure).

  python bench/protocol.py [--duration 5] [--concurrency 1 16 64]

Starts `python -m pyserver` on 127.0.0.1 with an ONNX add_sub model
(FP32 [16], max_batch_size 64, dynamic batching with Triton's defaults), then
for HTTP-JSON and HTTP-binary requests at each concurrency runs wrk for a
fixed window after a warm-up, and prints infer/s, p50 and p99 as JSON. Non-2xx
answers and socket errors are counted and reported, never hidden. Needs `wrk`
(Debian package; `make bench` installs it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyserver.testing import write_add_sub  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from wrk import free_port, lua_string, run_wrk  # noqa: E402

VALUES = list(range(16))






def write_scripts(folder: Path) -> dict[str, Path]:
    json_body = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": VALUES},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": VALUES}]}).encode()
    header = json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT1", "parameters": {"binary_data": True}}]}).encode()
    raw = struct.pack("<16f", *VALUES)
    binary_body = header + raw + raw
    scripts = {}
    for name, body, extra in (
            ("json", json_body, 'wrk.headers["Content-Type"] = "application/json"\n'),
            ("binary", binary_body,
             f'wrk.headers["Inference-Header-Content-Length"] = "{len(header)}"\n'
             'wrk.headers["Content-Type"] = "application/octet-stream"\n')):
        path = folder / f"{name}.lua"
        path.write_text(f'wrk.method = "POST"\nwrk.body = {lua_string(body)}\n{extra}')
        scripts[name] = path
    return scripts






def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--eager", action="store_true", help="use our eager batching policy")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk; `make bench` does it)")

    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-"))
    extra = "dynamic_batching { }"
    if args.eager:
        extra += '\nparameters { key: "pyserver_batching" value { string_value: "eager" } }'
    write_add_sub(tmp / "models", max_batch_size=64, extra=extra)
    scripts = write_scripts(tmp)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "pyserver", "--model-repository", str(tmp / "models"),
         "--http-address", "127.0.0.1", "--http-port", str(port),
         "--allow-grpc", "false", "--allow-metrics", "false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v2/models/add_sub/infer"
    results = {"system": "pyserver", "model": "add_sub onnx FP32[16]",
               "batching": "eager" if args.eager else "triton (delay 0)", "rows": []}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
                    if b" 200 " in s.recv(1024):
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("server did not start: " + server.stderr.read().decode()[-2000:])
            time.sleep(0.1)
        for encoding, script in scripts.items():
            for conns in args.concurrency:
                run_wrk(url, script, conns, args.warmup)
                row = {"encoding": f"http-{encoding}", "concurrency": conns,
                       **run_wrk(url, script, conns, args.duration)}
                results["rows"].append(row)
                print(f"{row['encoding']:>12} c{conns:<3} {row['infer_per_s']:>9.0f} infer/s  "
                      f"p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                      f"errors {row['non_2xx'] + row['socket_errors']}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
