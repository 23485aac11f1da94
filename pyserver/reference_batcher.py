"""A pure-Python asyncio dynamic batcher with the same batching rules as
csrc's DynamicBatchScheduler (single priority level, no queue policies).

It is not used by the server. It exists so that the rules can be checked
differentially against the C++ implementation (tests/unit/test_batcher_differential.py)
and so that bench/engine_overhead.py can measure what the engine buys over
the obvious Python design.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque


class ReferenceBatcher:
    def __init__(self, max_batch_size: int, preferred_batch_sizes=(), max_queue_delay_us: int = 0,
                 eager: bool = False, enforce_equal_shapes: bool = False):
        self.max_batch_size = max_batch_size
        self.preferred = sorted(preferred_batch_sizes) or [max_batch_size]
        self.max_preferred = self.preferred[-1]
        self.max_delay_ns = max_queue_delay_us * 1000
        self.eager = eager
        self.enforce_equal_shapes = enforce_equal_shapes
        self.queue: deque = deque()  # (item, batch_size, shape_key, enqueue_ns)
        self._arrived = asyncio.Event() if _has_loop() else None

    def enqueue(self, item, batch_size: int = 1, shape_key: int = 0, now_ns: int | None = None):
        self.queue.append((item, batch_size, shape_key,
                           time.monotonic_ns() if now_ns is None else now_ns))
        if self._arrived is not None:
            self._arrived.set()

    def decide(self, now_ns: int):
        """('send', n) | ('wait', wake_at_ns) | ('empty', None): the same
        decision the C++ leader makes."""
        if not self.queue:
            return "empty", None
        pending = count = best_size = best_count = 0
        send_now = False
        oldest = None
        required = None
        for _, bs, key, t in self.queue:
            size = max(1, bs)
            if count == 0:
                required = key
            elif self.enforce_equal_shapes and key != required:
                send_now = True
                break
            if pending + size > self.max_preferred and best_size == 0 and count > 0:
                best_size, best_count = pending, count
            if pending + size > self.max_batch_size and count > 0:
                send_now = True
                break
            pending += size
            count += 1
            oldest = t if oldest is None else min(oldest, t)
            if pending in self.preferred:
                best_size, best_count = pending, count
            if pending >= self.max_batch_size:
                break
        delay_exceeded = self.max_delay_ns > 0 and now_ns - oldest >= self.max_delay_ns
        if self.eager:
            return "send", count
        if best_size and not delay_exceeded:
            return "send", best_count
        if send_now or pending >= self.max_preferred or delay_exceeded or self.max_delay_ns == 0:
            return "send", count
        return "wait", oldest + self.max_delay_ns

    def take(self, n: int) -> list:
        return [self.queue.popleft()[0] for _ in range(n)]

    async def next_batch(self) -> list:
        """Waits (on the event loop) until a batch is due, then returns it."""
        while True:
            action, arg = self.decide(time.monotonic_ns())
            if action == "send":
                return self.take(arg)
            self._arrived.clear()
            timeout = None if action == "empty" else max(0.0, (arg - time.monotonic_ns()) / 1e9)
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except asyncio.TimeoutError:
                pass


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False
