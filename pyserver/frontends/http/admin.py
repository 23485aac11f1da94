"""The HTTP routes other than infer and generate: health, metadata, model
config and readiness, statistics, the repository, trace and logging
settings, shared memory. Each handler is ``handler(conn, method, headers,
body, keep_alive, *route args)``, called once its route (routes.py) matched,
its API group allowed it and its method was one it takes; it answers
through the connection, in request order."""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import inspect
from urllib.parse import unquote

import orjson

from pyserver.engine.protocol.http_codec import encode_json
from pyserver.frontends.http.framing import (
    EMPTY_JSON,
    JSON_HEADERS,
    MODEL_NOT_READY,
    NO_HEADERS,
    build,
)
from pyserver.kernel.errors import (
    Code,
    ServerError,
    json_parse_error,
    json_type_error,
    request_json_too_large,
    unknown_load_parameter,
)
from pyserver.runtime.settings import LOG_FORMATS
from pyserver.runtime.shared_memory import CUDA_IPC_HANDLE_SIZE, SYSTEM

# Triton parses sizes as an int32 (http_server.cc).
_INT32_MAX = (1 << 31) - 1


def _bad(msg: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, msg)


def _is_uint(v) -> bool:
    return type(v) is int and 0 <= v < (1 << 64)


def json_body(body: bytes, limit: int):
    """A non-infer JSON request body (EVRequestToJson): None when empty."""
    if not body:
        return None
    if len(body) > limit:  # a chunked body (a Content-Length was bounded as it came)
        raise ServerError(Code.INVALID_ARG, request_json_too_large(len(body), limit))
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise json_parse_error(e) from None


def _b64decode(value: str, name: str) -> bytes:
    """Lenient base64 (Triton's libb64 decoder skips what it cannot decode)."""
    if len(value) > _INT32_MAX:
        raise _bad(f"'{name}' exceeds the maximum allowed data size limit INT_MAX")
    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError):
        cleaned = "".join(c for c in value if c.isalnum() or c in "+/")
        try:
            return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4))
        except (binascii.Error, ValueError):
            raise _bad(f"unable to decode base64 data of '{name}'") from None


# ---------------------------------------------------------------- health and metadata


def server_metadata(conn, method, headers, body, keep_alive):
    try:
        payload = encode_json(conn.server.metadata())
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    return conn.respond(200, JSON_HEADERS, payload, keep_alive)


def health(conn, method, headers, body, keep_alive, which):
    try:
        ok = conn.server.is_live() if which == "live" else conn.server.is_ready()
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    return conn.respond(200 if ok else 400, NO_HEADERS, b"", keep_alive)


def model_metadata(conn, method, headers, body, keep_alive, model, version):
    return _model_document(conn, conn.server.model_metadata, model, version, keep_alive)


def model_config(conn, method, headers, body, keep_alive, model, version):
    return _model_document(conn, conn.server.model_config, model, version, keep_alive)


def _model_document(conn, fn, model, version, keep_alive):
    try:
        payload = encode_json(fn(model, version))
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    return conn.respond(200, JSON_HEADERS, payload, keep_alive)


def model_ready(conn, method, headers, body, keep_alive, model, version):
    try:
        ready = conn.server.model_ready_check(model, version)
    except Exception as e:
        return conn.respond_exception(e, keep_alive)
    if inspect.isawaitable(ready):  # the model's own is_ready(), off the loop
        return conn.answer_later(asyncio.ensure_future(ready), keep_alive, _ready_data)
    return conn.emit(_model_ready_answer(ready, keep_alive, conn.http10), not keep_alive)


def _ready_data(fut, keep_alive: bool, http10: bool) -> list:
    """A model-ready answer that waited for the model's own is_ready()."""
    ready = not fut.cancelled() and fut.exception() is None and fut.result()
    return _model_ready_answer(ready, keep_alive, http10)


def _model_ready_answer(ready, keep_alive: bool, http10: bool) -> list:
    if ready:
        return build(200, NO_HEADERS, b"", keep_alive, http10)
    return build(400, JSON_HEADERS, MODEL_NOT_READY, keep_alive, http10)


def statistics(conn, method, headers, body, keep_alive, model, version):
    return conn.call(conn.server.statistics, (model, version), keep_alive)


# ---------------------------------------------------------------- repository


def repository(conn, method, headers, body, keep_alive, action, model, repo):
    """/v2/repository(/<name>)/index and .../models/<model>/(load|unload)."""
    server = conn.server
    try:
        doc = json_body(body, conn.frontend.max_input_size)
        if action == "index":  # the repository name is ignored, as in Triton
            ready = False
            if type(doc) is dict and "ready" in doc:
                ready = doc["ready"]
                if type(ready) is not bool:
                    raise _bad("Invalid value for 'ready': expected a boolean")
            return conn.call(server.repository_index, (ready,), keep_alive)
        if repo is not None:
            raise ServerError(Code.UNSUPPORTED, "'repository_name' specification is not supported")
        if "%" in model:
            model = unquote(model)
        params = doc.get("parameters") if type(doc) is dict else None
        if action == "load":
            config = None
            files = None
            if params is not None:
                if type(params) is not dict:
                    raise json_type_error("attempt to get members for non-object")
                for key, value in params.items():
                    if type(value) is not str:
                        raise json_type_error("attempt to access JSON non-string as string")
                    if key == "config":
                        config = value
                    elif key.startswith("file:"):
                        if files is None:
                            files = {}
                        files[key[5:]] = _b64decode(value, key)
                    else:
                        raise unknown_load_parameter(key)
            return conn.call(functools.partial(server.load_model, config=config, files=files),
                             (model,), keep_alive, None)
        unload_dependents = False
        if type(params) is dict and "unload_dependents" in params:
            unload_dependents = params["unload_dependents"]
            if type(unload_dependents) is not bool:
                raise json_type_error("Unable to parse 'unload_dependents': attempt to access "
                                      "JSON non-boolean as boolean")
        return conn.call(
            functools.partial(server.unload_model, unload_dependents=unload_dependents),
            (model,), keep_alive, None)
    except Exception as e:
        return conn.respond_exception(e, keep_alive)


# ---------------------------------------------------------------- settings


def trace_settings(conn, method, headers, body, keep_alive, model=None, version=""):
    """/v2/trace/setting and /v2/models/<model>/trace/setting."""
    return _settings(conn, method, body, keep_alive,
                     functools.partial(conn.server.trace_settings, network=True), model)


def log_settings(conn, method, headers, body, keep_alive):
    return _settings(conn, method, body, keep_alive,
                     functools.partial(conn.server.log_settings, network=True),
                     check=_check_log_update)


def _check_log_update(update: dict) -> None:
    """The types Triton's handler reads the values as (TritonJson's
    failures, INTERNAL), and its answer to an unknown log_format."""
    for key, value in update.items():
        if value is None:
            continue
        if key in ("log_info", "log_warning", "log_error") and type(value) is not bool:
            raise json_type_error("attempt to access JSON non-boolean as boolean")
        if key == "log_verbose_level" and not _is_uint(value):
            raise json_type_error("attempt to access JSON non-unsigned-integer as unsigned-integer")
        if key == "log_format":
            if type(value) is not str:
                raise json_type_error("attempt to access JSON non-string as string")
            if value not in LOG_FORMATS:
                raise ServerError(Code.UNAVAILABLE, f"invalid argument for --log_format, got: "
                                                    f"{value}")


def _settings(conn, method, body, keep_alive, fn, *args, check=None):
    """GET reads them, POST updates them (``check(update)`` first, when
    given); ``fn(*args, update)`` answers either way."""
    update = None
    if method == "POST":
        try:
            update = json_body(body, conn.frontend.max_input_size)
            if update is None:
                update = {}
            elif type(update) is not dict:
                raise json_type_error("attempt to get members for non-object")
            if check is not None:
                check(update)
        except Exception as e:
            return conn.respond_exception(e, keep_alive)
    return conn.call(fn, (*args, update), keep_alive)


# ---------------------------------------------------------------- shared memory


def shared_memory(conn, method, headers, body, keep_alive, kind, region, action):
    shm = conn.frontend.shared_memory
    try:
        if action == "status":
            payload = encode_json(shm.status(region or None, kind))
            return conn.respond(200, JSON_HEADERS, payload, keep_alive)
        if action == "unregister":
            shm.unregister(region or None, kind)
            return conn.respond(200, JSON_HEADERS, EMPTY_JSON, keep_alive)
        # register
        if not shm.allow_client_shm:
            shm._check_allowed()
        label = "system" if kind == SYSTEM else "cuda"
        if not region:
            raise _bad(f"'region name' is necessary to register {label} shared memory region")
        doc = json_body(body, conn.frontend.max_input_size)
        if type(doc) is not dict:
            doc = {}
        if kind == SYSTEM:
            _register_system(shm, region, doc)
        else:
            _register_cuda(shm, region, doc)
        return conn.respond(200, JSON_HEADERS, EMPTY_JSON, keep_alive)
    except Exception as e:
        return conn.respond_exception(e, keep_alive)


def _register_system(shm, region: str, doc: dict) -> None:
    if "key" not in doc:
        raise _bad("Shared memory register request has no 'key' field")
    key = doc["key"]
    if type(key) is not str:
        raise json_type_error("attempt to access JSON non-string as string")
    offset = doc.get("offset", 0)
    if not _is_uint(offset):
        raise json_type_error("attempt to access JSON non-unsigned-integer as unsigned-integer")
    if "byte_size" not in doc:
        raise _bad("Shared memory register request has no 'byte_size' field")
    byte_size = doc["byte_size"]
    if not _is_uint(byte_size):
        raise json_type_error("attempt to access JSON non-unsigned-integer as unsigned-integer")
    shm.register_system(region, key, offset, byte_size)


def _register_cuda(shm, region: str, doc: dict) -> None:
    if not shm.cuda_available():
        shm.register_cuda(region, b"", 0, 0)  # raises GPUs not supported
    handle = doc.get("raw_handle")
    if handle is None:
        raise _bad("Shared memory register request has no 'raw_handle' field")
    if type(handle) is not dict:
        raise json_type_error("attempt to access JSON non-object as object")
    b64 = handle.get("b64")
    if b64 is None:
        raise json_type_error("attempt to access non-existing object member 'b64'")
    if type(b64) is not str:
        raise json_type_error("attempt to access JSON non-string as string")
    for field in ("byte_size", "device_id"):
        if field not in doc:
            raise json_type_error(f"attempt to access non-existing object member '{field}'")
        if not _is_uint(doc[field]):
            raise json_type_error("attempt to access JSON non-unsigned-integer as unsigned-integer")
    raw = _b64decode(b64, "raw_handle")
    if len(raw) != CUDA_IPC_HANDLE_SIZE:
        raise _bad("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    shm.register_cuda(region, raw, doc["device_id"], doc["byte_size"])
