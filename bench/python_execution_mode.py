"""A Python model's two execution modes on pyserver, side by side: each
instance in its own worker process (the default) or on a thread of the
server process (`pyserver_execution_mode: "thread"`, in_process.py).

  python bench/python_execution_mode.py [--duration 4] [--concurrency 16]
                                        [--instances 1 2] [--models add_sub numpy python]
                                        [--protocols grpc http]

Three model.py files, each served both ways (the same file, the config
differing only in the mode):
  add_sub  tests/models/python/add_sub (FP32[16]): the server's own cost per request
  numpy    FP32[16,256] through 8 rounds of tanh(x @ W), W 256x256: work that
           releases the GIL (BLAS)
  python   a loop of 20,000 integer steps in plain Python: work that holds it
Both servers run at once, driven alternately row by row (a warm-up, then a
fixed window; h2load for gRPC, wrk for HTTP JSON), so a drift in the
machine's load hits both alike. Prints infer/s and p99 per mode and the ratio
thread/process per model, instance count and protocol; JSON at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import loadgen, systems  # noqa: E402
from bench.workloads import Tensor, Workload  # noqa: E402
from pyserver.testing import ADD_SUB_CONFIG  # noqa: E402

ADD_SUB_PY = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
THREAD = 'parameters { key: "pyserver_execution_mode" value { string_value: "thread" } }'

NUMPY_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        rng = np.random.default_rng(0)
        self.w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)

    def execute(self, requests):
        responses = []
        for request in requests:
            y = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            for _ in range(8):
                y = np.tanh(y @ self.w)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
'''

PYTHON_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            total = 0
            for i in range(n):
                total = (total + i * i) % 1000003
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([total], np.int64))]))
        return responses
'''

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "{input}" data_type: {in_type} dims: {in_dims} }} ]
output [ {{ name: "{output}" data_type: {out_type} dims: {out_dims} }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""


def workloads() -> dict:
    import numpy as np

    a = np.arange(16, dtype=np.float32)
    b = np.full(16, 2.5, dtype=np.float32)
    x = (np.random.default_rng(1).standard_normal((16, 256)) / 4).astype(np.float32)
    n = np.array([20000], np.int32)
    return {
        "add_sub": Workload("add_sub", "add_sub", ADD_SUB_PY,
                            inputs=[Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)],
                            outputs={"OUTPUT0": a + b, "OUTPUT1": a - b}, dims={},
                            mlserver_class=""),
        "numpy": Workload("numpy", "numpy", Path("model.py"), inputs=[Tensor("X", "FP32", x)],
                          outputs={"Y": None}, dims={}, mlserver_class=""),
        "python": Workload("python", "python", Path("model.py"), inputs=[Tensor("N", "INT32", n)],
                           outputs={"OUT": None}, dims={}, mlserver_class=""),
    }


def write_model(repo: Path, name: str, instances: int, mode: str) -> None:
    model = repo / name
    (model / "1").mkdir(parents=True)
    if name == "add_sub":
        shutil.copy(ADD_SUB_PY, model / "1" / "model.py")
        config = ADD_SUB_CONFIG.format(name=name, backend='backend: "python"', max_batch_size=0,
                                       size=16, instances=instances, extra="")
    elif name == "numpy":
        (model / "1" / "model.py").write_text(NUMPY_PY)
        config = CONFIG.format(name=name, input="X", in_type="TYPE_FP32", in_dims="[ 16, 256 ]",
                               output="Y", out_type="TYPE_FP32", out_dims="[ 16, 256 ]",
                               instances=instances)
    else:
        (model / "1" / "model.py").write_text(PYTHON_PY)
        config = CONFIG.format(name=name, input="N", in_type="TYPE_INT32", in_dims="[ 1 ]",
                               output="OUT", out_type="TYPE_INT64", out_dims="[ 1 ]",
                               instances=instances)
    if mode == "thread":
        config += THREAD + "\n"
    (model / "config.pbtxt").write_text(config)


def drive(server, workload, protocol: str, conns: int, args, tmp: Path, bodies: dict,
          answer) -> dict:
    return loadgen.drive(server, protocol, workload.name, conns, args.duration, args.warmup,
                         bodies[workload.name, "http"], bodies[workload.name, "grpc"], answer,
                         tmp / "h2load.log")


def bench_instances(args, tmp: Path, instances: int, loads: dict, bodies: dict) -> list[dict]:
    servers, rows = {}, []
    try:
        for mode in ("process", "thread"):
            repo = tmp / f"models-{mode}-{instances}"
            for name in args.models:
                write_model(repo, name, instances, mode)
            server = systems.start_pyserver(repo, tmp / f"{mode}-{instances}.log", args.models)
            servers[mode] = server
            server.wait_ready(120)
        for name in args.models:
            workload = loads[name]
            for protocol in args.protocols:
                answers = {m: loadgen.h2load_answer_bytes(s.grpc_port, bodies[name, "grpc"])
                           if protocol == "grpc" else None for m, s in servers.items()}
                for conns in args.concurrency:
                    row = {"model": name, "instances": instances, "protocol": protocol,
                           "concurrency": conns}
                    for mode, server in servers.items():
                        r = drive(server, workload, protocol, conns, args, tmp, bodies,
                                  answers[mode])
                        server.settle()
                        row[mode] = {"infer_per_s": r["infer_per_s"], "p50_ms": r["p50_ms"],
                                     "p99_ms": r["p99_ms"], "errors": r["errors"]}
                    process, thread = row["process"]["infer_per_s"], row["thread"]["infer_per_s"]
                    row["thread_over_process"] = round(thread / process, 2) if process else None
                    rows.append(row)
                    print(f"{name:<8} instances {instances} {protocol:<4} c{conns:<3} "
                          f"process {process:>8.0f}/s (p99 {row['process']['p99_ms']} ms)  "
                          f"thread {thread:>8.0f}/s (p99 {row['thread']['p99_ms']} ms)  "
                          f"thread/process {row['thread_over_process']}", file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=4.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[16])
    p.add_argument("--instances", type=int, nargs="+", default=[1, 2])
    p.add_argument("--models", nargs="+", default=["add_sub", "numpy", "python"],
                   choices=["add_sub", "numpy", "python"])
    p.add_argument("--protocols", nargs="+", default=["grpc", "http"], choices=["grpc", "http"])
    args = p.parse_args()
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install wrk nghttp2-client; `make bench` does it)")
    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-modes-"))
    try:
        loads = workloads()
        bodies = {}
        for name, w in loads.items():
            bodies[name, "grpc"] = tmp / f"{name}.grpc.bin"
            bodies[name, "grpc"].write_bytes(w.grpc_body())
            bodies[name, "http"] = loadgen.wrk_script(tmp / f"{name}.lua", w.json_body(),
                                                      {"Content-Type": "application/json"})
        rows = [row for n in args.instances for row in bench_instances(args, tmp, n, loads, bodies)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
