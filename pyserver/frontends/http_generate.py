"""Triton's generate extension over HTTP: ``POST .../generate`` (one JSON
answer) and ``.../generate_stream`` (server-sent events, one ``data:`` event
per response: the way to use a decoupled model over HTTP).

The request is a flat JSON object: ``id`` and ``parameters`` (request
parameters) are taken as such, every other field feeds the model input of the
same name: a string or a list of strings a BYTES tensor, numbers and booleans
a tensor of the input's datatype; a scalar is one element, a list a 1-D run,
with the batch dimension of 1 in front for a batching model. The answer
carries ``model_name``, ``model_version``, the ``id`` and one field per
output: a string or number for one element, a list for more.
"""

from __future__ import annotations

import numpy as np
import orjson

from pyserver.kernel import dtypes
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferTensor

__all__ = ["decode_generate_request", "generate_response", "sse_event"]


def _bad(message: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, message)


def decode_generate_request(model: str, version: str, body: bytes, config: dict) -> InferRequest:
    """An InferRequest from a generate body; ``config`` is the model's
    config JSON (for its inputs' datatypes and batching)."""
    try:
        doc = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as e:
        raise _bad(f"failed to parse the request JSON buffer: {e.msg} at {e.pos}") from None
    if type(doc) is not dict:
        raise _bad("generate request JSON must be an object")
    request_id = doc.pop("id", "")
    if type(request_id) is not str:
        raise _bad("Unable to parse 'id': attempt to access JSON non-string as string")
    nested = doc.pop("parameters", None) or {}
    if type(nested) is not dict:
        raise _bad("Unable to parse 'parameters': attempt to access JSON non-object as object")
    batching = int(config.get("max_batch_size", 0)) > 0
    specs = {t["name"]: t for t in config.get("input", [])}
    inputs = []
    params = {}
    # As in Triton, a field that names no input is a request parameter, at
    # the top level or inside "parameters"; a parameter is one value.
    fields = list(doc.items())
    for name, value in nested.items():
        if name in specs:
            fields.append((name, value))
        else:
            params[name] = _parameter(name, value)
    for name, value in fields:
        spec = specs.get(name)
        if spec is None:
            params[name] = _parameter(name, value)
            continue
        wire = dtypes.config_to_wire(spec["data_type"])
        values = value if type(value) is list else [value]
        if wire == "BYTES":
            if not all(type(v) is str for v in values):
                raise _bad("attempt to access JSON non-string as string")  # Triton's text
            data = np.empty(len(values), dtype=object)
            data[:] = [v.encode() for v in values]
        else:
            npdt = dtypes.WIRE_TO_NUMPY.get(wire)
            if npdt is None or not all(type(v) in (int, float, bool) for v in values):
                raise _bad(f"field '{name}' cannot feed input '{name}' ({wire}) of model "
                           f"'{model}': expected numbers")
            try:
                data = np.array(values, dtype=npdt)
            except (OverflowError, ValueError) as e:
                raise _bad(f"field '{name}' does not fit input '{name}' ({wire}): {e}") from None
        dims = ([-1] if batching else []) + [int(d) for d in spec.get("dims", [])]
        shape = _fit_shape(name, len(values), dims)
        inputs.append(InferTensor(name, wire, shape, data.reshape(shape)))
    return InferRequest(model, version, request_id, inputs, [], params)


def _fit_shape(name: str, count: int, dims: list) -> list:
    """The shape ``count`` elements take in an input of ``dims`` (-1:
    variable), as Triton fits a generate field: the fixed dimensions divide
    the count from the innermost out, the innermost variable one takes what
    is left and the other variable ones are 1."""
    shape = list(dims) or [-1]
    left = count
    for d in reversed(shape):
        if d != -1:
            if d == 0 or left % d:
                raise _bad(f"The schema can not convert input '{name}' to tensor with proper "
                           "shape")
            left //= d
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i], left = left, 1
    if left != 1:
        raise _bad(f"The schema can not convert input '{name}' to tensor with proper shape")
    return shape


def _parameter(name: str, value):
    if type(value) in (str, int, float, bool):
        return value
    raise _bad(f"parameter '{name}' has invalid type. It should be either 'int', 'bool', or "
               "'string'.")


def _json_value(t: InferTensor):
    data = t.data
    if data is None:
        return None
    flat = data.reshape(-1)
    if t.datatype == "BYTES":
        items = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat]
    elif t.datatype == "BF16":
        items = flat.astype(np.float32).tolist()
    else:
        items = flat.tolist()
    return items[0] if len(items) == 1 else items


def generate_response(response) -> dict:
    doc = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        doc["id"] = response.id
    for t in response.outputs:
        doc[t.name] = _json_value(t)
    return doc


def sse_event(doc: dict) -> bytes:
    """One server-sent event carrying ``doc``."""
    return b"data: " + orjson.dumps(doc) + b"\n\n"
