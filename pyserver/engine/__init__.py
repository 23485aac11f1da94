"""The compiled engine: Cython modules over csrc (libpyserver_core.so).

batcher     Scheduler (dynamic batcher / pass-through) and Batch
completion  CompletionQueue (engine threads -> event loop)
stats       ModelStats (Triton statistics counters)
memory      gather (batch assembly, GIL released)
clock       now_ns (the engine's monotonic clock)

PYSERVER_ENGINE_DIR, when set, names a folder of engine modules searched
before this one: `make sanitize` points it at an AddressSanitizer build to run
the whole Python test suite over instrumented csrc and Cython.
"""

import os as _os

if _os.environ.get("PYSERVER_ENGINE_DIR"):
    __path__.insert(0, _os.environ["PYSERVER_ENGINE_DIR"])

from pyserver.engine.batcher import Batch, Scheduler
from pyserver.engine.clock import now_ns
from pyserver.engine.completion import CompletionQueue
from pyserver.engine.memory import gather, gather_batch
from pyserver.engine.stats import FAILURE_REASONS, ModelStats

__all__ = ["Batch", "CompletionQueue", "FAILURE_REASONS", "ModelStats", "Scheduler", "gather",
           "gather_batch", "now_ns"]
