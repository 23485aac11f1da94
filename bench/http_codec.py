"""The HTTP infer codec's common case through csrc (simdjson reader, json_writer)
against the orjson path it replaces, in one run.

  python bench/http_codec.py [--number 20000] [--repeat 7]

Bodies are what tritonclient.http sends for add_sub (two FP32 [1,16] inputs):
JSON data, and binary data with binary outputs asked. For each, the request
side times engine/protocol/http_infer's reader (read_plain) against the
general path it would otherwise take (orjson.loads and the codec's walk),
and the answer side json_answer against encode_infer_response +
http_message, each the best of --repeat runs of --number calls, hot in cache
(the event loop under load runs colder, where fewer objects and instructions
count for more). Both sides are checked to give the same request and the
same bytes before anything is timed. Prints a JSON document with µs per call
and the ratio orjson/csrc.
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def bodies():
    """(name, body, header length, request parameters) per encoding."""
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.http._utils import _get_inference_request

    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    out = []
    for binary in (False, True):
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            inp = httpclient.InferInput(name, [1, 16], "FP32")
            inp.set_data_from_numpy(a, binary_data=binary)
            inputs.append(inp)
        outputs = [httpclient.InferRequestedOutput(n, binary_data=binary)
                   for n in ("OUTPUT0", "OUTPUT1")]
        body, json_size = _get_inference_request(
            inputs=inputs, request_id="", outputs=outputs, sequence_id=0, sequence_start=False,
            sequence_end=False, priority=0, timeout=None, custom_parameters=None)
        body = body if isinstance(body, bytes) else body.encode()
        out.append(("binary" if binary else "json", body,
                    len(body) if json_size is None else json_size))
    return out


def best(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()

    import numpy as np

    import pyserver.engine.protocol.http_codec as codec
    from pyserver.engine.protocol.http_infer import http_message, json_answer, read_plain
    from pyserver.kernel.types import InferResponse, InferTensor

    wire = codec.WIRE_TO_NUMPY
    limit = 1 << 26
    a = np.arange(16, dtype=np.float32).reshape(1, 16) * 1.5
    b = -np.arange(16, dtype=np.float32).reshape(1, 16) * 0.25
    response = InferResponse("add_sub", "1", "", [InferTensor("OUTPUT0", "FP32", [1, 16], a),
                                                  InferTensor("OUTPUT1", "FP32", [1, 16], b)])
    reader_of = codec.read_common

    def declining(*args):  # the reader says no: orjson and the walk decode
        return None

    def walk(*args):
        codec.read_common = declining
        try:
            return codec.decode_infer_request(*args)
        finally:
            codec.read_common = reader_of

    rows = []
    for name, body, hlen in bodies():

        def reader(body=body, hlen=hlen):
            return read_plain("add_sub", "", body, hlen, limit, wire)

        def orjson_path(body=body, hlen=hlen):
            return walk("add_sub", "", None if hlen == len(body) else str(hlen), body)

        request = reader()
        walked = orjson_path()
        assert request is not None and walked is not None
        for x, y in zip(request.inputs, walked.inputs, strict=True):
            assert x.name == y.name and np.array_equal(x.data, y.data)

        def writer(request=request):
            return json_answer(response, request, codec._JSON_HEADERS, True, False)

        def orjson_answer(request=request):
            headers, out = codec.encode_infer_response(response, request)
            return http_message(b"HTTP/1.1 200 OK\r\n", headers, out, True, False)

        assert b"".join(bytes(x) for x in writer()) == \
            b"".join(bytes(x) for x in orjson_answer())
        for side, csrc_fn, orjson_fn in (("request", reader, orjson_path),
                                         ("answer", writer, orjson_answer)):
            fast = best(csrc_fn, args.number, args.repeat)
            slow = best(orjson_fn, args.number, args.repeat)
            rows.append({"encoding": name, "side": side, "csrc_us": round(fast, 2),
                         "orjson_us": round(slow, 2), "orjson_over_csrc": round(slow / fast, 2)})
    for r in rows:
        print(f"{r['encoding']:>6} {r['side']:>7}: csrc {r['csrc_us']:5.2f} µs  "
              f"orjson path {r['orjson_us']:5.2f} µs  ratio {r['orjson_over_csrc']:.2f}x",
              file=sys.stderr)
    print(json.dumps({"bench": "http_codec", "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
