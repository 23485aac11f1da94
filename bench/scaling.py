"""How pyserver's request handling scales with the threads it is given
(issue #28), driven by Triton's perf_analyzer, against the one-loop server
and against Triton in the same run.

  python bench/scaling.py [--units 0 1 2 4 8] [--models add_sub_onnx add_sub add_sub_dyn]
                          [--protocols grpc http] [--concurrency 64] [--rounds 2]
                          [--window-ms 1000] [--no-triton] [--pin auto|yes|no]
                          [--clients perf_analyzer loadgen] [--client-threads N]

A unit count N is a pyserver started with ``--http-thread-count N
--grpc-infer-thread-count N``: N socket-pump threads beside the event loop
(N = 0: the loop alone, the base every ratio is taken against). Each runs
as bench/perf_analyzer.py runs its systems: all started at once, one under
load at a time, the first of each cell rotating, with the server's CPU per
inference (whole process tree, from /proc) and its busiest thread's. With
``--pin yes`` (``auto``: when the machine has at least 2 × (N + 1) cores
for the largest N) the N-unit server is pinned with taskset to cores
0..N, the load generator left the rest. Triton (nvidia-pytriton's
tritonserver, its default thread counts) serves the Python models beside
them; it has no ONNX Runtime backend, so the ONNX rows have no Triton
ratio.

``--clients loadgen`` drives each cell with the C load generators as well
(or instead): h2load for gRPC, wrk for HTTP, ``--client-threads`` threads
each (default: 1 on up to 4 cores, else 4), the same add_sub request as
perf_analyzer's; on a machine with many cores one perf_analyzer process
may be what limits, these need not be.

Prints each cell, then two tables per client (ratios against the 0-unit
server, and against Triton), and the JSON document last on stdout. Not a test: the
figures are the machine's. On 2 shared cores the client takes most of a
core, so only the CPU columns say much there; a machine with 8 or more
cores is where the infer/s ratio means what it says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import loadgen, perf_analyzer, perf_analyzer_client, systems  # noqa: E402
from bench.connections import bodies  # noqa: E402


def unit_system(n: int) -> str:
    return f"pyserver-u{n}"


class LoadgenClient:
    """A cell driven by h2load (gRPC) or wrk (HTTP) for ``seconds`` after a
    short warm-up, ``threads`` client threads, with ``conc`` connections of
    one request each: perf_analyzer_client.run's numbers (infer/s, p50,
    p99); RuntimeError when an answer failed."""

    def __init__(self, tmp: Path, seconds: float, threads: int):
        self.tmp, self.seconds, self.threads = tmp, seconds, threads
        self._bodies, self._answer_bytes = {}, {}

    def _body(self, model: str) -> tuple[Path, Path]:
        if model not in self._bodies:  # add_sub's inputs, batched where the model batches
            shape = (1, 16) if perf_analyzer.MODELS[model]["max_batch_size"] > 0 else (16,)
            self._bodies[model] = bodies(self.tmp, model, shape)
        return self._bodies[model]

    def __call__(self, server, model: str, protocol: str, conc: int) -> dict:
        script, body = self._body(model)
        answer = None
        if protocol == "grpc":
            key = (server.grpc_port, model)
            if key not in self._answer_bytes:
                self._answer_bytes[key] = loadgen.h2load_answer_bytes(server.grpc_port, body)
            answer = self._answer_bytes[key]
        result = loadgen.drive(server, protocol, model, conc, self.seconds, 1, script, body,
                               answer, self.tmp / "h2load.log", max(1, min(self.threads, conc)))
        if result.get("errors"):
            raise RuntimeError(f"{result['errors']} of the load generator's requests failed")
        return {k: result.get(k) for k in ("infer_per_s", "p50_ms", "p99_ms")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--units", type=int, nargs="+", default=[0, 1, 2, 4, 8])
    p.add_argument("--models", nargs="+", default=["add_sub_onnx", "add_sub", "add_sub_dyn"],
                   choices=list(perf_analyzer.MODELS))
    p.add_argument("--protocols", nargs="+", default=["grpc", "http"], choices=["grpc", "http"])
    p.add_argument("--concurrency", type=int, nargs="+", default=[64])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--window-ms", type=int, default=1000)
    p.add_argument("--trials", type=int, default=3, help="perf_analyzer windows per cell")
    p.add_argument("--sync", action="store_true", help="perf_analyzer's sync API (default async)")
    p.add_argument("--no-triton", action="store_true", help="pyserver's unit counts only")
    p.add_argument("--pin", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--clients", nargs="+", default=["perf_analyzer"],
                   choices=["perf_analyzer", "loadgen"],
                   help="what drives each cell: Triton's perf_analyzer, and/or h2load and wrk")
    p.add_argument("--client-threads", type=int, default=0,
                   help="h2load's and wrk's threads (0: 1 on up to 4 cores, else 4)")
    args = p.parse_args()
    units = sorted(set([0, *args.units]))
    cores = os.cpu_count() or 1
    pin = args.pin == "yes" or (args.pin == "auto" and cores >= 2 * (max(units) + 1))
    names = [unit_system(n) for n in units]
    flags = {unit_system(n): [f"--http-thread-count={n}", f"--grpc-infer-thread-count={n}"]
             for n in units}
    prefixes = {unit_system(n): ["taskset", "-c", f"0-{n}" if n else "0"] for n in units} \
        if pin else {}
    with_triton = not args.no_triton and any(
        not perf_analyzer.MODELS[m].get("onnx") for m in args.models)
    tool = perf_analyzer_client.binary()
    if with_triton:
        failed = systems.ensure_venvs(["triton"], lambda m: print(m, file=sys.stderr))
        if failed:
            sys.exit(f"Triton unavailable: {failed['triton'][-500:]}")
        names.append("triton")
    threads = args.client_threads or (1 if cores <= 4 else 4)
    with tempfile.TemporaryDirectory(prefix="pyserver-scaling-") as tmp:
        clients = {"perf_analyzer": None} if args.clients == ["perf_analyzer"] else {
            name: None if name == "perf_analyzer" else
            LoadgenClient(Path(tmp), args.window_ms * args.trials / 1000, threads)
            for name in args.clients}
        rows, info = perf_analyzer.run_cells(args, names, tool, {}, flags, prefixes, clients)
    base = unit_system(0)
    pyservers = [unit_system(n) for n in units]
    results = {}
    for name in clients:
        good = [r for r in rows if "error" not in r and r.get("client", name) == name]
        med = perf_analyzer.medians(good)
        against_one = [r for s in pyservers[1:] for r in perf_analyzer.ratios(good, s, base)]
        print(f"\n{name}, against {base} (the event loop alone):", file=sys.stderr)
        print(perf_analyzer.table(med, against_one, pyservers[1:] + [base]), file=sys.stderr)
        against_triton = []
        if with_triton:
            # the ONNX model's cells have no Triton row, so no ratio
            against_triton = [r for s in pyservers
                              for r in perf_analyzer.ratios(good, s, "triton")]
            print(f"\n{name}, against Triton:", file=sys.stderr)
            print(perf_analyzer.table(med, against_triton, pyservers + ["triton"]),
                  file=sys.stderr)
        results[name] = {"medians": [{"system": k[0], "model": k[1], "protocol": k[2],
                                      "concurrency": k[3], **v} for k, v in med.items()],
                         "ratios_against_one_loop": against_one,
                         "ratios_against_triton": against_triton}
    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "cores": cores, "pinned": pin, "client_threads": threads,
                      "systems": info, "rows": rows, "clients": results}, indent=1))


if __name__ == "__main__":
    main()
