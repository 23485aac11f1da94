"""Hypothesis strategies for what a client can send over HTTP: request
documents (inputs, outputs, parameters) mutated from a correct infer,
generate bodies, settings updates, and the headers around them."""

from __future__ import annotations

import json

from hypothesis import strategies as st

DATATYPES = ["FP32", "FP16", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
             "UINT32", "UINT64", "BOOL", "BYTES", "BF16"]
HUGE = [(1 << 31) - 1, 1 << 31, (1 << 32) + 1, (1 << 62), (1 << 63) - 1, 1 << 63, (1 << 64) - 1,
        1 << 64, 10 ** 30]

# JSON values of every kind, small and at the edges
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 65), 1 << 65),
                    st.sampled_from(HUGE + [-1, 0, 1, 16]),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=12), st.sampled_from(["", "INPUT0", "OUTPUT0", "../x", "\0"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)

dims = st.one_of(st.integers(0, 20), st.sampled_from(HUGE + [-1, -5]))
shapes = st.one_of(st.just([1, 16]), st.lists(dims, max_size=4), json_values)
names = st.one_of(st.sampled_from(["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1", "IN", "TEXT"]),
                  st.text(max_size=10), json_values)
datatypes = st.one_of(st.sampled_from(DATATYPES), st.text(max_size=6), json_values)
PARAM_KEYS = ["binary_data_size", "binary_data", "binary_data_output", "shared_memory_region",
              "shared_memory_offset", "shared_memory_byte_size", "classification", "priority",
              "timeout", "sequence_id", "sequence_start", "sequence_end", "triton_x", "custom"]
parameters = st.dictionaries(st.sampled_from(PARAM_KEYS), json_values, max_size=4)


def _data(values):
    return st.one_of(st.just(values), st.lists(scalars, max_size=20), json_values)


@st.composite
def input_tensor(draw):
    t = {"name": draw(names), "datatype": draw(datatypes), "shape": draw(shapes)}
    if draw(st.booleans()):
        t["data"] = draw(_data(list(range(16))))
    if draw(st.integers(0, 3)) == 0:
        t["parameters"] = draw(st.one_of(parameters, json_values))
    return t


@st.composite
def infer_document(draw):
    """A correct add_sub request, then some of its parts replaced."""
    doc = {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": list(range(16))}
                      for n in ("INPUT0", "INPUT1")]}
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["input", "inputs", "outputs", "parameters", "id", "extra",
                                     "drop"]))
        if what == "input":
            if isinstance(doc.get("inputs"), list) and doc["inputs"]:
                doc["inputs"][draw(st.integers(0, len(doc["inputs"]) - 1))] = \
                    draw(input_tensor())
        elif what == "inputs":
            doc["inputs"] = draw(st.one_of(st.lists(input_tensor(), max_size=3), json_values))
        elif what == "outputs":
            doc["outputs"] = draw(st.one_of(
                st.lists(st.fixed_dictionaries({"name": names},
                                               optional={"parameters": parameters}), max_size=3),
                json_values))
        elif what == "parameters":
            doc["parameters"] = draw(st.one_of(parameters, json_values))
        elif what == "id":
            doc["id"] = draw(st.one_of(st.text(max_size=20), json_values))
        elif what == "extra":
            doc[draw(st.text(max_size=8))] = draw(json_values)
        elif doc:
            doc.pop(draw(st.sampled_from(sorted(doc))), None)
    return doc


MODEL_PATHS = ["/v2/models/add_sub", "/v2/models/add_sub/versions/1", "/v2/models/nope",
               "/v2/models/add_sub/versions/99", "/v2/models/%2e%2e", "/v2/models/add_sub/versions/x"]
KINDS = ["infer", "generate", "generate_stream", "ready", "config", "stats", "trace/setting", ""]
OTHER_PATHS = ["/v2", "/v2/health/live", "/v2/health/ready", "/v2/trace/setting", "/v2/logging",
               "/v2/repository/index", "/v2/repository/models/add_sub/load",
               "/v2/repository/models/../etc/load", "/v2/systemsharedmemory/status",
               "/v2/systemsharedmemory/region/r/register", "/v2/cudasharedmemory/status",
               "/v2/models/stats", "/metrics", "/", "/v2/models/add_sub/infer?x=1"]


@st.composite
def http_request(draw):
    """(method, path, headers, body)."""
    if draw(st.integers(0, 3)):
        path = draw(st.sampled_from(MODEL_PATHS)) + "/" + draw(st.sampled_from(KINDS))
        path = path.rstrip("/")
    else:
        path = draw(st.sampled_from(OTHER_PATHS))
    posts = ("infer", "generate", "generate_stream", "load", "unload", "register", "unregister",
             "index", "setting", "logging")
    if draw(st.integers(0, 4)):  # mostly the route's own method
        method = "POST" if path.split("?")[0].rsplit("/", 1)[-1] in posts else "GET"
    else:
        method = draw(st.sampled_from(["POST", "GET", "PUT", "DELETE", "HEAD"]))
    headers = {}
    kind = draw(st.sampled_from(["json", "json", "binary", "raw", "junk", "settings"]))
    if kind == "json":
        body = json.dumps(draw(infer_document())).encode()
    elif kind == "settings":
        body = json.dumps(draw(st.dictionaries(
            st.sampled_from(["trace_level", "trace_rate", "trace_count", "log_frequency",
                             "trace_mode", "log_info", "log_verbose_level", "log_format",
                             "parameters", "config", "unload_dependents", "key", "byte_size",
                             "offset"]), json_values, max_size=3))).encode()
    elif kind == "binary":
        doc = draw(infer_document())
        for t in doc.get("inputs", []) if isinstance(doc.get("inputs"), list) else []:
            if isinstance(t, dict):
                t.pop("data", None)
                t["parameters"] = {"binary_data_size": draw(st.one_of(
                    st.just(64), st.integers(-2, 200), st.sampled_from(HUGE)))}
        header = json.dumps(doc).encode()
        tail = draw(st.binary(max_size=200))
        headers["Inference-Header-Content-Length"] = draw(st.one_of(
            st.just(str(len(header))), st.integers(-5, 10 ** 6).map(str), st.text(max_size=5)))
        body = header + tail
    elif kind == "raw":
        headers["Inference-Header-Content-Length"] = "0"
        body = draw(st.binary(max_size=256))
    else:
        body = draw(st.binary(max_size=256))
    if draw(st.integers(0, 5)) == 0:
        headers["Content-Encoding"] = draw(st.sampled_from(["gzip", "deflate", "br", "x"]))
    if draw(st.integers(0, 5)) == 0:
        headers["Accept-Encoding"] = draw(st.sampled_from(["gzip", "deflate", "*", "x;q=0"]))
    if draw(st.integers(0, 7)) == 0:
        headers[draw(st.sampled_from(["Content-Type", "Transfer-Encoding", "Expect",
                                      "triton-grpc-protocol-x", "X-Any"]))] = \
            draw(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                         max_size=20))
    return method, path, headers, body
