"""Faults from outside the model (#27): a worker killed with SIGKILL in the
middle of a batch, over HTTP and gRPC at once, while another model serves.
(A model's own segfault, os._exit and hang are in
tests/integration/test_python_backend.py; SIGTERM with calls in flight in
tests/integration/test_shutdown.py.)"""

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.test_grpc import start_grpc  # noqa: F401 (fixture)
from tests.integration.test_python_backend import (
    backends,
    infer_add_sub,
    infer_one,
    repo_with,
)


@pytest.mark.parametrize("batching", [False, True])
def test_kill_9_of_a_worker_mid_batch(tmp_path, start_grpc, batching):  # noqa: F811
    repo = repo_with(tmp_path, "crash", "add_sub")
    if batching:
        config = repo / "crash" / "config.pbtxt"
        config.write_text(config.read_text().replace("max_batch_size: 0", "max_batch_size: 4")
                          + "dynamic_batching { max_queue_delay_microseconds: 100000 }\n")
    server = start_grpc(repo)
    backend = backends(server, "crash")[0]
    value = (lambda v: np.array([[v]], np.int32)) if batching else \
        (lambda v: np.array([v], np.int32))
    old_pid = backend.pid
    gclient = grpcclient.InferenceServerClient(server.grpc_url)

    def grpc_call(v):
        t = grpcclient.InferInput("IN", list(value(v).shape), "INT32")
        t.set_data_from_numpy(value(v))
        return gclient.infer("crash", [t], client_timeout=60)

    def outcome(fn, v):
        try:
            return fn(v)
        except InferenceServerException as e:
            return e

    with ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(outcome, lambda v: infer_one(server.url, "crash", "IN", value(v),
                                                          "INT32"), 1000 + 20_000),
                 pool.submit(outcome, grpc_call, 1000 + 20_000)]
        time.sleep(0.8)  # both in the worker (or one queued behind it)
        os.kill(old_pid, signal.SIGKILL)
        results = [c.result(60) for c in calls]
    errors = [r for r in results if isinstance(r, InferenceServerException)]
    assert errors, results  # the batch that was running failed, and said why
    for e in errors:
        assert f"(pid {old_pid}) was killed by signal 9 (SIGKILL)" in e.message(), e.message()
    a = np.arange(4, dtype=np.float32)  # the other model never stopped
    np.testing.assert_array_equal(infer_add_sub(server.url, "add_sub", a, a)
                                  .as_numpy("OUTPUT0"), 2 * a)
    deadline = time.monotonic() + 30
    while not backend.healthy() and time.monotonic() < deadline:
        time.sleep(0.05)
    after = grpc_call(7)
    assert after.as_numpy("OUT").reshape(-1).tolist() == [7]
    assert int(after.as_numpy("PID").reshape(-1)[0]) != old_pid
    gclient.close()
