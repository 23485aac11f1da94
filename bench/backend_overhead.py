"""What pyserver costs on top of the runtime it drives: the ONNX MLP
(FP32 [1024] -> [4096] -> [16] by default, two Gemm layers) served with dynamic batching over
gRPC at concurrency 16, against calling onnxruntime directly with the
same session options at the batch sizes pyserver formed. With
--backend openvino the same MLP, converted by OpenVINO's converter to
model.xml, is served by the openvino backend and compared with OpenVINO
called directly (one compiled model and infer request, the properties
pyserver compiles with).

  python bench/backend_overhead.py [--duration 3] [--rounds 7] [--concurrency 16]
                                   [--inputs 1024] [--hidden 4096]
                                   [--backend onnxruntime|openvino] [--cpu-pinning yes|no]

1. A pyserver process (Server + GrpcFrontend, as bench/grpc_protocol.py
   starts it) serves the MLP (max_batch_size 64, `dynamic_batching { }`,
   one instance). h2load (C) sends prepared one-row ModelInfer bodies,
   one stream per connection, for a fixed window after a warm-up.
2. The model's statistics (batch_stats) before and after the window give
   how many batches of each size pyserver executed.
3. With the server idle (the cores to itself), the same model runs in
   this process through onnxruntime.InferenceSession.run at each of those
   batch sizes (the batches replayed in their proportions, shuffled),
   once just before the window and once just after it, and each size's
   time is the mean of the two: this VM's speed drifts by tens of percent
   over tens of seconds, the same for both (a busy or an idle second core
   makes no difference to a run), and a measurement on each side cancels
   a drift across the window. Its throughput is the rows/s those batches
   would take: sum(count_b * b) / sum(count_b * time_b).
4. ratio = pyserver infer/s / direct infer/s (target >= 0.9). The server's
   own compute_infer time per batch gives the backend-only "execution
   ratio" beside it. Steps 2-3 repeat (--rounds) and the median round
   counts: a burst of other work on the machine moves one round, not the
   answer.

Prints JSON. Needs h2load (Debian package nghttp2-client).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from grpc_protocol import cpu_seconds, free_port, run_h2load, serve_main  # noqa: E402

MODEL = "mlp"


def request_body(features: int) -> bytes:
    """A gRPC-framed one-row ModelInferRequest for the MLP."""
    import numpy as np

    from pyserver._proto import message_class

    req = message_class("inference.ModelInferRequest")(model_name=MODEL)
    t = req.inputs.add(name="INPUT0", datatype="FP32")
    t.shape.extend([1, features])
    req.raw_input_contents.append(np.linspace(-1, 1, features, dtype=np.float32).tobytes())
    req.outputs.add(name="OUTPUT0")
    msg = req.SerializeToString()
    return struct.pack(">BI", 0, len(msg)) + msg


def batch_counts(port: int) -> tuple[dict, dict, int, int]:
    """({batch size: executions}, {batch size: compute_infer ns}, successes,
    failures) from the model's statistics."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        stats = client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    finally:
        client.close()
    counts, infer_ns = {}, {}
    for row in stats.get("batch_stats", []):
        size = int(row["batch_size"])
        counts[size] = int(row["compute_infer"].get("count", 0))
        infer_ns[size] = int(row["compute_infer"].get("ns", 0))
    inf = stats["inference_stats"]
    return (counts, infer_ns, int(inf.get("success", {}).get("count", 0)),
            int(inf.get("fail", {}).get("count", 0)))


class DirectRunner:
    """The model in this process through onnxruntime.InferenceSession.run,
    with the session options pyserver gives a single instance."""

    def __init__(self, model_path: Path, config, features: int):
        import numpy as np
        import onnxruntime as ort

        from pyserver.backends._common import compute_cores
        from pyserver.backends.onnxruntime import session_options

        options, self.run_options = session_options(config, compute_cores())
        self.session = ort.InferenceSession(str(model_path), options,
                                            providers=["CPUExecutionProvider"])
        self.features = features
        self.rng = np.random.default_rng(0)

    def seconds_per_batch(self, batches: dict, budget_s: float) -> dict:
        """Mean seconds of one run at each batch size, measured by replaying
        the server's batches in their proportions (a shuffled plan of about
        300 runs, repeated for ``budget_s``, at least twice): sizes
        interleave as they did in the server, and a burst of other work on
        the machine hits every size alike. (Means, as the server's
        compute_infer is a mean over every batch, lucky or not.)"""
        import numpy as np

        total = sum(batches.values())
        plan = [size for size, n in batches.items() for _ in range(max(1, round(300 * n / total)))]
        self.rng.shuffle(plan)
        inputs = {size: self.rng.standard_normal((size, self.features)).astype(np.float32)
                  for size in batches}
        run, options = self.session.run, self.run_options
        for size in plan:  # warm-up
            run(["OUTPUT0"], {"INPUT0": inputs[size]}, options)
        spent = dict.fromkeys(batches, 0.0)
        runs = dict.fromkeys(batches, 0)
        clock = time.perf_counter
        deadline = clock() + budget_s
        passes = 0
        while passes < 2 or clock() < deadline:
            for size in plan:
                start = clock()
                run(["OUTPUT0"], {"INPUT0": inputs[size]}, options)
                spent[size] += clock() - start
                runs[size] += 1
            passes += 1
        return {size: spent[size] / runs[size] for size in batches}


class DirectOpenVINO(DirectRunner):
    """The model in this process through OpenVINO: compiled with the
    properties pyserver's openvino backend gives a single instance, run on
    one infer request as an instance runs it."""

    def __init__(self, model_path: Path, config, features: int):
        import numpy as np
        import openvino as ov

        from pyserver.backends._common import compute_cores
        from pyserver.backends.openvino import device_properties

        core = ov.Core()
        model = core.read_model(str(model_path))
        model.reshape({port.get_any_name(): ov.PartialShape([-1, features])
                       for port in model.inputs})
        compiled = core.compile_model(model, "CPU", device_properties(config, compute_cores()))
        self.request = request = compiled.create_infer_request()
        self.run_options = None
        _names = [port.get_any_name() for port in model.outputs]

        class Session:
            @staticmethod
            def run(_names, feed, _options):
                # As pyserver's backend calls it (its cheapest way): tensors
                # set by name, a bare infer, the outputs copied out.
                for name, value in feed.items():
                    request.set_tensor(name, ov.Tensor(value, shared_memory=True))
                request.infer()
                return [request.get_tensor(name).data.copy() for name in _names]

        self.session = Session()
        self.features = features
        self.rng = np.random.default_rng(0)


def to_openvino(model_dir: Path) -> None:
    """The MLP's model.onnx as model.xml/model.bin by OpenVINO's converter,
    its config naming the openvino backend."""
    import openvino as ov

    onnx_file = model_dir / "1" / "model.onnx"
    ov.save_model(ov.convert_model(str(onnx_file)), str(model_dir / "1" / "model.xml"))
    onnx_file.unlink()
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text().replace('platform: "onnxruntime_onnx"',
                                                 'backend: "openvino"'))


def measure_round(server, port: int, body: Path, args, direct: DirectRunner, log: Path,
                  expected: dict) -> dict:
    """The same batches through onnxruntime directly (the server idle), then
    one window of load through pyserver, then the direct runs again.
    ``expected``: the batch sizes of the window before (this window's are
    not known yet), for the first direct measurement."""
    budget_s = max(1.0, args.duration / 2)
    before = direct.seconds_per_batch(expected, budget_s)
    counts0, ns0, ok0, fail0 = batch_counts(port)
    loop0, proc0 = cpu_seconds(server.pid, server.pid), cpu_seconds(server.pid)
    served = run_h2load(port, body, args.concurrency, args.duration, log)
    loop1, proc1 = cpu_seconds(server.pid, server.pid), cpu_seconds(server.pid)
    counts1, ns1, ok1, fail1 = batch_counts(port)
    batches = {b: counts1[b] - counts0.get(b, 0) for b in counts1 if counts1[b] > counts0.get(b, 0)}
    server_ns = {b: ns1[b] - ns0.get(b, 0) for b in batches}
    rows = sum(b * n for b, n in batches.items())
    if not batches or rows == 0:
        raise RuntimeError("pyserver executed no batches: " + json.dumps(served))
    after = direct.seconds_per_batch(batches, budget_s)
    # A size the window before did not form has its time from after only.
    seconds = {b: (after[b] + before[b]) / 2 if b in before else after[b] for b in batches}
    direct_busy = sum(n * seconds[b] for b, n in batches.items())
    direct_rate = rows / direct_busy
    drift = sum(n * after[b] for b, n in batches.items() if b in before) / max(
        1e-12, sum(n * before[b] for b, n in batches.items() if b in before))
    requests = max(1, ok1 - ok0)
    return {
        "pyserver_infer_per_s": round(served["infer_per_s"], 1),
        f"direct_{args.backend}_infer_per_s": round(direct_rate, 1),
        "ratio": round(served["infer_per_s"] / direct_rate, 3),
        # The backend's share alone: direct run time / the server's own
        # compute_infer time for the same batches (1.0: no cost added there).
        "execution_ratio": round(direct_busy * 1e9 / max(1, sum(server_ns.values())), 3),
        # The direct runs' time after the window over before it: how far
        # the machine's speed moved across the window (1.0: not at all).
        "direct_drift": round(drift, 3),
        "p50_ms": served.get("p50_ms"), "p99_ms": served.get("p99_ms"),
        "failed": served["h2_failed"] + max(0, fail1 - fail0 - served["cut_at_end"]),
        "failed_in_model": fail1 - fail0,  # with the requests cut at the window's end
        "requests": ok1 - ok0,
        # Where the server's CPU went, per request: its event-loop thread
        # (protocol, validation, batching hand-off) and the whole process.
        "server_loop_cpu_us_per_request": round((loop1 - loop0) * 1e6 / requests, 1),
        "server_process_cpu_us_per_request": round((proc1 - proc0) * 1e6 / requests, 1),
        "mean_batch": round(rows / sum(batches.values()), 2),
        "batches": {str(b): n for b, n in sorted(batches.items())},
        "direct_us_per_batch": {str(b): round(seconds[b] * 1e6, 1) for b in sorted(batches)},
        "server_compute_infer_us_per_batch": {
            str(b): round(server_ns[b] / batches[b] / 1e3, 1) for b in sorted(batches)},
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=3.0, help="seconds of load per round")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=7,
                   help="load windows, each followed at once by its direct measurement; the "
                        "median round counts")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--inputs", type=int, default=1024, help="MLP input features")
    p.add_argument("--hidden", type=int, default=4096, help="MLP hidden units")
    p.add_argument("--intra-op-threads", type=int, default=0,
                   help="the model's intra_op_thread_count parameter (0: pyserver's default, "
                        "the instance's share of the cores)")
    p.add_argument("--cpu-pinning", choices=("yes", "no"),
                   help="openvino: the model's ENABLE_CPU_PINNING parameter (server and direct; "
                        "OpenVINO's default, pinned, without it)")
    p.add_argument("--backend", choices=("onnxruntime", "openvino"), default="onnxruntime",
                   help="the backend serving the MLP, compared with its runtime called directly")
    p.add_argument("--grpc-infer-thread-count", type=int, default=0, metavar="N",
                   help="the server's gRPC socket pump threads (0: the event loop reads and "
                        "writes)")
    p.add_argument("--serve", nargs=2, metavar=("REPO", "PORT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve_main(args.serve[0], int(args.serve[1]), args.grpc_infer_thread_count)
    if shutil.which("h2load") is None:
        sys.exit("h2load is not installed (apt-get install nghttp2-client)")

    from pyserver.config import load_config_file, normalize
    from pyserver.testing import mlp_weights, write_mlp

    tmp = Path(tempfile.mkdtemp(prefix="pyserver-backend-bench-"))
    extra = "dynamic_batching { }"
    if args.backend == "openvino":
        if args.intra_op_threads:
            extra += ('\nparameters { key: "INFERENCE_NUM_THREADS" value { string_value: "%d" } }'
                      % args.intra_op_threads)
        if args.cpu_pinning:
            extra += ('\nparameters { key: "ENABLE_CPU_PINNING" value { string_value: "%s" } }'
                      % args.cpu_pinning)
    elif args.intra_op_threads:
        extra += ('\nparameters { key: "intra_op_thread_count" value { string_value: "%d" } }'
                  % args.intra_op_threads)
    weights = write_mlp(tmp / "models", name=MODEL, max_batch_size=64, extra=extra,
                        weights=mlp_weights(args.inputs, args.hidden, 16))
    features = weights["w1"].shape[0]
    body = tmp / "request.bin"
    body.write_bytes(request_body(features))
    model_dir = tmp / "models" / MODEL
    if args.backend == "openvino":
        to_openvino(model_dir)
        direct = DirectOpenVINO(model_dir / "1" / "model.xml",
                                normalize(load_config_file(model_dir / "config.pbtxt"), MODEL),
                                features)
    else:
        direct = DirectRunner(model_dir / "1" / "model.onnx",
                              normalize(load_config_file(model_dir / "config.pbtxt"), MODEL),
                              features)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(tmp / "models"), str(port),
         "--grpc-infer-thread-count", str(args.grpc_infer_thread_count)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    rounds = []
    try:
        line = server.stdout.readline()
        if line.strip() != "READY":
            server.kill()
            sys.exit("server did not start: " + server.stderr.read()[-3000:])
        counts0 = batch_counts(port)[0]
        run_h2load(port, body, args.concurrency, args.warmup, None)
        counts1 = batch_counts(port)[0]
        expected = {b: n - counts0.get(b, 0) for b, n in counts1.items() if n > counts0.get(b, 0)}
        for number in range(args.rounds):
            row = measure_round(server, port, body, args, direct, tmp / "h2load.log", expected)
            expected = {int(b): n for b, n in row["batches"].items()}
            rounds.append(row)
            print(f"round {number + 1}: pyserver {row['pyserver_infer_per_s']:.0f} infer/s (mean "
                  f"batch {row['mean_batch']:.1f}) vs {args.backend} direct "
                  f"{row[f'direct_{args.backend}_infer_per_s']:.0f} infer/s at the same batches: ratio "
                  f"{row['ratio']:.3f}, execution ratio {row['execution_ratio']:.3f}, "
                  f"direct drift {row['direct_drift']:.2f}, failed {row['failed']}", file=sys.stderr)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    median = sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]
    result = {
        "model": f"mlp onnx FP32 [{features}]->[{args.hidden}]->[16]"
                 + (" as OpenVINO IR" if args.backend == "openvino" else ""),
        "backend": args.backend,
        "protocol": f"grpc (h2load -c {args.concurrency} -m 1), dynamic_batching {{ }}",
        "cores": os.cpu_count(),
        "ratio": median["ratio"],
        "execution_ratio": median["execution_ratio"],
        "target": 0.9,
        "median_round": median,
        "rounds": [{k: r[k] for k in ("pyserver_infer_per_s", f"direct_{args.backend}_infer_per_s",
                                      "ratio", "execution_ratio", "direct_drift", "mean_batch",
                                      "failed")}
                   for r in rounds],
    }
    print(f"backend overhead (median of {len(rounds)}): ratio {median['ratio']:.3f} (target >= 0.9), "
          f"execution ratio {median['execution_ratio']:.3f}", file=sys.stderr)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
