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

import json

import numpy as np

from pyserver.engine.protocol.http_codec import DEFAULT_MAX_INPUT_SIZE, json_tensor_data
from pyserver.kernel import dtypes
from pyserver.kernel.errors import (
    Code,
    ServerError,
    json_parse_error,
    json_type_error,
    request_json_too_large,
)
from pyserver.kernel.types import InferRequest, InferTensor

__all__ = ["decode_generate_request", "generate_response"]


def _bad(message: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, message)


def decode_generate_request(model: str, version: str, body: bytes, config: dict,
                            max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> InferRequest:
    """An InferRequest from a generate body; ``config`` is the model's
    config JSON (for its inputs' datatypes and batching). Fields are taken
    in the order sent, as Triton walks them: the first that is wrong names
    the error, and a field sent twice is core's 'already exists'."""
    if len(body) > max_input_size:  # a chunked body (a Content-Length was bounded as it came)
        raise _bad(request_json_too_large(len(body), max_input_size))
    try:
        # pairs, not dicts: a key given twice must not vanish
        doc = json.loads(body, object_pairs_hook=_Pairs) if body else _Pairs()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise json_parse_error(e) from None
    if type(doc) is not _Pairs:
        raise _bad("generate request JSON must be an object")
    request_id = ""
    for name, value in doc:
        if name == "id":
            if type(value) is not str:
                raise json_type_error(
                    "Unable to parse 'id': attempt to access JSON non-string as string")
            request_id = value
            break
    batching = int(config.get("max_batch_size", 0)) > 0
    fields = _GenerateFields(model, request_id, batching,
                             {t["name"]: t for t in config.get("input", [])}, max_input_size)
    for name, value in doc:
        if name == "id":
            continue
        if name == "parameters" and name not in fields.specs:
            if type(value) is not _Pairs:
                raise json_type_error("Expected JSON object for keyword: 'parameters': attempt "
                                      "to access JSON non-object as object")
            for nested_name, nested_value in value:
                try:
                    fields.take(nested_name, nested_value)
                except ServerError as e:  # Triton's prefix; the code stays the inner one
                    raise ServerError(e.code,
                                      f"Converting keyword: 'parameters': {e.message}") from None
            continue
        fields.take(name, value)
    return InferRequest(model, version, request_id, fields.inputs, [], fields.params)


class _Pairs(list):
    """A JSON object as its (key, value) pairs, in order, duplicates kept."""


class _GenerateFields:
    """The inputs and request parameters of one generate request, as its
    fields come: a field that names an input feeds it, any other is a
    request parameter (as in Triton)."""

    __slots__ = ("model", "request_id", "batching", "specs", "max_input_size", "inputs",
                 "params", "seen", "consumed")

    def __init__(self, model, request_id, batching, specs, max_input_size):
        self.model = model
        self.request_id = request_id
        self.batching = batching
        self.specs = specs
        self.max_input_size = max_input_size
        self.inputs = []
        self.params = {}
        self.seen = set()
        self.consumed = 0

    def take(self, name: str, value) -> None:
        spec = self.specs.get(name)
        if spec is None:
            self.params[name] = _parameter(name, value)
            return
        if name in self.seen:
            raise _bad(f"[request id: {self.request_id or '<id_unknown>'}] input '{name}' "
                       "already exists in request")
        self.seen.add(name)
        wire = dtypes.config_to_wire(spec["data_type"])
        values = value if type(value) is list else [value]
        if wire == "BYTES":
            if not all(type(v) is str for v in values):
                raise json_type_error("attempt to access JSON non-string as string")  # Triton's text
            encoded = [v.encode() for v in values]
            size = sum(4 + len(v) for v in encoded)  # as serialized: length prefix + bytes
        else:
            encoded = None
            npdt = dtypes.WIRE_TO_NUMPY.get(wire)
            size = len(values) * (npdt.itemsize if npdt is not None else 0)
        if size + self.consumed > self.max_input_size:
            raise _bad(f"request size of {self.consumed} bytes with input '{name}' of size "
                       f"{size} bytes exceeds the maximum allowed input size of "
                       f"{self.max_input_size}. Use --http-max-input-size to increase the limit.")
        self.consumed += size
        dims = ([-1] if self.batching else []) + [int(d) for d in spec.get("dims", [])]
        shape = _fit_shape(name, len(values), dims)
        if encoded is not None:
            data = np.empty(len(encoded), dtype=object)
            data[:] = encoded
            data = data.reshape(shape)
        else:
            data = json_tensor_data(name, wire, values, shape)
        self.inputs.append(InferTensor(name, wire, shape, data))


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
