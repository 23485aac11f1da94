"""What a gRPC ModelStatistics answer costs the event loop for a decoupled
model, whose statistics hold one response_stats entry per response index:
the document built from the counters (ModelStats.snapshot), then the
message written by engine/protocol/grpc_statistics against the protobuf
library's json_format.ParseDict (the way before), alternated, same document.

  python bench/statistics_encoding.py [--indices 1000 10000] [--rounds 5]

Prints, per count, the median ms of each step and the ratio ParseDict /
wire writer; checks that both give the same message.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf import json_format  # noqa: E402

from pyserver._proto import message_class  # noqa: E402
from pyserver.engine.protocol.grpc_statistics import encode_model_statistics  # noqa: E402
from pyserver.engine.stats import ModelStats  # noqa: E402

Response = message_class("inference.ModelStatisticsResponse")


def document(stats: ModelStats) -> dict:
    s = stats.snapshot()
    return {"model_stats": [{
        "name": "llm", "version": "1", "last_inference": s["last_inference"],
        "inference_count": s["inference_count"], "execution_count": s["execution_count"],
        "inference_stats": s["inference_stats"], "response_stats": s["response_stats"],
        "batch_stats": s["batch_stats"], "memory_usage": []}]}


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - start) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--indices", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    for n in args.indices:
        stats = ModelStats()
        for i in range(n):
            stats.record_response(i, "success", 1000 + i, 100)
        snap, parse, wire = [], [], []
        for _ in range(args.rounds):
            doc, ms = timed(lambda: document(stats))
            snap.append(ms)
            ours, ms = timed(lambda: encode_model_statistics(doc))
            wire.append(ms)
            theirs, ms = timed(lambda: json_format.ParseDict(
                doc, Response(), ignore_unknown_fields=True).SerializeToString())
            parse.append(ms)
            assert Response.FromString(ours) == Response.FromString(theirs)
        s, w, j = (statistics.median(x) for x in (snap, wire, parse))
        print(f"{n} response indices: document {s:.1f} ms; written {w:.2f} ms against "
              f"ParseDict {j:.1f} ms ({j / w:.0f}x); a call {s + j:.1f} -> {s + w:.1f} ms")


if __name__ == "__main__":
    main()
