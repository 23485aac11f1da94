"""The HTTP infer codec through the frontend's entry points: what its one
decode call and its one answer call cost per request, on what the compiled
common case takes and on what it declines.

  python bench/http_entry.py [--number 20000] [--repeat 7]
  python bench/ab.py --baseline ../old -- http_entry.py   # against a tree before

Common: tritonclient's add_sub requests (JSON data; binary data) and their
answers. Declined by the reader: nested JSON data, a request parameter of
the user's own, a BYTES input; by the writer: response parameters, an FP16
output, a BYTES output. Each is timed through the
frontend's entry points (http_codec.decode_infer_request and answer_infer;
in a tree from before the single decoder, decode_common_request then
decode_infer_request, and respond_common then encode_infer_response, as its
frontend called them), the best of --repeat runs of --number calls. Prints
JSON rows {case, side, us}.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LIMIT = 1 << 26


def entry_points():
    """(decode(headers, body), answer(response, request)) as the frontend calls them."""
    try:  # one decoder, one encoder, compiled
        import pyserver.engine.protocol.http_codec as codec
    except ImportError:  # the tree before: the frontends' codec over decode_plain
        import pyserver.frontends.http_codec as codec

    if hasattr(codec, "answer_infer"):
        def decode(headers, body):
            return codec.decode_infer_request(
                "m", "", headers.get(b"inference-header-content-length"), body, LIMIT, None,
                None)

        def answer(response, request):
            return codec.answer_infer(response, request, True, False)
        return decode, answer

    from pyserver.engine.http_infer import http_message  # the tree before

    def decode(headers, body):
        return codec.decode_common_request("m", "", headers, body, LIMIT) or \
            codec.decode_infer_request("m", "", lambda k: headers.get(k.encode()), body, LIMIT,
                                       None, None)

    def answer(response, request):
        whole = codec.respond_common(response, request, True, False)
        if whole is not None:
            return whole
        headers, body = codec.encode_infer_response(response, request)
        return http_message(b"HTTP/1.1 200 OK\r\n", headers, body, True, False)
    return decode, answer


def requests():
    values = list(range(16))
    return {
        "common JSON": {"inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": values}
            for n in ("INPUT0", "INPUT1")],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}]},
        "nested JSON data": {"inputs": [
            {"name": n, "datatype": "FP32", "shape": [4, 4],
             "data": [values[i:i + 4] for i in range(0, 16, 4)]} for n in ("INPUT0", "INPUT1")]},
        "user parameter": {"parameters": {"tenant": "a"}, "inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": values}
            for n in ("INPUT0", "INPUT1")]},
        "BYTES input": {"inputs": [
            {"name": "TEXT", "datatype": "BYTES", "shape": [4], "data": ["a", "bb", "ccc", "d"]}]},
    }


def responses():
    import numpy as np

    try:
        from pyserver.kernel.types import InferResponse, InferTensor
    except ImportError:
        from pyserver.core.types import InferResponse, InferTensor
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return {
        "common answer": InferResponse("m", "1", "", [InferTensor("OUT", "FP32", [1, 16], a),
                                                      InferTensor("OUT1", "FP32", [1, 16], a)]),
        "response parameters": InferResponse("m", "1", "", [InferTensor("OUT", "FP32", [1, 16], a)],
                                             {"sequence": "s1"}),
        "FP16 output": InferResponse("m", "1", "", [
            InferTensor("OUT", "FP16", [1, 16], a.astype(np.float16))]),
        "BYTES output": InferResponse("m", "1", "", [InferTensor(
            "OUT", "BYTES", [2], np.array([b"ab", b"cd"], dtype=np.object_))]),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    try:
        from pyserver.kernel.types import InferRequest
    except ImportError:
        from pyserver.core.types import InferRequest
    decode, answer = entry_points()
    rows = []
    import numpy as np

    binary = np.arange(16, dtype=np.float32).tobytes()
    header = json.dumps({"inputs": [
        {"name": n, "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
        for n in ("INPUT0", "INPUT1")], "parameters": {"binary_data_output": True}}).encode()
    bodies = [(case, {}, json.dumps(doc).encode()) for case, doc in requests().items()]
    bodies.insert(1, ("common binary", {b"inference-header-content-length": b"%d" % len(header)},
                      header + binary + binary))
    for case, headers, body in bodies:
        decode(headers, body)  # decodes (and says no error) before it is timed
        us = min(timeit.repeat(lambda: decode(headers, body), number=args.number,
                               repeat=args.repeat)) / args.number * 1e6
        rows.append({"case": case, "side": "request", "us": round(us, 3)})
    request = InferRequest("m", "", "", [], [], {})
    for case, response in responses().items():
        answer(response, request)
        us = min(timeit.repeat(lambda: answer(response, request), number=args.number,
                               repeat=args.repeat)) / args.number * 1e6
        rows.append({"case": case, "side": "answer", "us": round(us, 3)})
    for r in rows:
        print(f"{r['side']:>7} {r['case']:<20} {r['us']:6.2f} µs", file=sys.stderr)
    print(json.dumps({"bench": "http_entry", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
