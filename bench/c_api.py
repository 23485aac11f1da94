"""pyserver and Triton each inside perf_analyzer's own process, through
Triton's in-process C API: perf_analyzer's --service-kind=triton_c_api loads
DIR/lib/libtritonserver.so (pyserver's, or the one in nvidia-pytriton's
wheel) and serves the repository there, so no network or frontend is
involved; what is measured is the server's core, its scheduler and its
Python backend. Both load the same Python add_sub model (Triton's wheel has
only its Python backend), with and without dynamic batching.

  python bench/c_api.py [--rounds 3] [--concurrency 1 4] [--window-ms 2000]
                        [--models add_sub add_sub_dyn]

The systems alternate cell by cell. Server and client share one process
here, so the CPU reported is the whole process tree's (perf_analyzer, the
server in it, and the model's worker processes) per inference, between
perf_analyzer's first and last measurement window (a sampled
approximation: its rate times the span), and the busiest thread's. Prints
one line per cell, a table of medians with pyserver/Triton ratios, and the
JSON document. Not a test: timings vary with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import perf_analyzer_client, systems  # noqa: E402
from pyserver.testing import ADD_SUB_CONFIG  # noqa: E402

MODEL_PY = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
SYSTEMS = ("pyserver", "triton")


def write_repo(repo: Path, models: list[str]) -> None:
    for name in models:
        extra = "dynamic_batching { max_queue_delay_microseconds: 100 }" \
            if name == "add_sub_dyn" else ""
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(MODEL_PY, repo / name / "1" / "model.py")
        (repo / name / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
            name=name, backend='backend: "python"', size=16,
            max_batch_size=8 if extra else 0, instances=1, extra=extra))


def pyserver_dir(root: Path) -> tuple[Path, dict]:
    """DIR with DIR/lib pyserver's engine folder (libtritonserver.so and the
    libraries beside it)."""
    from pyserver.engine import triton_c

    root.mkdir()
    (root / "lib").symlink_to(Path(triton_c.__file__).parent)
    return root, {}


def triton_dir(root: Path) -> tuple[Path, dict]:
    """DIR with DIR/lib the wheel's libraries (its libtritonserver-HASH.so
    as libtritonserver.so) and DIR/backends its Python backend, the
    stub for this Python as systems.start_triton sets it up."""
    home = systems.triton_home()
    libs = home.parent.parent / "nvidia_pytriton.libs"
    stub = home / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():
        shutil.copy(home / "python_backend_stubs" / "3.11" / "triton_python_backend_stub", stub)
        stub.chmod(0o755)
    (root / "lib").mkdir(parents=True)
    for library in libs.iterdir():
        (root / "lib" / library.name).symlink_to(library)
        if library.name.startswith("libtritonserver-"):
            (root / "lib" / "libtritonserver.so").symlink_to(library)
    (root / "backends").symlink_to(home / "backends")
    libdir = subprocess.run([str(systems.venv_python("triton")), "-c",
                             "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    # the wheel's library finds its own dependencies on the search path
    return root, {"LD_LIBRARY_PATH": f"{root / 'lib'}:{libdir}",
                  "PATH": f"{systems.VENVS / 'triton' / 'bin'}"}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def cell(tool, server: tuple[Path, dict], repo: Path, model: str, conc: int,
         window_ms: int) -> dict:
    """One perf_analyzer run; its numbers and the process tree's CPU between
    its first and last measurement window."""
    binary, env = tool
    env = dict(env)
    for key, value in server[1].items():
        env[key] = f"{value}:{env.get(key, '')}".rstrip(":")
    env.pop("PYTHONPATH", None)
    # line-buffered (a pipe is block-buffered): the window marks must come
    # as perf_analyzer prints them, not all at its exit
    cmd = ["stdbuf", "-oL", binary, "-m", model, "--service-kind", "triton_c_api",
           "--triton-server-directory", str(server[0]), "--model-repository", str(repo),
           "--concurrency-range", str(conc), "--measurement-interval", str(window_ms),
           "--max-trials", "6", "-s", "20"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    marks: list[tuple[float, dict]] = []
    lines = []

    def snapshot():
        marks.append((time.monotonic(), systems.thread_cpu(_tree(proc.pid))))

    for line in proc.stdout:
        lines.append(line)
        if line.startswith("Request concurrency:") or line.startswith("Inferences/Second vs."):
            snapshot()  # the windows start; the last one has ended
    proc.wait(timeout=300)
    text = "".join(lines)
    if marks and marks[-1][0] - marks[0][0] < window_ms / 1000:
        raise RuntimeError("perf_analyzer's output came all at once: no measurement span")
    found = re.search(r"Throughput: ([\d.]+) infer/sec", text)
    if proc.returncode != 0 or found is None or len(marks) != 2:
        raise RuntimeError(f"perf_analyzer failed ({proc.returncode}):\n{text[-2000:]}")
    rate = float(found.group(1))
    (t0, before), (t1, after) = marks
    inferences = rate * (t1 - t0)
    per_thread = {k: v - before.get(k, 0.0) for k, v in after.items()}
    p50 = re.search(r"p50 latency: (\d+) usec", text)
    p99 = re.search(r"p99 latency: (\d+) usec", text)
    return {"infer_per_s": rate, "p50_us": int(p50.group(1)), "p99_us": int(p99.group(1)),
            "cpu_us_per_infer": round(sum(per_thread.values()) * 1e6 / inferences, 1),
            "busiest_us_per_infer": round(max(per_thread.values()) * 1e6 / inferences, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    p.add_argument("--window-ms", type=int, default=2000)
    p.add_argument("--models", nargs="+", default=["add_sub", "add_sub_dyn"],
                   choices=["add_sub", "add_sub_dyn"])
    args = p.parse_args()
    tool = perf_analyzer_client.binary()
    systems.ensure_venvs(["triton"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="c-api-bench-") as tmp:
        tmp = Path(tmp)
        write_repo(tmp / "repo", args.models)
        servers = {"pyserver": pyserver_dir(tmp / "pyserver"), "triton": triton_dir(tmp / "triton")}
        for r in range(args.rounds):
            for model in args.models:
                for conc in args.concurrency:
                    order = SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]
                    for system in order:
                        row = {"system": system, "model": model, "concurrency": conc,
                               "round": r + 1,
                               **cell(tool, servers[system], tmp / "repo", model, conc,
                                      args.window_ms)}
                        rows.append(row)
                        print(f"{system:8} {model:11} c{conc:<3} round {r + 1}: "
                              f"{row['infer_per_s']:8.0f}/s p50 {row['p50_us']} p99 "
                              f"{row['p99_us']} µs  CPU {row['cpu_us_per_infer']} µs/inf "
                              f"(busiest {row['busiest_us_per_infer']})",
                              file=sys.stderr, flush=True)
    keys = ("infer_per_s", "p50_us", "p99_us", "cpu_us_per_infer", "busiest_us_per_infer")
    med = {}
    for row in rows:
        med.setdefault((row["system"], row["model"], row["concurrency"]), []).append(row)
    medians = {k: {key: statistics.median(r[key] for r in v) for key in keys}
               for k, v in med.items()}
    print("| model | c | pyserver infer/s (p50/p99 µs) CPU µs/inf, busiest | triton ... | "
          "infer/s, CPU ratio |\n|---|---|---|---|---|")
    for model in args.models:
        for conc in args.concurrency:
            a, b = medians[("pyserver", model, conc)], medians[("triton", model, conc)]
            cells = [f"{m['infer_per_s']:,.0f} ({m['p50_us']:.0f}/{m['p99_us']:.0f}) "
                     f"{m['cpu_us_per_infer']:.0f}, {m['busiest_us_per_infer']:.0f}"
                     for m in (a, b)]
            print(f"| {model} | {conc} | {cells[0]} | {cells[1]} | "
                  f"{a['infer_per_s'] / b['infer_per_s']:.2f}×, "
                  f"{a['cpu_us_per_infer'] / b['cpu_us_per_infer']:.2f}× |")
    print(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
