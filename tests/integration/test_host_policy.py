"""Triton's host policies (--host-policy, instance_group's host_policy):
a Python model's worker process and an instance thread run on the CPUs
their policy names and take memory from its NUMA node; what made them (the
loading thread, the event loop) is left as it was; a policy the kernel
refuses fails the model's load with Triton's text."""

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from pyserver.kernel.errors import ServerError
from pyserver.server.server import Server
from pyserver.testing import write_add_sub
from tests.integration.conftest import use_execution_mode

MODELS = Path(__file__).resolve().parents[1] / "models" / "python"
pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                                reason="CPU affinity is Linux's")


def cpus_of(pid_or_tid: int, task: bool = False) -> set[int]:
    return os.sched_getaffinity(pid_or_tid) if not task else _task_cpus(pid_or_tid)


def _task_cpus(tid: int) -> set[int]:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus = set()
            for part in line.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            return cpus
    raise AssertionError("no Cpus_allowed_list")


def memory_policy(pid: int) -> str:
    """The policy /proc/PID/numa_maps shows for the process's first mapping
    (its main thread's policy where the mapping has none of its own)."""
    return Path(f"/proc/{pid}/numa_maps").read_text().split("\n", 1)[0].split()[1]


def python_model(repo: Path, name: str, group_policy: str = "") -> None:
    shutil.copytree(MODELS / "add_sub", repo / name)
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace('name: "add_sub"', f'name: "{name}"')
    if group_policy:
        text = text.replace("instance_group [ { kind: KIND_CPU } ]",
                            f'instance_group [ {{ kind: KIND_CPU host_policy: "{group_policy}" }} ]')
    config.write_text(text)


def infer_add_sub(url: str, model: str, size: int = 4) -> None:
    client = httpclient.InferenceServerClient(url)
    a = np.arange(size, dtype=np.float32)
    b = np.ones(size, dtype=np.float32)
    inputs = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)


def worker_pid(server, model: str) -> int:
    mv = server.server.models.resolve(model, "")
    return mv.instances[0].backend._worker.pid


def loop_thread_cpus(server) -> set[int]:
    return server.run(lambda: os.sched_getaffinity(0))


@pytest.fixture
def two_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs to tell a pinned thread from the others")
    return cpus


def test_python_workers_take_their_policy_by_kind_or_by_group(tmp_path, start_server, two_cpus):
    """The default 'cpu' policy pins a KIND_CPU model's worker; a group that
    names its own policy takes that one (here a memory node and another
    CPU); a model whose group names a policy no flag defines runs anywhere.
    The loop thread and the test's thread keep every CPU they had."""
    first, second = two_cpus[0], two_cpus[1]
    everything = os.sched_getaffinity(0)
    python_model(tmp_path, "by_kind")
    python_model(tmp_path, "by_group", group_policy="pinned")
    python_model(tmp_path, "undefined", group_policy="nowhere")
    server = start_server(tmp_path, host_policies={
        "cpu": {"cpu-cores": f"{first}-{first}"},
        "pinned": {"cpu-cores": f"{second}-{second}", "numa-node": "0"}})
    for model in ("by_kind", "by_group", "undefined"):
        infer_add_sub(server.url, model)
    assert cpus_of(worker_pid(server, "by_kind")) == {first}
    assert memory_policy(worker_pid(server, "by_kind")) == "default"
    assert cpus_of(worker_pid(server, "by_group")) == {second}
    assert memory_policy(worker_pid(server, "by_group")).startswith("bind:0")
    assert cpus_of(worker_pid(server, "undefined")) == everything
    assert memory_policy(worker_pid(server, "undefined")) == "default"
    assert os.sched_getaffinity(0) == everything
    assert loop_thread_cpus(server) == everything


def test_a_restarted_worker_keeps_its_policy(tmp_path, start_server, two_cpus):
    second = two_cpus[1]
    python_model(tmp_path, "add_sub")
    server = start_server(tmp_path, host_policies={"cpu": {"cpu-cores": f"{second}-{second}"}})
    old = worker_pid(server, "add_sub")
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        backend = server.server.models.resolve("add_sub", "").instances[0].backend
        worker = backend._worker
        if worker is not None and worker.pid != old and worker.ready:
            break
        assert time.monotonic() < deadline, "the worker was not restarted"
        time.sleep(0.05)
    assert cpus_of(worker.pid) == {second}
    infer_add_sub(server.url, "add_sub")


@pytest.mark.parametrize("kind", ["onnx", "python_thread_mode"])
def test_an_instance_thread_runs_under_its_policy_not_on_the_loop(tmp_path, start_server,
                                                                    two_cpus, kind):
    """An in-process model that would run on the event loop (ONNX Runtime,
    a Python model in thread mode) runs on its instance thread instead,
    which its policy pins; the loop keeps every CPU."""
    second = two_cpus[1]
    if kind == "onnx":
        write_add_sub(tmp_path, "model", max_batch_size=0)
        size = 16
    else:
        python_model(tmp_path, "model")
        use_execution_mode(tmp_path, "thread")
        size = 4
    server = start_server(tmp_path, host_policies={"cpu": {"cpu-cores": f"{second}-{second}"}})
    infer_add_sub(server.url, "model", size=size)
    mv = server.server.models.resolve("model", "")
    assert mv.inline is None
    name = f"instance:{mv.instances[0].name}"
    thread = next(t for t in threading.enumerate() if t.name == name)
    assert cpus_of(thread.native_id, task=True) == {second}
    assert loop_thread_cpus(server) == os.sched_getaffinity(0)


@pytest.mark.parametrize("settings, message", [
    ({"cpu-cores": "4096-4096"}, "Unable to set NUMA thread affinity: Invalid argument"),
    ({"numa-node": "1000"}, "Unable to set NUMA memory policy: Invalid argument"),
])
def test_a_policy_the_kernel_refuses_fails_the_load(tmp_path, start_server, settings, message):
    python_model(tmp_path, "add_sub")
    write_add_sub(tmp_path, "onnx_add_sub")
    with pytest.raises(ServerError) as failed:
        start_server(tmp_path, host_policies={"cpu": settings})
    assert message in str(failed.value)
    assert "model 'add_sub' instance 'add_sub_0_0'" in str(failed.value)
    assert "model 'onnx_add_sub' instance 'onnx_add_sub_0_0'" in str(failed.value)


def test_settings_are_checked_when_the_server_is_made(tmp_path):
    for settings, message in (
            ({"memory": "1"}, "Unsupported host policy setting 'memory' is specified, "
                              "supported settings are 'numa-node', 'cpu-cores'"),
            ({"cpu-cores": "3"}, "host policy setting 'cpu-cores' format is "
                                 "'<lower_cpu_core_id>-<upper_cpu_core_id>'. Got 3"),
            ({"numa-node": "first"}, "Parsing 'numa-node' value: Can't parse 'first' to integer")):
        with pytest.raises(ServerError) as refused:
            Server(str(tmp_path), host_policies={"cpu": settings})
        assert message in str(refused.value)
