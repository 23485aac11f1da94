"""Why the OpenVINO row of bench/backend_overhead.py stays below 0.9 on a
2-core machine: OpenVINO's own compute per batch is slower whenever batches
come the way any server hands them over, with no pyserver in the picture.

  python bench/backend_overhead.py --backend openvino   # the row itself
  python bench/openvino_pipeline.py [--rounds 5] [--seconds 3] [--front-end-us 40]
                                    [--cpu-pinning yes|no]

One process, the MLP of backend_overhead.py converted to OpenVINO IR, one
compiled model and infer request with the properties pyserver compiles
with. Each round runs two ways, alternated:

- back to back: one thread calls infer on ready batches, one after
  another (what backend_overhead.py's "direct" side measures);
- pipelined: a producer thread decodes one-row gRPC ModelInferRequest
  bodies with protobuf, as a server's front end does, spends
  --front-end-us of Python per row beside it (holding the GIL, as an event
  loop's protocol work does; backend_overhead.py measures pyserver's loop
  thread at about 40 us per request on this model), concatenates them
  into batches of 1-16 rows and hands each through a queue of one to the
  model's thread, which waits for it and calls infer (what a server's
  instance thread does, in plain Python).

For each it prints the mean wall time of infer per batch size and
OpenVINO's own latency of the same calls (InferRequest.latency, measured
inside OpenVINO, without the GIL or the Python wrapper), and the ratio
back-to-back / pipelined of OpenVINO's latency per row, every batch size
counted equally often (the producer cycles through them). A ratio well below 1 means the model's
compute itself slows when it runs between waits beside a busy front end,
whatever the server.
"""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from backend_overhead import MODEL, DirectOpenVINO, request_body, to_openvino  # noqa: E402

SIZES = (1, 2, 4, 8, 16)


def compile_mlp(folder: Path, features: int, hidden: int, pinning: str | None):
    """The MLP as backend_overhead.py's direct OpenVINO side compiles it:
    its infer request."""
    from pyserver.config import load_config_file, normalize
    from pyserver.testing import mlp_weights, write_mlp

    extra = "dynamic_batching { }"
    if pinning:
        extra += ('\nparameters { key: "ENABLE_CPU_PINNING" value { string_value: "%s" } }'
                  % pinning)
    write_mlp(folder, name=MODEL, max_batch_size=64, extra=extra,
              weights=mlp_weights(features, hidden, 16))
    model_dir = folder / MODEL
    to_openvino(model_dir)
    config = normalize(load_config_file(model_dir / "config.pbtxt"), MODEL)
    return DirectOpenVINO(model_dir / "1" / "model.xml", config, features).request


class Timings:
    """Per batch size: infer's wall time and OpenVINO's own latency."""

    def __init__(self, request):
        self.request = request
        self.wall, self.own, self.count = {}, {}, {}

    def infer(self, x) -> None:
        b = x.shape[0]
        start = time.perf_counter()
        self.request.infer({"INPUT0": x}, share_inputs=True, share_outputs=False)
        self.wall[b] = self.wall.get(b, 0.0) + time.perf_counter() - start
        self.own[b] = self.own.get(b, 0.0) + self.request.latency / 1e3
        self.count[b] = self.count.get(b, 0) + 1

    def means(self) -> tuple[dict, dict]:
        """(mean wall seconds, mean own seconds) per batch size."""
        return ({b: self.wall[b] / n for b, n in self.count.items()},
                {b: self.own[b] / n for b, n in self.count.items()})


def back_to_back(request, batches: dict, seconds: float) -> tuple[dict, dict]:
    timings = Timings(request)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for x in batches.values():
            timings.infer(x)
    return timings.means()


def pipelined(request, body: bytes, seconds: float, front_end_s: float) -> tuple[dict, dict]:
    import numpy as np

    from pyserver._proto import message_class

    message = message_class("inference.ModelInferRequest")
    handoff: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def front_end():
        i = 0
        while not stop.is_set():
            rows = []
            for _ in range(SIZES[i % len(SIZES)]):
                req = message()
                req.ParseFromString(body)
                rows.append(np.frombuffer(req.raw_input_contents[0], np.float32).reshape(1, -1))
                until = time.perf_counter() + front_end_s
                while time.perf_counter() < until:
                    pass
            i += 1
            batch = np.concatenate(rows)
            while not stop.is_set():
                try:
                    handoff.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    pass

    producer = threading.Thread(target=front_end, daemon=True)
    producer.start()
    timings = Timings(request)
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            timings.infer(handoff.get())
    finally:
        stop.set()
        producer.join()
    return timings.means()


def weighted(times: dict) -> float:
    """Seconds per row over SIZES, each size run equally often."""
    return sum(times[b] for b in SIZES) / sum(SIZES)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0, help="per way, per round")
    p.add_argument("--inputs", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--front-end-us", type=float, default=40.0,
                   help="Python work per row in the producer, beside the protobuf decode")
    p.add_argument("--cpu-pinning", choices=("yes", "no"))
    args = p.parse_args()
    import numpy as np

    tmp = Path(tempfile.mkdtemp(prefix="pyserver-ov-pipeline-"))
    try:
        request = compile_mlp(tmp, args.inputs, args.hidden, args.cpu_pinning)
        body = request_body(args.inputs)[5:]  # the message, without gRPC's frame header
        rng = np.random.default_rng(0)
        batches = {b: rng.standard_normal((b, args.inputs)).astype(np.float32) for b in SIZES}
        back_to_back(request, batches, 1.0)  # warm-up
        rounds = []
        for number in range(args.rounds):
            b2b_wall, b2b_own = back_to_back(request, batches, args.seconds)
            pipe_wall, pipe_own = pipelined(request, body, args.seconds, args.front_end_us / 1e6)
            row = {
                "back_to_back_us": {b: round(b2b_own[b] * 1e6, 1) for b in SIZES},
                "pipelined_us": {b: round(pipe_own[b] * 1e6, 1) for b in SIZES},
                "pipelined_wall_us": {b: round(pipe_wall[b] * 1e6, 1) for b in SIZES},
                "back_to_back_wall_us": {b: round(b2b_wall[b] * 1e6, 1) for b in SIZES},
                "compute_ratio": round(weighted(b2b_own) / weighted(pipe_own), 3),
                "wall_ratio": round(weighted(b2b_wall) / weighted(pipe_wall), 3),
            }
            rounds.append(row)
            print(f"round {number + 1}: OpenVINO's own latency back-to-back / pipelined "
                  f"{row['compute_ratio']:.3f} (infer wall {row['wall_ratio']:.3f})",
                  file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    median = sorted(rounds, key=lambda r: r["compute_ratio"])[len(rounds) // 2]
    print(json.dumps({"model": f"mlp [{args.inputs}]->[{args.hidden}]->[16] as OpenVINO IR",
                      "front_end_us_per_row": args.front_end_us,
                      "compute_ratio": median["compute_ratio"],
                      "wall_ratio": median["wall_ratio"], "median_round": median,
                      "rounds": [{k: r[k] for k in ("compute_ratio", "wall_ratio")}
                                 for r in rounds]}, indent=2))


if __name__ == "__main__":
    main()
