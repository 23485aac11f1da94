"""KServe v2 over HTTP for a server of the in-process API (``tritonserver``):
the routes a Ray Serve replica answers behind Ray's proxy.

``KServeRoutes(server).handle(method, path, headers, body)`` gives back
(status, headers, body). Nothing here knows Ray: the replica hands over what
its Starlette request carried and sends back what it gets. Bodies are
decoded and encoded by pyserver's HTTP codec (JSON tensors and the binary
tensor extension); inference itself goes through the API
(``Model.async_infer``), so what the decoded request asks is translated to
the API's inputs, parameters and flags, and its responses back.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

import numpy as np
import orjson

from pyserver.engine.protocol.http_codec import (
    DEFAULT_MAX_INPUT_SIZE,
    decode_infer_request,
    encode_infer_response,
)
from pyserver.frontends.http.infer import decompress
from pyserver.kernel.errors import HTTP_STATUS, Code, ServerError
from pyserver.kernel.types import InferResponse, InferTensor

__all__ = ["KServeRoutes", "api", "error_message", "error_status", "response_arrays"]

# The API's error classes by name (real Triton's package has the same
# names), with the HTTP status Triton gives their codes.
_STATUS_BY_ERROR = {
    "InvalidArgumentError": HTTP_STATUS[Code.INVALID_ARG],
    "NotFoundError": HTTP_STATUS[Code.NOT_FOUND],
    "UnavailableError": HTTP_STATUS[Code.UNAVAILABLE],
    "UnsupportedError": HTTP_STATUS[Code.UNSUPPORTED],
    "AlreadyExistsError": HTTP_STATUS[Code.ALREADY_EXISTS],
    "InternalError": HTTP_STATUS[Code.INTERNAL],
    "UnknownError": HTTP_STATUS[Code.UNKNOWN],
}

_JSON = (("Content-Type", "application/json"),)

_MODEL_ROUTE = re.compile(
    r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?(?P<action>/[a-z]+)?/?$")

# What the wire request's parameters say that the API spells otherwise.
_SEQUENCE_KEYS = ("sequence_id", "sequence_start", "sequence_end")


def api():
    """The in-process API's module: ``tritonserver`` (pyserver's shim, or
    Triton's own package), else pyserver.inprocess under its own name."""
    try:
        import tritonserver
    except ImportError:
        import pyserver.inprocess as tritonserver
    return tritonserver


def error_status(error: BaseException) -> int:
    """The HTTP status of an API error (or the codec's ServerError); 500 for
    anything else."""
    if isinstance(error, ServerError):
        return error.http_status
    for cls in type(error).__mro__:
        status = _STATUS_BY_ERROR.get(cls.__name__)
        if status is not None:
            return status
    return 500


def error_message(error: BaseException) -> str:
    """The text an API error carries (its first argument: an error on a
    response also carries the response after it)."""
    if isinstance(error, ServerError):
        return error.message
    if error.args and isinstance(error.args[0], str):
        return error.args[0]
    return str(error) or type(error).__name__


def _answer_error(error: BaseException) -> tuple[int, tuple, bytes]:
    return error_status(error), _JSON, orjson.dumps({"error": error_message(error)})


def _answer_json(obj: Any, status: int = 200) -> tuple[int, tuple, bytes]:
    return status, _JSON, orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def _bad_request(message: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, message)


def response_arrays(response) -> dict[str, np.ndarray]:
    """An API response's outputs as numpy arrays (BYTES as object arrays of
    bytes), copied out of the response's memory."""
    arrays = {}
    for name, tensor in response.outputs.items():
        if _datatype(tensor) == "BYTES":
            arrays[name] = tensor.to_bytes_array()
        else:
            arrays[name] = np.array(np.from_dlpack(tensor), copy=True)
    return arrays


def _datatype(tensor) -> str:
    kind = tensor.data_type
    return getattr(kind, "name", str(kind))


class KServeRoutes:
    """The KServe v2 routes over one started ``tritonserver.Server``."""

    def __init__(self, server, max_input_size: int = DEFAULT_MAX_INPUT_SIZE):
        self._server = server
        self._max_input_size = max_input_size

    async def handle(self, method: str, path: str, headers: Mapping[str, str],
                     body: bytes) -> tuple[int, tuple, bytes]:
        """One request: ``headers`` with lower-case names. Every failure is
        answered in Triton's shape, ``{"error": "..."}``."""
        try:
            return await self._route(method.upper(), path, headers, body)
        except Exception as e:  # noqa: BLE001 (every error is an answer)
            return _answer_error(e)

    async def _route(self, method: str, path: str, headers, body: bytes):
        server = self._server
        if path in ("/v2", "/v2/"):
            if method != "GET":
                return self._not_allowed()
            return _answer_json(server.metadata())
        if path == "/v2/health/live":
            return self._health(method, server.live())
        if path == "/v2/health/ready":
            return self._health(method, server.ready())
        if path == "/v2/repository/index":
            if method != "POST":
                return self._not_allowed()
            return _answer_json(self._index(body))
        match = _MODEL_ROUTE.match(path)
        if match is None:
            return 404, _JSON, orjson.dumps({"error": "Not Found"})
        name = match["model"]
        version = self._version(match["version"])
        action = match["action"]
        model = server.model(name, version)
        if action is None:
            if method != "GET":
                return self._not_allowed()
            return _answer_json(model.metadata())
        if action == "/ready":
            return self._health(method, model.ready())
        if action == "/config":
            if method != "GET":
                return self._not_allowed()
            return _answer_json(model.config())
        if action == "/stats":
            if method != "GET":
                return self._not_allowed()
            return _answer_json(model.statistics())
        if action == "/infer":
            if method != "POST":
                return self._not_allowed()
            return await self._infer(model, name, match["version"] or "", headers, body)
        return 404, _JSON, orjson.dumps({"error": "Not Found"})

    @staticmethod
    def _health(method: str, ok: bool):
        if method != "GET":
            return KServeRoutes._not_allowed()
        return (200 if ok else 400), (), b""

    @staticmethod
    def _not_allowed():
        return 405, _JSON, orjson.dumps({"error": "Method Not Allowed"})

    @staticmethod
    def _version(text: Optional[str]) -> int:
        if not text:
            return -1
        try:
            version = int(text)
        except ValueError:
            raise _bad_request(f"failed to parse model version '{text}'") from None
        if version < 0:
            raise _bad_request(f"failed to parse model version '{text}'")
        return version

    def _index(self, body: bytes) -> list:
        ready_only = False
        if body.strip():
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError as e:
                raise _bad_request(f"failed to parse the request JSON buffer: {e}") from None
            ready_only = bool(isinstance(doc, dict) and doc.get("ready"))
        rows = []
        for (name, version), model in self._server.models(exclude_not_ready=ready_only).items():
            row = {"name": name}
            if version != -1:
                row["version"] = str(version)
            if model.state:
                row["state"] = model.state
            if model.reason:
                row["reason"] = model.reason
            rows.append(row)
        return rows

    # -- infer ---------------------------------------------------------------------

    async def _infer(self, model, name: str, version: str, headers, body: bytes):
        encoding = headers.get("content-encoding")
        if encoding is not None:
            body = decompress(encoding.encode("latin-1"), body, self._max_input_size)
        request = decode_infer_request(name, version, headers.get("inference-header-content-length"),
                                       body, self._max_input_size)
        wanted = [o.name for o in request.outputs]
        for output in request.outputs:
            if output.parameters and "classification" in output.parameters:
                raise ServerError(Code.UNSUPPORTED,
                                  f"output '{output.name}': classification is not supported on "
                                  "this endpoint")
        parameters = {k: v for k, v in request.parameters.items()
                      if k != "binary_data_output" and k not in _SEQUENCE_KEYS}
        flags = 0
        correlation_id = request.parameters.get("sequence_id")
        if request.parameters.get("sequence_start"):
            flags |= int(api().RequestFlag.SEQUENCE_START)
        if request.parameters.get("sequence_end"):
            flags |= int(api().RequestFlag.SEQUENCE_END)
        inputs = {tensor.name: tensor.data for tensor in request.inputs}
        responses = [response async for response in model.async_infer(
            inputs=inputs, parameters=parameters, request_id=request.id or None,
            correlation_id=correlation_id, flags=flags, priority=request.priority,
            timeout=request.timeout_us)]
        with_outputs = [r for r in responses if r.outputs]
        if len(with_outputs) > 1:
            raise ServerError(Code.UNSUPPORTED, "HTTP end point doesn't support models with "
                                                "decoupled transaction policy")
        response = with_outputs[0] if with_outputs else responses[-1]
        outputs = response.outputs
        if wanted:
            unknown = [n for n in wanted if n not in outputs]
            if unknown:
                raise _bad_request(f"unexpected inference output '{unknown[0]}' for model "
                                   f"'{name}'")
            outputs = {n: outputs[n] for n in wanted}
        tensors = []
        for output_name, tensor in outputs.items():
            datatype = _datatype(tensor)
            if datatype == "BYTES":
                data = tensor.to_bytes_array()
            else:
                data = np.from_dlpack(tensor)
            tensors.append(InferTensor(output_name, datatype, [int(d) for d in tensor.shape], data))
        served_version = getattr(response.model, "version", -1)
        answer = InferResponse(name, str(served_version) if served_version != -1 else version,
                               response.request_id or request.id or "", tensors,
                               dict(response.parameters) or None)
        encoded_headers, encoded = encode_infer_response(answer, request)
        if not isinstance(encoded, (bytes, bytearray)):
            encoded = b"".join(encoded)
        return 200, tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in encoded_headers), \
            bytes(encoded)
