"""Random queues drained by the C++ batcher and by the pure-Python reference
must produce the same batches."""

import random

import pytest

from pyserver.engine import CompletionQueue, ModelStats, Scheduler
from pyserver.reference_batcher import ReferenceBatcher


def drain_cpp(cfg, requests):
    sched = Scheduler.dynamic(cfg, ModelStats(), CompletionQueue())
    for i, (bs, key) in enumerate(requests):
        sched.enqueue(i, bs, 0, 0, key)
    out = []
    while sched.queued_count:
        out.append(list(sched.next_batch().requests))
    return out


def drain_ref(cfg, requests):
    ref = ReferenceBatcher(cfg["max_batch_size"], cfg.get("preferred_batch_size", ()),
                           cfg.get("max_queue_delay_microseconds", 0), cfg.get("eager", False),
                           cfg.get("enforce_equal_shapes", False))
    for i, (bs, key) in enumerate(requests):
        ref.enqueue(i, bs, key, now_ns=0)
    out = []
    while ref.queue:
        action, n = ref.decide(now_ns=0)
        assert action == "send", "scenarios are built so that every decision is to send"
        out.append(ref.take(n))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_same_batches_as_reference(seed):
    rng = random.Random(seed)
    mbs = rng.choice([1, 2, 4, 8, 16])
    preferred = sorted(rng.sample(range(1, mbs + 1), rng.randint(0, min(3, mbs))))
    cfg = {
        "max_batch_size": mbs,
        "preferred_batch_size": preferred,
        # delay 0 or eager: every decision is to send, so nothing is timing dependent
        "max_queue_delay_microseconds": 0,
        "eager": rng.random() < 0.3,
        "enforce_equal_shapes": rng.random() < 0.5,
    }
    requests = [(rng.randint(1, mbs), rng.choice([1, 2])) for _ in range(rng.randint(1, 40))]
    assert drain_cpp(cfg, requests) == drain_ref(cfg, requests)
