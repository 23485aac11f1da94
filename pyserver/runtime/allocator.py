"""Which malloc the server process runs on: jemalloc where the machine has
it, else the C library's.

The server allocates and frees per request in C and C++ (the HTTP/2 and
protocol buffers, ONNX Runtime's tensors, numpy's arrays); glibc's malloc
spends 7-8 % of the event loop's time there (ONNX add_sub under
perf_analyzer, gRPC c64). With jemalloc preloaded the same load ran 5-10 %
more inferences per second over gRPC (bench/README.md, "Memory
allocator"). A preload only works from the process's start, so the server
command re-executes itself once with LD_PRELOAD set, before it imports
anything heavy (pyserver/__main__.py); the process keeps its PID, and the
Python model workers it starts inherit the setting.

PYSERVER_MALLOC: ``auto`` (the default: jemalloc if found, unless
LD_PRELOAD already names something, such as a sanitizer's runtime),
``jemalloc`` (required: a clear error without it) or ``system``.
"""

from __future__ import annotations

import os
import sys

ENV = "PYSERVER_MALLOC"
CHOICES = ("auto", "jemalloc", "system")
JEMALLOC = "libjemalloc.so.2"  # Debian/Ubuntu: libjemalloc2; Fedora: jemalloc


def jemalloc_candidates() -> list[str]:
    """Where distributions install jemalloc's shared library."""
    triplet = f"{os.uname().machine}-linux-gnu"
    return [f"/usr/lib/{triplet}/{JEMALLOC}", f"/usr/lib64/{JEMALLOC}", f"/usr/lib/{JEMALLOC}",
            f"/usr/local/lib/{JEMALLOC}"]


def find_jemalloc(candidates: list[str] | None = None) -> str | None:
    for path in jemalloc_candidates() if candidates is None else candidates:
        if os.path.isfile(path):
            return path
    return None


def preload_environment(environ, jemalloc: str | None) -> dict | None:
    """The environment to re-execute with so that ``jemalloc`` (a path, or
    None when the machine has none) is preloaded, or None to go on as is.
    ValueError (its text for the user) for a bad PYSERVER_MALLOC, or for
    ``jemalloc`` where there is none."""
    raw = environ.get(ENV, "")
    choice = raw.strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV} must be one of {', '.join(CHOICES)}, got '{raw}'")
    if choice == "system":
        return None
    if jemalloc is None:
        if choice == "jemalloc":
            raise ValueError(f"{ENV}=jemalloc, but {JEMALLOC} is in none of "
                             f"{', '.join(jemalloc_candidates())} (Debian and Ubuntu: "
                             f"apt-get install libjemalloc2); {ENV}=system uses the C "
                             f"library's malloc")
        return None
    preload = environ.get("LD_PRELOAD", "").strip()
    if jemalloc in preload.replace(":", " ").split():
        return None  # preloaded already: this is the re-executed process
    if preload and choice == "auto":
        return None  # the user's own preload (a sanitizer's runtime, ...) is left alone
    env = dict(environ)
    # after the user's libraries: a malloc they preload stays the one in use
    env["LD_PRELOAD"] = f"{preload}:{jemalloc}" if preload else jemalloc
    # oneTBB (OpenVINO's) opens libtbbbind with RTLD_DEEPBIND, so its hwloc
    # frees with the C library's free what the C library allocated with the
    # preloaded malloc, and the process aborts ("free(): invalid pointer";
    # oneTBB issues 1636, 1645). This variable is oneTBB's switch for
    # dlopening it without RTLD_DEEPBIND.
    env.setdefault("TBB_ENABLE_SANITIZERS", "1")
    return env


def reexec_with_preferred() -> None:
    """Re-executes this process (same interpreter, same command line) with
    jemalloc preloaded when PYSERVER_MALLOC asks for it; returns when
    nothing is to change. ValueError as preload_environment."""
    env = preload_environment(os.environ, find_jemalloc())
    if env is None or not sys.executable:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def active() -> str:
    """"jemalloc" when this process has it mapped, else "system"."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            return "jemalloc" if any("libjemalloc" in line for line in maps) else "system"
    except OSError:
        return "system"
