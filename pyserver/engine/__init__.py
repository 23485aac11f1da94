"""The compiled engine: Cython modules over csrc (libpyserver_core.so).

batcher     Scheduler (dynamic batcher / pass-through) and Batch
completion  CompletionQueue (engine threads -> event loop)
stats       ModelStats (Triton statistics counters)
memory      gather (batch assembly, GIL released)
clock       now_ns (the engine's monotonic clock)
"""

from pyserver.engine.batcher import Batch, Scheduler
from pyserver.engine.clock import now_ns
from pyserver.engine.completion import CompletionQueue
from pyserver.engine.memory import gather
from pyserver.engine.stats import FAILURE_REASONS, ModelStats

__all__ = ["Batch", "CompletionQueue", "FAILURE_REASONS", "ModelStats", "Scheduler", "gather", "now_ns"]
