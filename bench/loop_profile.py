"""Where pyserver's event-loop thread spends its CPU per inference, by
protocol: ``perf record -e cpu-clock`` on that one thread while
perf_analyzer loads the Python add_sub model, the samples split into user
space and the kernel by the system call they run under, with the two
kernel costs HTTP/1.1 clients cause on the read side (waiting for the
socket's lock while the client's next segment is delivered into it, and
an ACK sent from inside the read).

  python bench/loop_profile.py [--protocols http grpc] [--concurrency 1 16]
                               [--models add_sub] [--seconds 3] [--rounds 1]

The protocols alternate within each round, each cell on its own fresh
server; prints one line per cell (µs per inference) and the JSON document
on stdout. Needs ``perf`` with the cpu-clock software event (hardware
counters are not needed). Not a test: timings vary with the machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import perf_analyzer_client, systems  # noqa: E402
from bench.perf_analyzer import write_repo  # noqa: E402

FREQ = 4000  # samples per second of the thread's CPU time
# the user-space function a kernel stack was entered from -> its name here
SYSCALLS = {"__GI___libc_write": "write", "write": "write", "read": "read", "__libc_read": "read",
            "__send": "send", "__libc_send": "send", "__libc_recv": "recv", "recv": "recv",
            "epoll_pwait": "epoll", "epoll_wait": "epoll"}


def split(perf_data: Path) -> collections.Counter:
    """split_script over ``perf script`` of a recording."""
    return split_script(subprocess.run(
        ["perf", "script", "-i", str(perf_data), "-F", "ip,sym,dso"],
        capture_output=True, text=True, check=True).stdout)


def split_script(out: str) -> collections.Counter:
    """Samples (``perf script -F ip,sym,dso``: one stack per paragraph, the
    leaf first) by where they ran: user, kernel:<syscall>, and the
    read-side kernel costs (read:lock_spin, read:ack)."""
    counts: collections.Counter = collections.Counter()
    for stack in out.split("\n\n"):
        lines = [line.split() for line in stack.strip().splitlines()]
        frames = [f[1] for f in lines if len(f) >= 3]
        if not frames:
            continue
        counts["total"] += 1
        if "kernel.kallsyms" not in lines[0][-1]:
            counts["user"] += 1
            continue
        name = next((SYSCALLS[f] for f in frames if f in SYSCALLS), "other")
        counts[f"kernel:{name}"] += 1
        if name == "read" and "lock_sock_nested" in frames:
            counts["read:lock_spin"] += 1
        elif name == "read" and "__tcp_transmit_skb" in frames:
            counts["read:ack"] += 1
    return counts


def cell(tool, model: str, protocol: str, conc: int, seconds: float) -> dict:
    """One fresh server under load; its loop thread's samples per inference."""
    with tempfile.TemporaryDirectory(prefix="loop-profile-") as tmp:
        tmp = Path(tmp)
        write_repo(tmp / "repo", [model])
        server = systems.start_pyserver(tmp / "repo", tmp / "log", [model])
        try:
            server.wait_ready(180)
            url = f"127.0.0.1:{server.http_port if protocol == 'http' else server.grpc_port}"
            window_ms = int(seconds * 1000)
            load = threading.Thread(target=perf_analyzer_client.run,
                                    args=(tool, url, protocol, model, conc, window_ms, 3))
            load.start()
            time.sleep(1.0 + seconds)  # past perf_analyzer's warm-up window
            data = tmp / "perf.data"
            c0 = server.model_counts(model)[0]
            subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(FREQ), "-g",
                            "-t", str(server.proc.pid), "-o", str(data), "--", "sleep",
                            str(seconds)], capture_output=True, check=True)
            inferences = server.model_counts(model)[0] - c0
            load.join()
            counts = split(data)
        finally:
            server.stop()
    per = 1e6 / FREQ / max(1, inferences)
    return {"model": model, "protocol": protocol, "concurrency": conc, "inferences": inferences,
            **{f"{k}_us": round(v * per, 1) for k, v in sorted(counts.items())}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--protocols", nargs="+", default=["http", "grpc"], choices=["http", "grpc"])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--models", nargs="+", default=["add_sub"], choices=["add_sub", "add_sub_dyn"])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    tool = perf_analyzer_client.binary()
    rows = []
    for r in range(args.rounds):
        for model in args.models:
            for conc in args.concurrency:
                order = args.protocols if r % 2 == 0 else args.protocols[::-1]
                for protocol in order:
                    row = cell(tool, model, protocol, conc, args.seconds)
                    rows.append(row)
                    print(f"{model:11} {protocol:4} c{conc:<3} round {r + 1}: "
                          + "  ".join(f"{k[:-3]} {v}" for k, v in row.items() if k.endswith("_us")),
                          file=sys.stderr, flush=True)
    print(json.dumps({"unit": "µs of the event-loop thread's CPU per inference", "rows": rows},
                     indent=1))


if __name__ == "__main__":
    main()
