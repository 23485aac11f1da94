"""pyserver against real Triton on Triton's Python add_sub model, driven by
Triton's own perf_analyzer, the systems alternated cell by cell, with the
servers' CPU per inference.

  python bench/perf_analyzer.py [--quick] [--rounds 3] [--concurrency 1 16 128]
                                [--window-ms 1500] [--models add_sub add_sub_dyn]
                                [--protocols grpc http] [--systems pyserver triton]
                                [--sync] [--env SYSTEM:KEY=VALUE ...]
                                [--request-rate R ...]
                                [--server-cpus 0 --client-cpus 1]

Models (both systems load the same files): ``add_sub`` (FP32[16], no
batching: Triton's example) and ``add_sub_dyn`` (max_batch_size 64,
``dynamic_batching { max_queue_delay_microseconds: 100 }``, as
bench/workloads.py's add_sub_dyn), tests/models/python/add_sub/1/model.py;
``add_sub_onnx`` (the same sums in ONNX, no batching; ``add_sub_onnx_dyn`` with
dynamic batching) and ``mlp_onnx`` (an
ONNX MLP slow enough to run on its instance thread) for pyserver systems
only; ``identity_c``: a backend built for Triton's C API
(tests/backends_c/identity.c, compiled with ``cc`` into the model's version
folder, where both servers look first), FP32[16] echoed, max_batch_size 8
with the same dynamic batching: Triton's core against pyserver's C API.
Both servers run at once; one is under load at a time, the first of each
cell rotating, so a drift of the machine's background load hits both alike.

Each cell is one perf_analyzer run (``--max-trials`` windows of
``--window-ms``, async API unless --sync), and around it: the server's
statistics (inference and execution counts: the batch size it formed is
their ratio), the CPU time of every thread of its process tree (from
/proc): ``cpu_us_per_infer`` is the tree's CPU over the inferences it
counted in that time, ``busiest_us_per_infer`` its busiest thread's.
perf_analyzer's infer/s and client latency p50/p99 are its own.
--request-rate R ... measures at fixed request rates instead of
concurrency levels (perf_analyzer's --request-rate-range: a constant
schedule, whatever is in flight), so that the systems do the same work
per second: a faster server at a fixed concurrency answers sooner and
forms smaller batches, while at a fixed rate batch sizes and CPU per
inference compare like for like.

Prints one line per cell on stderr, then the medians per system and the
pyserver/Triton ratios (throughput, p50, CPU per inference, busiest thread,
batch size: the median of the rounds' ratios, each round's pair run back to
back), and, for add_sub_dyn at c1, p50 beyond the batching delay against
add_sub's p50; the JSON document last on stdout. --quick: one round of
1 s windows at c1 and c16 (about 2 minutes). An A/B of a switch in one
run: --systems pyserver pyserver-old triton --env pyserver-old:KEY=VALUE
(every pyserver-NAME is this checkout with its own environment), or
--flag pyserver-io1:--http-thread-count=1 (its own command-line flags); of
two commits: --checkout pyserver-old:PATH (another source tree).
--server-cpus 0 --client-cpus 1 keeps each server (every thread and
worker process) on the first CPU and perf_analyzer on the second: at c1 a
request's latency depends on which CPU the scheduler wakes each thread on
(a wake-up on an idle CPU of a VM costs more, and a worker woken beside
the event loop finds its data in cache), which pinning takes out of the
comparison. Not a test: timings vary with the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_PY = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
sys.path.insert(0, str(ROOT))

from bench import perf_analyzer_client, systems  # noqa: E402
from pyserver.testing import ADD_SUB_CONFIG, mlp_weights, write_add_sub, write_mlp  # noqa: E402

DELAY_US = 100
MODELS = {
    "add_sub": {"max_batch_size": 0, "extra": ""},
    "add_sub_dyn": {"max_batch_size": 64,
                    "extra": f"dynamic_batching {{ max_queue_delay_microseconds: {DELAY_US} }}"},
    # the same sums as an ONNX model (pyserver's onnxruntime backend; the
    # pytriton build of Triton has no onnxruntime backend: pyserver systems only)
    "add_sub_onnx": {"max_batch_size": 0, "extra": "", "onnx": True},
    # the same with dynamic batching: its requests queue (pyserver systems only)
    "add_sub_onnx_dyn": {"max_batch_size": 64, "onnx": True,
                         "extra": f"dynamic_batching {{ max_queue_delay_microseconds: {DELAY_US} }}"},
    # an ONNX MLP (FP32 1024 -> 4096 -> 16, ~0.7 ms a run here) that runs on
    # its instance thread, not inline on the loop (pyserver systems only)
    "mlp_onnx": {"max_batch_size": 8, "extra": "", "onnx": True, "mlp": (1024, 4096, 16)},
    # tests/backends_c/identity.c as both servers load a Triton backend library
    "identity_c": {"max_batch_size": 8, "c_backend": "identity",
                   "extra": f"dynamic_batching {{ max_queue_delay_microseconds: {DELAY_US} }}"},
}
IDENTITY_C_CONFIG = """name: "{name}"
backend: "{backend}"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
"""
METRICS = ("infer_per_s", "p50_ms", "p99_ms", "cpu_us_per_infer", "busiest_us_per_infer",
           "batch_size")


def build_c_backend(source: str, out: Path) -> None:
    """tests/backends_c/SOURCE.c as a backend library at ``out``: built
    against pyserver's header of Triton's C API, its TRITONBACKEND_* and
    TRITONSERVER_* calls left to whichever libtritonserver.so loads it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("identity_c needs a C compiler (cc)")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-shared", "-fPIC",
                    "-pthread", f"-I{ROOT / 'csrc' / 'include' / 'pyserver' / 'triton'}",
                    str(ROOT / "tests" / "backends_c" / f"{source}.c"), "-o", str(out)],
                   check=True)


def write_repo(repo: Path, models: list[str]) -> None:
    for name in models:
        backend = MODELS[name].get("c_backend")
        if backend:
            build_c_backend(backend, repo / name / "1" / f"libtriton_{backend}.so")
            (repo / name / "config.pbtxt").write_text(IDENTITY_C_CONFIG.format(
                name=name, backend=backend, max_batch_size=MODELS[name]["max_batch_size"],
                extra=MODELS[name]["extra"]))
            continue
        if MODELS[name].get("mlp"):
            write_mlp(repo, name, max_batch_size=MODELS[name]["max_batch_size"],
                      weights=mlp_weights(*MODELS[name]["mlp"]))
            continue
        if MODELS[name].get("onnx"):
            write_add_sub(repo, name, max_batch_size=MODELS[name]["max_batch_size"],
                          extra=MODELS[name]["extra"])
            continue
        model = repo / name
        (model / "1").mkdir(parents=True)
        shutil.copy(MODEL_PY, model / "1" / "model.py")
        (model / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
            name=name, backend='backend: "python"', size=16, instances=1,
            max_batch_size=MODELS[name]["max_batch_size"], extra=MODELS[name]["extra"]))


def start(system: str, repo: Path, log: Path, models: list[str], env: dict,
          flags: list | None = None, prefix: list | None = None,
          checkout: str | None = None) -> systems.Server:
    if system.startswith("pyserver"):
        return systems.start_pyserver(repo, log, models, extra_env=env, name=system,
                                      extra_args=flags, prefix=prefix, checkout=checkout)
    return systems.start_triton(repo, log, models, prefix)


def measure(server, tool, model: str, protocol: str, conc: int, args, rate: int = 0,
            client=None) -> dict:
    """One cell (``conc`` requests in flight, or ``rate`` requests a second
    when > 0): perf_analyzer's numbers and the server's CPU and batch sizes
    over the same time. ``client(server, model, protocol, conc)``, when
    given, drives the cell instead of perf_analyzer (infer_per_s, p50_ms,
    p99_ms; RuntimeError when requests failed)."""
    server.settle()
    url = f"127.0.0.1:{server.grpc_port if protocol == 'grpc' else server.http_port}"
    counts0, threads0 = server.model_counts(model), server.thread_cpu()
    t0 = time.monotonic()
    if client is not None:
        result = client(server, model, protocol, conc)
    else:
        result = perf_analyzer_client.run(tool, url, protocol, model, conc, args.window_ms,
                                          args.trials, use_async=not args.sync,
                                          request_rate=rate,
                                          prefix=cpus_prefix(getattr(args, "client_cpus", None)))
    wall = time.monotonic() - t0
    threads1, counts1 = server.thread_cpu(), server.model_counts(model)
    spent, busiest = systems.cpu_spent(threads0, threads1)
    inferences, executions = counts1[0] - counts0[0], counts1[1] - counts0[1]
    per = 1e6 / max(1, inferences)
    return {**result, "inferences": inferences, "executions": executions,
            "batch_size": round(inferences / max(1, executions), 2),
            "cpu_us_per_infer": round(spent * per, 1),
            "busiest_us_per_infer": round(busiest * per, 1),
            "server_cores": round(spent / wall, 2)}


def load_of(row: dict):
    """A cell's load: its concurrency, or "R/s" for a fixed request rate."""
    return f"{row['request_rate']}/s" if row.get("request_rate") else row["concurrency"]


def load_order(load) -> tuple:
    """Sorts loads by number: concurrency levels, then request rates."""
    return (1, int(load[:-2])) if isinstance(load, str) else (0, load)


def medians(rows: list[dict]) -> dict:
    """{(system, model, protocol, load): {metric: median}} (load_of)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["system"], r["model"], r["protocol"], load_of(r)), []).append(r)
    return {k: {m: round(statistics.median(r[m] for r in v if r.get(m) is not None), 3)
                for m in METRICS if any(r.get(m) is not None for r in v)}
            for k, v in groups.items()}


def ratios(rows: list[dict], system: str, base: str) -> list[dict]:
    """system/base per cell and metric: the median over the rounds of each
    round's ratio (the pair run back to back)."""
    found = {(r["system"], r["model"], r["protocol"], load_of(r), r["round"]): r
             for r in rows}
    out = {}
    for (sys_, model, protocol, load, rnd), row in found.items():
        other = found.get((base, model, protocol, load, rnd))
        if sys_ != system or other is None:
            continue
        cell = out.setdefault((model, protocol, load), {m: [] for m in METRICS})
        for m in METRICS:
            if row.get(m) is not None and other.get(m):
                cell[m].append(row[m] / other[m])
    return [{"system": system, "against": base, "model": model, "protocol": protocol,
             "load": load,
             **{m: round(statistics.median(v), 3) for m, v in cell.items() if v}}
            for (model, protocol, load), cell in sorted(
                out.items(), key=lambda kv: (kv[0][0], kv[0][1], load_order(kv[0][2])))]


def added_beyond_delay(med: dict, system: str, protocol: str) -> float | None:
    """add_sub_dyn's p50 at c1 beyond add_sub's p50 plus the delay, in µs."""
    dyn, plain = med.get((system, "add_sub_dyn", protocol, 1)), med.get((system, "add_sub", protocol, 1))
    if not dyn or not plain or dyn.get("p50_ms") is None or plain.get("p50_ms") is None:
        return None
    return round((dyn["p50_ms"] - plain["p50_ms"]) * 1000 - DELAY_US, 1)


def table(med: dict, ratio_rows: list[dict], system_names: list[str]) -> str:
    base = system_names[-1]
    lines = ["| model | protocol | load | " + " | ".join(
        f"{s} infer/s (p50/p99 ms) CPU µs/inf tree, busiest; batch" for s in system_names)
        + " | " + " | ".join(f"{s}/{base} infer/s, CPU, busiest" for s in system_names[:-1]) + " |",
        "|---|---|---|" + "---|" * (2 * len(system_names) - 1)]
    by_cell = {(r["system"], r["model"], r["protocol"], r["load"]): r for r in ratio_rows}
    for key in sorted({k[1:] for k in med}, key=lambda k: (k[0], k[1], load_order(k[2]))):
        cells = []
        for s in system_names:
            m = med.get((s, *key))
            cells.append("—" if m is None else
                         f"{m['infer_per_s']:,.0f} ({m.get('p50_ms')}/{m.get('p99_ms')}) "
                         f"{m['cpu_us_per_infer']:.0f}, {m['busiest_us_per_infer']:.0f}; "
                         f"{m['batch_size']:.2f}")
        for s in system_names[:-1]:
            r = by_cell.get((s, *key))
            cells.append("—" if r is None else
                         f"{r.get('infer_per_s', 0):.2f}×, {r.get('cpu_us_per_infer', 0):.2f}×, "
                         f"{r.get('busiest_us_per_infer', 0):.2f}×")
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cpus_prefix(cpus: str | None) -> list:
    """The words that run a command on ``cpus`` only (taskset's list), or
    none."""
    return ["taskset", "-c", cpus] if cpus else []


def cell_loads(args) -> list[tuple[int, int]]:
    """(concurrency, request rate) per cell: --request-rate's rates when
    given (concurrency 0), else --concurrency's levels (rate 0)."""
    if getattr(args, "request_rate", None):
        return [(0, rate) for rate in args.request_rate]
    return [(conc, 0) for conc in args.concurrency]


def run_cells(args, system_names: list[str], tool, envs: dict, flags: dict,
              prefixes: dict | None = None, clients: dict | None = None
              ) -> tuple[list[dict], dict]:
    """Starts every system (``envs``, ``flags``, ``prefixes`` and
    ``args.checkouts`` by name) on
    its own copy of the models (Triton without the ONNX ones: pytriton's has
    no ONNX Runtime backend), then measures each cell (model, protocol,
    concurrency) on each system serving it in turn, the first of each cell
    rotating, ``args.rounds`` times; one line per cell on stderr.
    ``clients`` ({name: client}, measure's): each cell is driven by each
    client in turn (its rows say which); perf_analyzer alone without it.
    Returns the rows and each system's start-up facts."""
    prefixes = prefixes or {}
    clients = clients or {"perf_analyzer": None}
    served = {system: [m for m in args.models
                       if system.startswith("pyserver") or not MODELS[m].get("onnx")]
              for system in system_names}
    tmp = Path(tempfile.mkdtemp(prefix="pyserver-bench-pa-"))
    servers, rows, info = {}, [], {}
    try:
        for system in system_names:
            repo = tmp / f"models-{system}"
            write_repo(repo, served[system])
            checkout = getattr(args, "checkouts", {}).get(system)
            server = start(system, repo, tmp / f"{system}.log", served[system],
                           envs.get(system, {}), flags.get(system), prefixes.get(system),
                           checkout)
            servers[system] = server
            info[system] = {"seconds_to_ready": round(server.wait_ready(180), 2),
                            "env": envs.get(system, {}), "flags": flags.get(system, []),
                            "prefix": prefixes.get(system, []), "checkout": checkout}
        order = list(system_names)
        for rnd in range(args.rounds):
            for model in args.models:
                for protocol in args.protocols:
                    for (conc, rate), (client_name, client) in itertools.product(
                            cell_loads(args), clients.items()):
                        for system in order:
                            if model not in served[system]:
                                continue
                            row = {"system": system, "model": model, "protocol": protocol,
                                   "concurrency": conc, "round": rnd}
                            if rate:
                                row["request_rate"] = rate
                            if len(clients) > 1:
                                row["client"] = client_name
                            try:
                                row.update(measure(servers[system], tool, model, protocol, conc,
                                                   args, rate, client))
                            except RuntimeError as err:
                                row["error"] = str(err)[-800:]
                            rows.append(row)
                            label = f"{rate}/s" if rate else f"c{conc}"
                            if len(clients) > 1:
                                label += f" {client_name}"
                            print(f"{system:>10} {model:<11} {protocol:<4} {label:<6} round {rnd + 1} "
                                  + ("ERROR " + row["error"][-300:] if "error" in row else
                                     f"{row['infer_per_s']:>8.0f}/s p50 {row['p50_ms']} p99 "
                                     f"{row['p99_ms']} ms  CPU {row['cpu_us_per_infer']} µs/inf "
                                     f"(busiest {row['busiest_us_per_infer']})  batch "
                                     f"{row['batch_size']}  cores {row['server_cores']}"),
                                  file=sys.stderr)
                        order = order[1:] + order[:1]  # the first of each cell rotates
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows, info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 round, 1 s windows, c1 and c16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--window-ms", type=int, default=1500)
    p.add_argument("--trials", type=int, default=3, help="perf_analyzer windows per cell")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 128])
    p.add_argument("--request-rate", type=int, nargs="+", default=[], metavar="R",
                   help="fixed request rates (requests/s, a constant schedule) instead of "
                        "concurrency levels: every system gets the same load, so their batch "
                        "sizes and CPU per inference compare at equal work")
    p.add_argument("--models", nargs="+", default=["add_sub", "add_sub_dyn"], choices=list(MODELS))
    p.add_argument("--protocols", nargs="+", default=["grpc", "http"], choices=["grpc", "http"])
    p.add_argument("--systems", nargs="+", default=["pyserver", "triton"],
                   help="pyserver, triton, or pyserver-NAME (another pyserver, "
                        "with --pyserver-NAME-env)")
    p.add_argument("--sync", action="store_true", help="perf_analyzer's sync API (default async)")
    systems.add_variant_options(p)
    p.add_argument("--flag", nargs="*", default=[], metavar="SYSTEM:--FLAG=VALUE",
                   help="an extra command-line flag of one pyserver system "
                        "(e.g. pyserver-io1:--http-thread-count=1)")
    p.add_argument("--server-cpus", metavar="LIST",
                   help="run every server on these CPUs only (taskset -c LIST), e.g. 0")
    p.add_argument("--client-cpus", metavar="LIST",
                   help="run perf_analyzer on these CPUs only (taskset -c LIST), e.g. 1")
    args = p.parse_args()
    envs, args.checkouts = systems.variant_options(args)
    flags = {}
    for item in args.flag:
        system, flag = item.split(":", 1)
        flags.setdefault(system, []).append(flag)
    if "triton" in args.systems and any(MODELS[m].get("onnx") for m in args.models):
        p.error("the ONNX models are for pyserver systems only (pytriton's Triton has no "
                "onnxruntime backend)")
    if args.quick:
        args.rounds, args.window_ms, args.trials = 1, 1000, 3
        args.concurrency = [c for c in args.concurrency if c <= 16] or [1, 16]
    tool = perf_analyzer_client.binary()
    if "triton" in args.systems:
        failed = systems.ensure_venvs(["triton"], lambda m: print(m, file=sys.stderr))
        if failed:
            sys.exit(f"Triton unavailable: {failed['triton'][-500:]}")
    prefixes = {s: cpus_prefix(args.server_cpus) for s in args.systems} if args.server_cpus \
        else None
    rows, info = run_cells(args, args.systems, tool, envs, flags, prefixes)
    good = [r for r in rows if "error" not in r]
    med = medians(good)
    base = "triton" if "triton" in args.systems else args.systems[-1]
    names = [s for s in args.systems if s != base] + [base]
    ratio_rows = [r for s in names[:-1] for r in ratios(good, s, base)]
    delays = {s: {proto: added_beyond_delay(med, s, proto) for proto in args.protocols}
              for s in names}
    print(table(med, ratio_rows, names), file=sys.stderr)
    for s, by_proto in delays.items():
        print(f"{s}: add_sub_dyn c1 p50 beyond add_sub's + {DELAY_US} µs: {by_proto} µs "
              "(target < 20)", file=sys.stderr)
    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                      "systems": info, "rows": rows,
                      "medians": [{"system": k[0], "model": k[1], "protocol": k[2],
                                   "load": k[3], **v} for k, v in med.items()],
                      "ratios": ratio_rows, "p50_beyond_delay_us": delays}, indent=1))


if __name__ == "__main__":
    main()
