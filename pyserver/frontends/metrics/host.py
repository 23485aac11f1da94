"""The host gauges Triton reports: nv_cpu_utilization and the CPU memory
totals, sampled from /proc at most once per --metrics-interval-ms."""

from __future__ import annotations

import os
import time


class HostSampler:
    """CPU utilization and RAM from /proc, as Triton's metrics poller reads
    them: utilization is busy / (busy + idle) jiffies between two reads of
    /proc/stat, used memory is MemTotal - MemAvailable.

    Triton refreshes these on a thread every interval. Here nothing runs
    between scrapes: a scrape re-reads /proc when at least ``interval_s``
    has passed since the last read, and otherwise reports the last values.
    """

    def __init__(self, interval_s: float = 2.0, proc_root: str = "/proc", clock=time.monotonic):
        self.interval_s = interval_s
        self._stat_path = os.path.join(proc_root, "stat")
        self._meminfo_path = os.path.join(proc_root, "meminfo")
        self._clock = clock
        self.utilization = 0.0
        self.memory_total = 0.0
        self.memory_used = 0.0
        self._last_cpu = self._read_cpu()  # the baseline, as Triton takes at start
        self._read_memory()
        self._last_read = clock()

    def _read_cpu(self):
        try:
            with open(self._stat_path, "rb") as f:
                line = f.readline().split()
        except OSError:
            return None
        if not line or line[0] != b"cpu":
            return None
        v = [int(x) for x in line[1:9]] + [0] * max(0, 8 - len(line[1:9]))
        user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
        return user + nice + system + irq + softirq + steal, idle + iowait

    def _read_memory(self) -> None:
        values = {}
        try:
            with open(self._meminfo_path, "rb") as f:
                for line in f:
                    name, _, rest = line.partition(b":")
                    if name in (b"MemTotal", b"MemAvailable"):
                        values[name] = int(rest.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            return
        total = values.get(b"MemTotal")
        available = values.get(b"MemAvailable")
        if total is None or available is None or available > total:
            return
        self.memory_total = float(total)
        self.memory_used = float(total - available)

    def refresh(self) -> None:
        """Re-reads /proc if the interval has passed since the last read."""
        now = self._clock()
        if now - self._last_read < self.interval_s:
            return
        self._last_read = now
        cpu = self._read_cpu()
        if cpu is not None and self._last_cpu is not None:
            busy = max(0, cpu[0] - self._last_cpu[0])
            idle = max(0, cpu[1] - self._last_cpu[1])
            self.utilization = busy / (busy + idle) if busy + idle else 0.0
        if cpu is not None:
            self._last_cpu = cpu
        self._read_memory()
