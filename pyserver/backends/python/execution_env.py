"""EXECUTION_ENV_PATH: a Python model's own environment, as in Triton.

A model that needs packages the server's Python lacks names an environment
in its config:

    parameters { key: "EXECUTION_ENV_PATH"
                 value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }

It is a conda-pack archive (.tar.gz, .tgz or .tar), unpacked once per server
into a temporary folder shared by the model's instances, or a folder holding
an environment already (conda or venv). The worker runs that environment's
``bin/python`` with its ``bin`` first on PATH and its ``lib`` first on
LD_LIBRARY_PATH. Its packages come first; pyserver's folder is appended to
its path for the worker's own modules. As with Triton's stub, the
environment's Python must be the server's version (the worker loads the
server's compiled engine); the load fails with the reason otherwise.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

from pyserver.kernel.errors import Code, ServerError

PARAMETER = "EXECUTION_ENV_PATH"
# The folder that holds the pyserver package (what a worker puts on its path).
_PACKAGE_ROOT = Path(__file__).resolve().parents[3]
_MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
_ARCHIVES = (".tar.gz", ".tgz", ".tar")
# Where a worker finds pyserver when it runs another Python (stub.py appends it).
HOME_VARIABLE = "PYSERVER_HOME"

_lock = threading.Lock()
_unpacked: dict[tuple, Path] = {}  # (archive, size, mtime) -> its folder


class ExecutionEnv:
    """The environment a model's workers run in: ``python`` and the
    variables to set."""

    def __init__(self, prefix: Path, python: Path):
        self.prefix = prefix
        self.python = str(python)

    def apply(self, env: dict) -> dict:
        """``env`` (a worker's environment) for this environment."""
        env = dict(env)
        env["PATH"] = os.pathsep.join(filter(None, [str(self.prefix / "bin"), env.get("PATH")]))
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(self.prefix / "lib"), env.get("LD_LIBRARY_PATH")]))
        env["CONDA_PREFIX"] = str(self.prefix)
        env[HOME_VARIABLE] = str(_PACKAGE_ROOT)
        for key in ("PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV"):  # the server's, not its
            env.pop(key, None)
        return env


def execution_env(config, model_dir: str) -> ExecutionEnv | None:
    """The environment ``config`` asks for (None: the server's Python).
    Raises ServerError (INVALID_ARG) with the reason it cannot be used."""
    if PARAMETER not in config.parameters:
        return None
    raw = config.parameters[PARAMETER].string_value
    name = config.name

    def bad(reason: str) -> ServerError:
        return ServerError(Code.INVALID_ARG,
                           f"python model '{name}': {PARAMETER} '{raw}' {reason}")

    if not raw.strip():
        raise bad("is empty")
    path = Path(raw.replace(_MODEL_DIRECTORY, str(model_dir)))
    if not path.is_absolute():
        path = Path(model_dir) / path
    if path.is_dir():
        prefix = path
    elif path.is_file() and path.name.endswith(_ARCHIVES):
        prefix = _unpack(path, bad)
    elif path.exists():
        raise bad("is neither a folder nor a .tar.gz, .tgz or .tar archive")
    else:
        raise bad(f"does not exist ({path})")
    python = next((prefix / "bin" / n for n in ("python3", "python")
                   if (prefix / "bin" / n).exists()), None)
    if python is None:
        raise bad(f"has no bin/python3 or bin/python ({prefix})")
    _check_version(python, bad)
    return ExecutionEnv(prefix, python)


def _unpack(archive: Path, bad) -> Path:
    """The folder ``archive`` is unpacked in (once per server process)."""
    stat = archive.stat()
    key = (str(archive.resolve()), stat.st_size, stat.st_mtime_ns)
    with _lock:
        folder = _unpacked.get(key)
        if folder is not None and folder.is_dir():
            return folder
        folder = Path(tempfile.mkdtemp(prefix="pyserver-env-"))
        try:
            with tarfile.open(archive) as tar:
                # "tar": no absolute paths, nothing outside the folder (the
                # filter argument exists from Python 3.11.4 and 3.12).
                if hasattr(tarfile, "tar_filter"):
                    tar.extractall(folder, filter="tar")
                else:
                    tar.extractall(folder)  # noqa: S202 - a model's own archive
        except (tarfile.TarError, OSError) as err:
            shutil.rmtree(folder, ignore_errors=True)
            raise bad(f"could not be unpacked: {err}") from None
        if len(_unpacked) == 0:
            atexit.register(_remove_unpacked)
        _unpacked[key] = folder
        return folder


def _check_version(python: Path, bad) -> None:
    want = sys.implementation.cache_tag
    try:
        found = subprocess.run([str(python), "-c",
                                "import sys; print(sys.implementation.cache_tag)"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        raise bad(f"has a Python that does not run: {err}") from None
    if found != want:
        raise bad(f"has Python '{found or 'unknown'}'; pyserver's workers need '{want}', the "
                  "Python the server runs (its engine is compiled for it)")


def _remove_unpacked() -> None:
    for folder in _unpacked.values():
        shutil.rmtree(folder, ignore_errors=True)
