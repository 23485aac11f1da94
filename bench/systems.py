"""The systems under test: their virtual environments (bench/.venvs/, out of
git) and how each is started on 127.0.0.1 and stopped.

- pyserver: this checkout, `python -m pyserver` from the main .venv.
- triton: the tritonserver binary (2.51) bundled in the nvidia-pytriton wheel
  with its Python backend. Its stub embeds libpython3.11 and finds its prefix
  through `python3` on PATH, so the venv's bin/ goes first on PATH and the
  lib folder of the Python 3.11 the venv was made from first on
  LD_LIBRARY_PATH (research/running-peers.md).
- mlserver: MLServer 1.7.1; uvloop 0.22+ breaks its workers, so <0.22.
Each server runs in its own process group, so stopping it also ends the
processes it started (Triton's stubs, MLServer's workers, pyserver's
Python-model workers).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENVS = HERE / ".venvs"
MAIN_PY = ROOT / ".venv" / "bin" / "python"

# venv name -> what pip installs there (the marker file records it, so a
# changed pin reinstalls).
REQUIREMENTS = {
    "triton": ["nvidia-pytriton==0.7.0", "numpy<2", "onnxruntime"],
    "mlserver": ["mlserver==1.7.1", "uvloop<0.22", "numpy<2", "onnxruntime"],
    "plot": ["matplotlib"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_python() -> str:
    """A Python 3.11 to make the venvs from (Triton's stub embeds 3.11)."""
    for candidate in ("python3.11", "python3"):
        path = shutil.which(candidate)
        if path and subprocess.run([path, "-c", "import sys; assert sys.version_info[:2] == (3, 11)"],
                                   capture_output=True).returncode == 0:
            return path
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    raise RuntimeError("no Python 3.11 found: the pytriton stub needs one (python3.11 on PATH)")


def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def ensure_venvs(names: list[str], log=print) -> dict[str, str]:
    """Create and fill the venvs that are missing or stale, in parallel.
    Returns {name: error} for the ones that failed."""
    jobs = {}
    for name in names:
        marker = VENVS / name / ".bench-installed"
        want = " ".join(REQUIREMENTS[name])
        if marker.exists() and marker.read_text() == want:
            continue
        log(f"installing {want} into bench/.venvs/{name}")
        VENVS.mkdir(parents=True, exist_ok=True)
        logfile = open(VENVS / f"{name}.install.log", "w")
        cmd = (f"'{base_python()}' -m venv '{VENVS / name}' && "
               f"'{venv_python(name)}' -m pip install -q --disable-pip-version-check "
               + " ".join(f"'{r}'" for r in REQUIREMENTS[name]))
        jobs[name] = (subprocess.Popen(cmd, shell=True, stdout=logfile, stderr=subprocess.STDOUT),
                      logfile, marker, want)
    errors = {}
    for name, (proc, logfile, marker, want) in jobs.items():
        rc = proc.wait()
        logfile.close()
        if rc == 0:
            marker.write_text(want)
        else:
            tail = (VENVS / f"{name}.install.log").read_text()[-1500:]
            errors[name] = f"pip failed ({rc}): {tail}"
    return errors


# ---------------------------------------------------------------- servers


class Server:
    """One running system: its ports, its process group, its log."""

    def __init__(self, name: str, cmd: list, env: dict, cwd: Path, log: Path, models: list):
        self.name, self.log, self.models = name, log, models
        self.http_port, self.grpc_port = int(env["BENCH_HTTP_PORT"]), int(env["BENCH_GRPC_PORT"])
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, env={k: str(v) for k, v in env.items()}, cwd=cwd,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.monotonic()

    def wait_ready(self, timeout: float = 240) -> float:
        deadline = self.started + timeout
        pending = ["/v2/health/ready"] + [f"/v2/models/{m}/ready" for m in self.models]
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s "
                                   f"(waiting for {pending[0]}):\n{self.log_tail()}")
            if http_status(self.http_port, pending[0]) == 200:
                pending.pop(0)
            else:
                time.sleep(0.1)
        return time.monotonic() - self.started

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def pids(self) -> list[int]:
        """Every live process of this server's group (for CPU accounting)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[3]) == self.proc.pid:  # field 5: pgrp
                    found.append(int(entry))
        return found

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def thread_cpu(self) -> dict[tuple, float]:
        """CPU seconds of every thread of the server's process group."""
        return thread_cpu(self.pids())

    def model_counts(self, model: str) -> tuple[int, int]:
        """(inference_count, execution_count) of ``model`` from the
        statistics extension (all its versions)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/v2/models/{model}/stats",
                                    timeout=10) as resp:
            doc = json.load(resp)
        stats = doc.get("model_stats", [])
        return (sum(int(s.get("inference_count", 0)) for s in stats),
                sum(int(s.get("execution_count", 0)) for s in stats))

    def settle(self, timeout: float = 15, tick: float = 0.1) -> float:
        """Wait until the server is idle (under 10% of a core over a tick):
        a server still working off a backlog after its load generator left
        would otherwise steal the next row's CPU. Returns seconds waited."""
        start = time.monotonic()
        before = self.cpu_seconds()
        while time.monotonic() - start < timeout:
            time.sleep(tick)
            now = self.cpu_seconds()
            if now - before < 0.1 * tick:
                break
            before = now
        return time.monotonic() - start

    def stop(self, grace: float = 20) -> None:
        """SIGTERM the server, then SIGKILL whatever of its group is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 10  # SIGKILLed members take a moment to go
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.1)


def cpu_spent(before: dict, after: dict) -> tuple[float, float]:
    """CPU seconds between two ``thread_cpu`` snapshots: (every thread's
    together, the busiest thread's). A thread that ended in between is left
    out (its time is gone from /proc with it)."""
    spent = [after[k] - before.get(k, 0.0) for k in after]
    return sum(spent), max(spent, default=0.0)


def thread_cpu(pids) -> dict[tuple, float]:
    """CPU seconds (user + system) of every thread of ``pids``:
    {(pid, tid): seconds}; threads that end meanwhile are left out."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[(pid, tid)] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def http_status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def add_variant_options(parser) -> None:
    """--env and --checkout: what makes a system pyserver-NAME differ from
    pyserver (an A/B of a setting, or of two commits, in one run)."""
    parser.add_argument("--env", nargs="*", default=[], metavar="SYSTEM:KEY=VALUE",
                        help="extra environment of one pyserver system (e.g. pyserver-old:KEY=1)")
    parser.add_argument("--checkout", nargs="*", default=[], metavar="SYSTEM:PATH",
                        help="run one pyserver system from another source tree, its extensions "
                             "built in place (an A/B of two commits: see start_pyserver)")


def variant_options(args) -> tuple[dict, dict]:
    """add_variant_options' values: ({system: {KEY: VALUE}}, {system: PATH})."""
    envs = {}
    for item in args.env:
        system, pair = item.split(":", 1)
        key, value = pair.split("=", 1)
        envs.setdefault(system, {})[key] = value
    return envs, dict(item.split(":", 1) for item in args.checkout)


def _ports_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(extra or {})
    env["BENCH_HTTP_PORT"], env["BENCH_GRPC_PORT"] = free_port(), free_port()
    return env


def start_pyserver(repo: Path, log: Path, models: list, extra_env: dict | None = None,
                   name: str = "pyserver", extra_args: list | None = None,
                   prefix: list | None = None, checkout: Path | None = None) -> Server:
    """``prefix``: words before the command (``taskset -c 0-2`` to pin it).
    ``checkout``: another source tree of pyserver to run instead of this one
    (an older commit's ``git worktree``, its extensions built in place:
    ``python setup.py build_ext --inplace`` and the engine's lib*.so copied
    beside them); ``python -m`` imports the package from its working folder."""
    env = _ports_env(extra_env)
    cmd = [*(prefix or []), str(MAIN_PY), "-m", "pyserver", "--model-repository", str(repo),
           "--http-address", "127.0.0.1", "--http-port", str(env["BENCH_HTTP_PORT"]),
           "--grpc-address", "127.0.0.1", "--grpc-port", str(env["BENCH_GRPC_PORT"]),
           "--allow-metrics", "false", *(extra_args or [])]
    return Server(name, cmd, env, Path(checkout) if checkout else ROOT, log, models)


def triton_home() -> Path:
    out = subprocess.run([str(venv_python("triton")), "-c",
                          "import pytriton, os; print(os.path.dirname(pytriton.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out) / "tritonserver"


def start_triton(repo: Path, log: Path, models: list, prefix: list | None = None) -> Server:
    """``prefix``: as start_pyserver's."""
    home = triton_home()
    stub = home / "backends" / "python" / "triton_python_backend_stub"
    if not stub.exists():
        shutil.copy(home / "python_backend_stubs" / "3.11" / "triton_python_backend_stub", stub)
        stub.chmod(0o755)
    libdir = subprocess.run([str(venv_python("triton")), "-c",
                             "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    env = _ports_env()
    env["PATH"] = f"{VENVS / 'triton' / 'bin'}:{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    env.pop("PYTHONPATH", None)
    cmd = [*(prefix or []), str(home / "bin" / "tritonserver"), f"--model-repository={repo}",
           f"--backend-directory={home / 'backends'}",
           "--http-address=127.0.0.1", f"--http-port={env['BENCH_HTTP_PORT']}",
           "--grpc-address=127.0.0.1", f"--grpc-port={env['BENCH_GRPC_PORT']}",
           "--allow-metrics=false", "--log-verbose=0"]
    return Server("triton", cmd, env, repo, log, models)


def start_mlserver(repo: Path, log: Path, models: list) -> Server:
    env = _ports_env({"PYTHONPATH": str(repo)})
    (repo / "settings.json").write_text(json.dumps({
        "host": "127.0.0.1", "http_port": env["BENCH_HTTP_PORT"],
        "grpc_port": env["BENCH_GRPC_PORT"], "metrics_port": free_port(),
        "debug": False, "grpc_max_message_length": 64 << 20,
    }, indent=2))
    cmd = [str(VENVS / "mlserver" / "bin" / "mlserver"), "start", str(repo)]
    return Server("mlserver", cmd, env, repo, log, models)


STARTERS = {"pyserver": start_pyserver, "triton": start_triton, "mlserver": start_mlserver}


if __name__ == "__main__":
    # `python3 -m bench.systems`: fill the venvs only (stdlib only here, so
    # `make bench` runs it with the system Python while pyserver builds).
    failed = ensure_venvs(list(REQUIREMENTS))
    for venv, err in failed.items():
        print(f"bench/.venvs/{venv}: {err}", file=sys.stderr)
    sys.exit(1 if failed else 0)
