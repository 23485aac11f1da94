"""How pyserver's request handling scales with the threads it is given
(issue #28), driven by Triton's perf_analyzer, against the one-loop server
and against Triton in the same run.

  python bench/scaling.py [--units 0 1 2 4 8] [--models add_sub_onnx add_sub add_sub_dyn]
                          [--protocols grpc http] [--concurrency 64] [--rounds 2]
                          [--window-ms 1000] [--no-triton] [--pin auto|yes|no]

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

Prints each cell, then two tables (ratios against the 0-unit server, and
against Triton), and the JSON document last on stdout. Not a test: the
figures are the machine's. On 2 shared cores the client takes most of a
core, so only the CPU columns say much there; a machine with 8 or more
cores is where the infer/s ratio means what it says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import perf_analyzer, perf_analyzer_client, systems  # noqa: E402


def unit_system(n: int) -> str:
    return f"pyserver-u{n}"


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
    rows, info = perf_analyzer.run_cells(args, names, tool, {}, flags, prefixes)
    good = [r for r in rows if "error" not in r]
    med = perf_analyzer.medians(good)
    base = unit_system(0)
    pyservers = [unit_system(n) for n in units]
    against_one = [r for s in pyservers[1:] for r in perf_analyzer.ratios(good, s, base)]
    print(f"\nagainst {base} (the event loop alone):", file=sys.stderr)
    print(perf_analyzer.table(med, against_one, pyservers[1:] + [base]), file=sys.stderr)
    against_triton = []
    if with_triton:
        # the ONNX model's cells have no Triton row, so no ratio
        against_triton = [r for s in pyservers for r in perf_analyzer.ratios(good, s, "triton")]
        print("\nagainst Triton:", file=sys.stderr)
        print(perf_analyzer.table(med, against_triton, pyservers + ["triton"]), file=sys.stderr)
    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "cores": cores, "pinned": pin, "systems": info, "rows": rows,
                      "medians": [{"system": k[0], "model": k[1], "protocol": k[2],
                                   "concurrency": k[3], **v} for k, v in med.items()],
                      "ratios_against_one_loop": against_one,
                      "ratios_against_triton": against_triton}, indent=1))


if __name__ == "__main__":
    main()
