"""docker/entrypoint.sh, the image's ENTRYPOINT, run here with the console
script's folder on PATH as the image has it: bare flags go to tritonserver, a
command runs as given (KServe's `tritonserver ...` args, a shell), and either
way it is exec'd, so the server is the container's first process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
SCRIPTS = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def console_script():
    if not (SCRIPTS / "tritonserver").exists():
        pytest.skip("no tritonserver console script beside the interpreter (make install)")


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(ENTRYPOINT), *args], capture_output=True, text=True,
                          env=_env(), timeout=timeout)


def test_flags_go_to_tritonserver():
    out = run("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: tritonserver")


def test_no_arguments_is_tritonserver_without_a_repository():
    out = run()
    assert out.returncode != 0
    assert "usage: tritonserver" in out.stderr and "--model-repository" in out.stderr


def test_a_command_runs_as_given():
    # KServe's Triton runtime: args ["tritonserver", flags...], no command
    out = run("tritonserver", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: tritonserver")
    # a shell line, as ModelMesh's and Triton's charts start the server
    out = run("/bin/sh", "-c", 'echo "$0:$1"', "first", "second")
    assert out.returncode == 0 and out.stdout == "first:second\n"
    out = run("false")
    assert out.returncode == 1


def test_the_server_is_execd():
    """No shell stays between the container runtime and the server: the PID
    the entrypoint starts with is the server's."""
    probe = "import os; print(os.getpid())"
    proc = subprocess.Popen(["/bin/sh", str(ENTRYPOINT), sys.executable, "-c", probe],
                            stdout=subprocess.PIPE, text=True, env=_env())
    out, _ = proc.communicate(timeout=60)
    assert int(out.strip()) == proc.pid
