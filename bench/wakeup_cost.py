"""What one thread pays to wake another on this machine: the time an
eventfd write() takes when a thread of the same process sleeps in
epoll_wait on it, by where the two threads run.

  python bench/wakeup_cost.py [--writes 2000] [--gap-us 200]

Cases (the writer spins --gap-us between writes, as a busy server thread
does, so its CPU is never idle):
- same CPU: the sleeper pinned to the writer's CPU (no inter-processor
  interrupt: the kernel queues it locally);
- other CPU, idle: the sleeper pinned to the other CPU, which has nothing
  else to run (the wake-up needs an IPI to a halted vCPU);
- other CPU, busy: the same with a SCHED_IDLE spinner keeping that CPU busy
  (still an IPI, to a running vCPU);
- unpinned: where the scheduler puts them.

Prints the mean and p50/p90 µs per write for each. Needs 2 CPUs. This is
why, in a VM whose IPIs exit to the hypervisor, a thread that wakes another
on the other core pays for it on its own critical path, and why spinning
waiters (which keep the chatty threads on one core) measure faster here
than sleeping ones; bench/README.md, "What a wake-up costs".
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time

_STOP = 1 << 40  # an eventfd value that tells the sleeper to exit


def measure(writes: int, gap_ns: int, writer_cpu: int | None, sleeper_cpu: int | None) -> dict:
    """µs per eventfd write that wakes a sleeper; the sleeper is a forked
    process (a thread of this one would need the GIL the writer holds)."""
    fd = os.eventfd(0, os.EFD_NONBLOCK)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the sleeper
        try:
            if sleeper_cpu is not None:
                os.sched_setaffinity(0, {sleeper_cpu})
            ep = select.epoll()
            ep.register(fd, select.EPOLLIN)
            os.write(ready_w, b"x")
            while True:
                ep.poll()
                try:
                    if os.eventfd_read(fd) >= _STOP:
                        break
                except BlockingIOError:
                    pass
        finally:
            os._exit(0)
    os.read(ready_r, 1)
    os.close(ready_r)
    os.close(ready_w)
    old = os.sched_getaffinity(0)
    if writer_cpu is not None:
        os.sched_setaffinity(0, {writer_cpu})
    clock = time.perf_counter_ns
    times = []
    try:
        time.sleep(0.01)
        for _ in range(writes):
            start = clock()
            while clock() - start < gap_ns:  # busy, as a server thread under load
                pass
            t0 = clock()
            os.eventfd_write(fd, 1)
            times.append(clock() - t0)
    finally:
        os.sched_setaffinity(0, old)
        os.eventfd_write(fd, _STOP)
        os.waitpid(pid, 0)
        os.close(fd)
    times.sort()
    n = len(times)
    return {"mean_us": round(sum(times) / n / 1e3, 1), "p50_us": round(times[n // 2] / 1e3, 1),
            "p90_us": round(times[n * 9 // 10] / 1e3, 1)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--writes", type=int, default=2000)
    p.add_argument("--gap-us", type=int, default=200)
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("needs 2 CPUs")
    a, b = cpus[0], cpus[1]
    gap = args.gap_us * 1000
    results = {
        "same CPU": measure(args.writes, gap, a, a),
        "other CPU, idle": measure(args.writes, gap, a, b),
    }
    # A SCHED_IDLE spinner keeps CPU b busy without taking time from anyone.
    spinner = subprocess.Popen(["chrt", "-i", "0", "taskset", "-c", str(b), sys.executable, "-c",
                                "while True: pass"])
    try:
        time.sleep(0.2)
        results["other CPU, busy"] = measure(args.writes, gap, a, b)
    finally:
        spinner.kill()
        spinner.wait()
    results["unpinned"] = measure(args.writes, gap, None, None)
    for case, row in results.items():
        print(f"{case:16s} eventfd write: mean {row['mean_us']:5.1f} µs  p50 {row['p50_us']:5.1f}"
              f"  p90 {row['p90_us']:5.1f}", file=sys.stderr)
    print(json.dumps({"writes": args.writes, "gap_us": args.gap_us, "cpus": len(cpus),
                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
