"""Instructions the server process executes per request, counted by
valgrind's callgrind: a measure of pyserver's own per-request work that the
VM's noise does not move (the same binary, inputs and load give the same
count within a few percent, whatever else the machine is doing), for A/Bs
of changes too small for a timed benchmark to see.

  python bench/loop_instructions.py [--systems pyserver pyserver-NAME ...]
                                    [--env pyserver-NAME:KEY=VALUE ...]
                                    [--checkout pyserver-NAME:PATH ...]
                                    [--models add_sub_dyn add_sub add_sub_onnx ...]
                                    [--protocols http grpc] [--concurrency 1 8]
                                    [--requests 1000] [--warmup 200] [--binary] [--worker]

Each system is started under ``valgrind --tool=callgrind`` (its worker
processes are not: ``--trace-children=no``), one at a time; per model,
protocol and concurrency C, C client threads, each with a keep-alive
connection of its own, send the warm-up requests, the counters are zeroed
(``callgrind_control -z``), the measured requests go, and the counters are
dumped (``-d``). Printed per cell: instructions per request (the dump's
summary over the requests sent), the batch size the model formed over the
measured requests (statistics), and each system's ratio against the first.
HTTP requests are JSON (``--binary``: binary inputs and outputs, as
perf_analyzer sends them); gRPC requests carry raw input contents. Under callgrind the server
runs some 50x slower, so at C > 1 requests queue longer and batches grow:
compare cells whose batch sizes match. Where a model and protocol ran at
several concurrencies (batch sizes), their cells are also fitted to ``a +
b / batch``: what each request costs (a) and what each batch costs once
(b), for the server process and the workers. With ``--worker`` the Python
workers run under callgrind too (``--trace-children=yes``) and their
instructions per request are printed beside the server's; their spin for
the next batch is off then (``PYSERVER_PYTHON_EXEC_SPIN_US=0``), as a spin's
instructions would count time, not work. Counts user-space instructions only:
what the kernel does for a system call, and what a wake-up costs, are not
in it (a timed benchmark measures those: bench/perf_analyzer.py).
Needs valgrind. Not a test.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import perf_analyzer, systems  # noqa: E402

GRPC_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def http_request(model: str, binary: bool) -> tuple[bytes, dict]:
    """An add_sub request of FP32[1, 16] (FP32[16] unbatched) and its headers;
    ``binary``: as perf_analyzer sends it (binary inputs and outputs)."""
    import numpy as np

    shape = [1, 16] if perf_analyzer.MODELS[model]["max_batch_size"] else [16]
    data = np.arange(16, dtype=np.float32)
    doc = {"inputs": []}
    raw = b""
    for name in ("INPUT0", "INPUT1"):
        entry = {"name": name, "shape": shape, "datatype": "FP32"}
        if binary:
            entry["parameters"] = {"binary_data_size": data.nbytes}
            raw += data.tobytes()
        else:
            entry["data"] = data.tolist()
        doc["inputs"].append(entry)
    if binary:  # perf_analyzer's request: an empty id, both outputs asked as binary data
        doc = {"id": "", **doc, "outputs": [{"name": name, "parameters": {"binary_data": True}}
                                            for name in ("OUTPUT0", "OUTPUT1")]}
    header = json.dumps(doc, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json"}
    if binary:
        headers = {"Content-Type": "application/octet-stream",
                   "Inference-Header-Content-Length": str(len(header))}
    return header + raw, headers


def grpc_request(model: str) -> bytes:
    import numpy as np

    from pyserver._proto import message_class

    shape = [1, 16] if perf_analyzer.MODELS[model]["max_batch_size"] else [16]
    request = message_class("inference.ModelInferRequest")(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=name, datatype="FP32")
        t.shape.extend(shape)
        request.raw_input_contents.append(np.arange(16, dtype=np.float32).tobytes())
    return request.SerializeToString()


class Clients:
    """``conc`` threads, each with its own connection, sending one request
    at a time."""

    def __init__(self, server, model: str, protocol: str, conc: int, binary: bool):
        self.conc = conc
        if protocol == "http":
            body, headers = http_request(model, binary)
            conns = [http.client.HTTPConnection("127.0.0.1", server.http_port)
                     for _ in range(conc)]

            def one(i):
                conns[i].request("POST", f"/v2/models/{model}/infer", body, headers)
                answer = conns[i].getresponse()
                data = answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"HTTP {answer.status}: {data[:300]!r}")

            self.close = lambda: [c.close() for c in conns]
        else:
            import grpc

            message = grpc_request(model)
            channels = [grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
                        for _ in range(conc)]
            calls = [c.unary_unary(GRPC_METHOD, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b) for c in channels]

            def one(i):
                calls[i](message)

            self.close = lambda: [c.close() for c in channels]
        self.one = one

    def send(self, total: int) -> None:
        errors = []

        def run(i):
            try:
                for _ in range(total // self.conc):
                    self.one(i)
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(self.conc)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


def summary(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {dump}")


def instructions(out: Path, pid: int) -> int:
    """The instructions of process ``pid``'s dump since its counters were
    zeroed (callgrind writes it as callgrind_control returns: give it a
    moment)."""
    for _ in range(50):
        dumps = sorted(out.glob(f"callgrind.{pid}.*"))
        if dumps:
            return summary(dumps[-1])
        time.sleep(0.1)
    raise RuntimeError(f"callgrind wrote no dump for {pid}")


def measure(server, out: Path, model: str, protocol: str, conc: int, args) -> dict:
    """One cell: instructions per request over ``args.requests`` requests,
    the server process's (and with --worker, its workers' together)."""
    clients = Clients(server, model, protocol, conc, args.binary)
    try:
        clients.send(args.warmup)
        pids = server.pids() if args.worker else [server.proc.pid]
        before = server.model_counts(model)
        for pid in pids:
            for dump in out.glob(f"callgrind.{pid}.*"):
                dump.unlink()
            subprocess.run(["callgrind_control", "-z", str(pid)], check=True,
                           capture_output=True)
        sent = args.requests - args.requests % conc
        clients.send(sent)
        for pid in pids:
            subprocess.run(["callgrind_control", "-d", str(pid)], check=True,
                           capture_output=True)
        after = server.model_counts(model)
    finally:
        clients.close()
    inferences, executions = after[0] - before[0], after[1] - before[1]
    row = {"model": model, "protocol": protocol, "concurrency": conc, "requests": sent,
           "instructions_per_request": round(instructions(out, server.proc.pid) / sent),
           "batch_size": round(inferences / max(1, executions), 2)}
    if args.worker:
        row["worker_instructions_per_request"] = round(
            sum(instructions(out, pid) for pid in pids if pid != server.proc.pid) / sent)
    return row


def split_per_batch(cells: list[tuple[float, float]]) -> tuple[float, float] | None:
    """``(instructions per request, batch size)`` cells of one model,
    protocol and process fitted to ``a + b / batch`` (least squares): ``(a,
    b)``, the instructions each request costs and those each batch costs
    once, whatever its size. None without two distinct batch sizes."""
    xs = [1.0 / batch for _, batch in cells]
    if len(cells) < 2 or max(xs) - min(xs) < 1e-9:
        return None
    mx = sum(xs) / len(xs)
    my = sum(y for y, _ in cells) / len(cells)
    b = sum((x - mx) * (y - my) for x, (y, _) in zip(xs, cells)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def print_splits(rows: list[dict]) -> list[dict]:
    """split_per_batch over each system's cells of a model and protocol
    (its concurrencies), for the server process and the workers."""
    splits = []
    keys = sorted({(r["system"], r["model"], r["protocol"]) for r in rows})
    for system, model, protocol in keys:
        cells = [r for r in rows if (r["system"], r["model"], r["protocol"]) ==
                 (system, model, protocol)]
        for field, who in (("instructions_per_request", "server"),
                           ("worker_instructions_per_request", "workers")):
            if any(field not in r for r in cells):
                continue
            fit = split_per_batch([(r[field], r["batch_size"]) for r in cells])
            if fit is None:
                continue
            per_request, per_batch = fit
            splits.append({"system": system, "model": model, "protocol": protocol,
                           "process": who, "per_request": round(per_request),
                           "per_batch": round(per_batch)})
            print(f"{system} {model} {protocol} {who}: {per_request:,.0f} instructions per "
                  f"request + {per_batch:,.0f} per batch (batches "
                  f"{', '.join(str(r['batch_size']) for r in cells)})", file=sys.stderr)
    return splits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--systems", nargs="+", default=["pyserver"])
    p.add_argument("--models", nargs="+", default=["add_sub_dyn", "add_sub"],
                   choices=[m for m, spec in perf_analyzer.MODELS.items()
                            if not spec.get("c_backend") and not spec.get("mlp")])
    p.add_argument("--protocols", nargs="+", default=["http", "grpc"], choices=["http", "grpc"])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--binary", action="store_true", help="HTTP inputs as binary data")
    p.add_argument("--worker", action="store_true",
                   help="count the Python workers' instructions too (their spin off)")
    systems.add_variant_options(p)
    args = p.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("needs valgrind (apt-get install valgrind)")
    envs, checkouts = systems.variant_options(args)
    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-instructions-"))
    repo = tmp / "repo"
    perf_analyzer.write_repo(repo, args.models)
    rows = []
    for system in args.systems:
        out = tmp / system
        out.mkdir()
        prefix = ["valgrind", "--tool=callgrind",
                  f"--trace-children={'yes' if args.worker else 'no'}",
                  f"--callgrind-out-file={out}/callgrind.%p"]
        env = dict(envs.get(system) or {})
        if args.worker:
            env.setdefault("PYSERVER_PYTHON_EXEC_SPIN_US", "0")
        server = systems.start_pyserver(repo, tmp / f"{system}.log", args.models,
                                        extra_env=env, name=system,
                                        prefix=prefix, checkout=checkouts.get(system))
        try:
            server.wait_ready(900)
            for model in args.models:
                for protocol in args.protocols:
                    for conc in args.concurrency:
                        row = {"system": system,
                               **measure(server, out, model, protocol, conc, args)}
                        rows.append(row)
                        worker = row.get("worker_instructions_per_request")
                        print(f"{system:>20} {model:>16} {protocol:>4} c{conc:<3} "
                              f"{row['instructions_per_request']:>9,} instructions/request"
                              + (f" (workers {worker:,})" if worker is not None else "")
                              + f"  batch {row['batch_size']}", file=sys.stderr, flush=True)
        finally:
            server.stop()
    base = args.systems[0]
    ratios = []
    for row in rows:
        if row["system"] == base:
            continue
        ref = next(r for r in rows if r["system"] == base and all(
            r[k] == row[k] for k in ("model", "protocol", "concurrency")))
        ratio = row["instructions_per_request"] / ref["instructions_per_request"]
        ratios.append({"system": row["system"], "model": row["model"],
                       "protocol": row["protocol"], "concurrency": row["concurrency"],
                       "ratio": round(ratio, 3), "batch_sizes": [row["batch_size"],
                                                                 ref["batch_size"]]})
        print(f"{row['system']}/{base} {row['model']} {row['protocol']} c{row['concurrency']}: "
              f"{ratio:.3f}x instructions per request (batches {row['batch_size']} / "
              f"{ref['batch_size']})", file=sys.stderr)
    splits = print_splits(rows)
    print(json.dumps({"rows": rows, "ratios": ratios, "splits": splits}, indent=1))


if __name__ == "__main__":
    main()
