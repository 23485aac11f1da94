"""pyserver against real Triton and MLServer, one command, one machine:

  python -m bench                  # everything (what `make bench` runs)
  python -m bench --quick          # add_sub rows only, short windows (< 3 min)
  python -m bench --systems pyserver triton --workloads add_sub --protocols grpc
                  --concurrency 1 16 --duration 1 --warmup 0.5

Installs the peers into their own venvs under bench/.venvs/ (first run
only) and writes the models of bench/workloads.py for each system. Starts the
systems on 127.0.0.1 and free ports, waits for every model to be ready and
checks each model's answer over gRPC and HTTP. Then, cell by cell (workload x
protocol x concurrency), drives one system at a time while the others idle:
h2load (gRPC, prepared body) or wrk (HTTP JSON and binary), a warm-up, then a
fixed window. Interleaving the systems per cell keeps the ratios honest on a
machine whose background load drifts (`--sequential` runs one system after
another instead, each started and stopped on its own). Then tritonclient's aio
clients at low concurrency; then stops every server and its process group.
Errors are counted in every row. Writes bench/results/<UTC time>.json and .md
(tables, ratios, targets), PNG plots (throughput and p50/p99 vs concurrency,
drawn in the plot venv) and the servers' logs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import aio, loadgen, report, systems
from bench.workloads import (
    GRPC,
    HTTP_BINARY,
    HTTP_JSON,
    MLSERVER,
    PYSERVER,
    TRITON,
    all_workloads,
    mlp_onnx,
    supports,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
QUICK = dict(workloads=["add_sub", "add_sub_dyn"], protocols=[GRPC, HTTP_JSON],
             concurrency=[1, 16, 128], duration=1.0, warmup=0.5, aio_concurrency=[1])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- checks


def check_grpc(port: int, workload) -> str | None:
    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        inputs = []
        for t in workload.inputs:
            tensor = grpcclient.InferInput(t.name, list(t.value.shape), t.datatype)
            tensor.set_data_from_numpy(t.value)
            inputs.append(tensor)
        result = client.infer(workload.name, inputs,
                              outputs=[grpcclient.InferRequestedOutput(n) for n in workload.outputs])
        return workload.check({n: np.asarray(result.as_numpy(n)) for n in workload.outputs})
    except Exception as err:
        return f"gRPC: {err}"[:300]
    finally:
        client.close()


def check_http_json(port: int, workload) -> str | None:
    import numpy as np

    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{workload.name}/infer",
                                 data=workload.json_body(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return f"HTTP {err.code}: {err.read()[:200]!r}"
    except Exception as err:
        return f"HTTP: {err}"[:300]
    outputs = {o["name"]: np.asarray(o["data"], dtype=object if o["datatype"] == "BYTES" else None)
               for o in answer.get("outputs", [])}
    return workload.check(outputs)


def server_metadata(port: int) -> str:
    """name and version from GET /v2 (KServe v2 server metadata)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2", timeout=5) as resp:
            meta = json.loads(resp.read())
        return f"{meta.get('name', '?')} {meta.get('version', '?')}"
    except Exception as err:
        return f"unknown ({err})"[:100]


def git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent,
                          capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE.parent,
                           capture_output=True, text=True).stdout.strip()
    return proc.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


# ---------------------------------------------------------------- one system


def write_repo(system: str, folder: Path, workloads, onnx_blob) -> list[str]:
    folder.mkdir(parents=True)
    names = []
    for w in workloads:
        if system not in w.systems:
            continue
        names.append(w.name)
        if system == MLSERVER:
            w.write_mlserver(folder, onnx_blob)
        else:
            w.write_triton(folder, system, onnx_blob)
    if system == MLSERVER:
        shutil.copy(HERE / "models" / "mlserver_models.py", folder / "mlserver_models.py")
    return names


def prepare_bodies(workloads, folder: Path) -> dict:
    bodies = {}
    for w in workloads:
        grpc = folder / f"{w.name}.grpc.bin"
        grpc.write_bytes(w.grpc_body())
        binary, header_len = w.binary_body()
        bodies[w.name] = {
            GRPC: grpc,
            HTTP_JSON: loadgen.wrk_script(folder / f"{w.name}.json.lua", w.json_body(),
                                          {"Content-Type": "application/json"}),
            HTTP_BINARY: loadgen.wrk_script(folder / f"{w.name}.binary.lua", binary, {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": header_len}),
        }
    return bodies


def bench_systems(names: list, args, workloads, bodies, work: Path, onnx_blob, results) -> None:
    """Start the systems, check their answers, then drive them cell by cell:
    for each workload x protocol x concurrency every system runs its row
    before the next cell starts (the first system of a cell rotates), so a
    change in the machine's background load hits every system alike and the
    ratios hold. Only one system is under load at a time; the others idle."""
    servers = {}
    try:
        for name in names:
            models = write_repo(name, work / f"repo-{name}", workloads, onnx_blob)
            if models:
                servers[name] = systems.STARTERS[name](work / f"repo-{name}", work / f"{name}.log", models)
        for name, server in list(servers.items()):
            info = results["systems"].setdefault(name, {})
            try:
                info["seconds_to_ready"] = round(server.wait_ready(), 2)
            except RuntimeError as err:
                info["error"] = str(err)
                log(f"{name}: did not start\n{err}")
                server.stop()
                del servers[name]
                continue
            info["server"] = server_metadata(server.http_port)
            log(f"{name}: {info['server']} ready in {info['seconds_to_ready']} s "
                f"(http {server.http_port}, grpc {server.grpc_port})")
            for w in workloads:
                if name in w.systems:
                    check_answers(server, w, info)
            info["load_average_before"] = round(os.getloadavg()[0], 2)
        cell = 0
        for w in workloads:
            for protocol in (p for p in w.protocols if p in args.protocols):
                runners = [n for n in servers if supports(n, w, protocol) and alive(servers[n], results)]
                answers = {n: answer_bytes(servers[n], bodies[w.name][GRPC]) if protocol == GRPC else None
                           for n in runners}
                for conc in (c for c in w.concurrency if c in args.concurrency):
                    order = runners[cell % len(runners):] + runners[:cell % len(runners)] if runners else []
                    cell += 1
                    for n in order:
                        if not alive(servers[n], results):
                            continue
                        row = measure(servers[n], w, protocol, conc, args, bodies, work, answers[n],
                                      [servers[o] for o in servers if o != n])
                        results["rows"].append(row)
                        log(f"{n:>8} {w.name:<13} {protocol:<11} c{conc:<3} "
                            f"{row.get('infer_per_s') or 0:>8.0f}/s  p50 {row.get('p50_ms')}  "
                            f"p99 {row.get('p99_ms')} ms  err {row.get('errors')}  "
                            f"cpu {row.get('server_cpu_us_per_req')} us/req "
                            f"(busiest thread {row.get('busiest_thread_us_per_req')})")
        if args.aio_concurrency:
            for n, server in servers.items():
                aio_rows(server, n, workloads, args, results)
    finally:
        for name, server in servers.items():
            info = results["systems"].setdefault(name, {})
            info["load_average_after"] = round(os.getloadavg()[0], 2)
            server.stop()
            leftover = server.pids()
            if leftover:
                log(f"{name}: processes left after stop: {leftover}")
                info["left_behind"] = leftover


def alive(server, results) -> bool:
    """False (and recorded, once) when the server process has exited."""
    code = server.proc.poll()
    info = results["systems"][server.name]
    if code is not None and "exited" not in info:
        info["exited"] = code
        log(f"{server.name} EXITED with {code} during the run:\n{server.log_tail(1500)}")
    return code is None


def answer_bytes(server, body: Path) -> int | None:
    try:
        return loadgen.h2load_answer_bytes(server.grpc_port, body)
    except Exception as err:
        log(f"{server.name}: could not size a good gRPC answer ({err}); gRPC errors uncounted")
        return None


def check_answers(server, w, info) -> None:
    checks = {GRPC: check_grpc(server.grpc_port, w), HTTP_JSON: check_http_json(server.http_port, w)}
    info.setdefault("checks", {})[w.name] = {k: v or "ok" for k, v in checks.items()}
    for k, v in checks.items():
        if v:
            log(f"{server.name} {w.name} {k} check FAILED: {v}")


def measure(server, w, protocol, conc, args, bodies, work, answer, idle=()) -> dict:
    """Warm-up, then the window; the server's CPU (its whole process group,
    and its busiest thread's) is read around the window only, and so is that
    of the idle ones."""
    row = {"system": server.name, "workload": w.name, "protocol": protocol, "concurrency": conc}

    def drive(seconds: float) -> dict:
        if protocol == GRPC:
            result = loadgen.h2load(server.grpc_port, bodies[w.name][GRPC], conc, seconds, 0,
                                    work / "h2load.log")
            result["errors"] = loadgen.grpc_errors(result, answer)
            return loadgen.only_successes(result, result["errors"])
        url = f"http://127.0.0.1:{server.http_port}/v2/models/{w.name}/infer"
        return loadgen.wrk(url, bodies[w.name][protocol], conc, seconds, 0)

    try:
        if args.warmup > 0:
            drive(args.warmup)
        idle0 = sum(other.cpu_seconds() for other in idle)
        cpu0, threads0 = server.cpu_seconds(), server.thread_cpu()
        result = drive(args.duration)
        cpu = server.cpu_seconds() - cpu0
        busiest = systems.cpu_spent(threads0, server.thread_cpu())[1]
        idle_cpu = sum(other.cpu_seconds() for other in idle) - idle0
    except Exception as err:  # a failed run is a result too
        row.update(infer_per_s=None, errors=None, error=str(err)[:500])
        return row
    row.update(result)
    row["idle_servers_cpu_ms"] = round(idle_cpu * 1000)
    row["settle_s"] = round(server.settle(), 2)
    if result.get("requests"):
        row["server_cpu_us_per_req"] = round(cpu * 1e6 / result["requests"], 1)
        row["busiest_thread_us_per_req"] = round(busiest * 1e6 / result["requests"], 1)
    return row


def aio_rows(server, system, workloads, args, results) -> None:
    w = next((w for w in workloads if w.name == "add_sub"), None)
    if w is None:
        return
    for protocol, port in (("grpc", server.grpc_port), ("http", server.http_port)):
        for conc in args.aio_concurrency:
            row = {"system": system, "workload": "add_sub", "protocol": f"aio-{protocol}",
                   "concurrency": conc}
            try:
                row.update(aio.run(protocol, port, w, conc, args.duration, min(args.warmup, 0.5)))
            except Exception as err:
                row.update(infer_per_s=None, errors=None, error=str(err)[:300])
            results["rows"].append(row)
            log(f"{system:>8} add_sub       aio-{protocol:<7} c{conc:<3} "
                f"{row.get('infer_per_s') or 0:>8.0f}/s  p50 {row.get('p50_ms')}  "
                f"p99 {row.get('p99_ms')} ms  err {row.get('errors')}")


# ---------------------------------------------------------------- outputs


def write_outputs(results: dict, stem: Path, plot: bool) -> Path:
    stem.parent.mkdir(parents=True, exist_ok=True)
    titles = results["titles"]
    results["ratios"] = report.ratios(results["rows"])
    results["targets"] = report.targets(results["rows"])
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(results, indent=2))
    md = [f"# pyserver vs Triton vs MLServer — {results['meta']['started']}\n",
          f"`{results['meta']['command']}` on {results['meta']['machine']}, pyserver "
          f"{results['meta']['pyserver_commit']}; "
          f"window {results['meta']['duration_s']} s after {results['meta']['warmup_s']} s warm-up, "
          f"{results['meta']['order']}. Cells: good infer/s (p50/p99 ms; `0 (?/?)`: none completed "
          "in the window); ratios are infer/s. Server CPU per request and raw counts are in the JSON.\n"]
    for name, info in results["systems"].items():
        if info.get("server"):
            md.append(f"- {name} (GET /v2: {info['server']}), ready in {info.get('seconds_to_ready')} s; "
                      f"1-min load average {info.get('load_average_before')} before, "
                      f"{info.get('load_average_after')} after its rows")
        if info.get("error"):
            md.append(f"- **{name} did not run**: {info['error'][:300]}")
        if "exited" in info:
            md.append(f"- **{name} exited during the run** (code {info['exited']}); later rows missing")
        bad = {w: c for w, c in info.get("checks", {}).items() if any(v != "ok" for v in c.values())}
        if bad:
            md.append(f"- {name}: answer checks failed: {bad}")
    md.append(report.markdown(results["rows"], titles))
    md.append("### Server CPU per request at c16 (whole process group; its busiest thread in parentheses)\n")
    md.append(report.cpu_markdown(results["rows"]))
    md.append("### Targets (reported, not asserted)\n")
    md.append(report.targets_markdown(results["targets"]))
    md_path = stem.with_suffix(".md")
    md_path.write_text("\n".join(md))
    if plot:
        py = systems.venv_python("plot")
        if py.exists():
            proc = subprocess.run([str(py), str(HERE / "plot.py"), str(json_path)],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                log("plots failed: " + proc.stderr[-1000:])
            else:
                results["plots"] = proc.stdout.split()
                json_path.write_text(json.dumps(results, indent=2))
        else:
            log("no plot venv: plots skipped")
    return md_path


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="add_sub rows only, 1 s windows")
    p.add_argument("--systems", nargs="+", default=[PYSERVER, TRITON, MLSERVER],
                   choices=[PYSERVER, TRITON, MLSERVER])
    p.add_argument("--workloads", nargs="+")
    p.add_argument("--protocols", nargs="+", choices=[GRPC, HTTP_JSON, HTTP_BINARY])
    p.add_argument("--concurrency", nargs="+", type=int)
    p.add_argument("--duration", type=float, help="measured window per row, s (default 2)")
    p.add_argument("--warmup", type=float, help="warm-up before each row, s (default 1)")
    p.add_argument("--aio-concurrency", nargs="*", type=int,
                   help="tritonclient aio rows (default 1 4; none to skip)")
    p.add_argument("--sequential", action="store_true",
                   help="one system after another (start, every row, stop) instead of all started "
                        "and driven cell by cell")
    p.add_argument("--no-install", action="store_true", help="use the venvs as they are")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--out", type=Path, help="result file stem (default bench/results/<time>)")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="only rewrite the .md and plots of an earlier result")
    args = p.parse_args(argv)
    defaults = dict(workloads=[w.name for w in all_workloads()], protocols=[GRPC, HTTP_JSON, HTTP_BINARY],
                    concurrency=[1, 4, 16, 64, 128], duration=2.0, warmup=1.0, aio_concurrency=[1, 4])
    if args.quick:
        defaults.update(QUICK)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        md_path = write_outputs(json.loads(args.render.read_text()), args.render.with_suffix(""),
                                not args.no_plots)
        print(md_path.read_text())
        return 0
    missing = [t for t in ("h2load", "wrk") if shutil.which(t) is None]
    if missing:
        sys.exit(f"missing load generators {missing}: apt-get install nghttp2-client wrk "
                 "(`make bench` does it)")
    started = datetime.datetime.now(datetime.timezone.utc)
    workloads = [w for w in all_workloads() if w.name in args.workloads]
    results = {"meta": {"started": started.strftime("%Y-%m-%d %H:%M UTC"),
                        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
                        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                                   f"{platform.platform(terse=True)}",
                        "pyserver_commit": git_commit(),
                        "order": ("one system after another" if args.sequential else
                                  "systems interleaved cell by cell"),
                        "duration_s": args.duration, "warmup_s": args.warmup},
               "titles": {w.name: w.title for w in workloads}, "systems": {}, "rows": []}
    need = [s for s in args.systems if s in (TRITON, MLSERVER)] + ([] if args.no_plots else ["plot"])
    if not args.no_install:
        t0 = time.monotonic()
        for name, err in systems.ensure_venvs(need, log).items():
            log(f"venv {name} failed: {err}")
            results["systems"][name] = {"error": f"install failed: {err}"}
        results["meta"]["install_s"] = round(time.monotonic() - t0, 1)
    work = Path(tempfile.mkdtemp(prefix="pyserver-bench-suite-"))
    try:
        onnx_blob = mlp_onnx() if any(w.onnx_on_pyserver for w in workloads) else None
        bodies = prepare_bodies(workloads, work)
        usable = [s for s in args.systems if not results["systems"].get(s, {}).get("error")]
        for group in ([[s] for s in usable] if args.sequential else [usable]):
            bench_systems(group, args, workloads, bodies, work, onnx_blob, results)
    finally:
        keep = work / "logs"
        for f in work.glob("*.log"):
            keep.mkdir(exist_ok=True)
            shutil.move(str(f), keep / f.name)
        stem = args.out or RESULTS / started.strftime("%Y-%m-%dT%H%M%SZ")
        if keep.exists():
            logs = stem.parent / (stem.name + "-logs")
            shutil.rmtree(logs, ignore_errors=True)
            stem.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(keep, logs)
        shutil.rmtree(work, ignore_errors=True)
    results["meta"]["total_s"] = round((datetime.datetime.now(datetime.timezone.utc) - started)
                                       .total_seconds(), 1)
    md_path = write_outputs(results, stem, not args.no_plots)
    print(md_path.read_text())
    log(f"wrote {md_path.with_suffix('.json')}, {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
