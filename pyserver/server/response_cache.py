"""Triton's response cache on csrc's ResponseCache (``pyserver.engine.cache``).

The server has one cache when started with ``--cache-config local,size=N``
(or the deprecated ``--response-cache-byte-size N``); a model uses it when
its config says ``response_cache { enable: true }``. A validated request is
hashed (model, version, requested outputs with their classification setting,
every input's name, datatype, shape and bytes: XXH3-128 in C++ with the GIL
released); a hit answers at once without queueing, a miss runs the model and
stores the response when it succeeds. As in Triton, hits count as successful
requests and cache hits but not as inferences or executions; decoupled
models are never cached. An ensemble with response_cache enabled caches its
top-level responses: a hit skips its steps (whose own caching is separate).
"""

from __future__ import annotations

import logging
import struct

import numpy as np
import orjson

from pyserver.engine import now_ns
from pyserver.engine.cache import ResponseCache, request_key
from pyserver.kernel import dtypes
from pyserver.kernel.types import InferResponse, InferTensor

__all__ = ["CacheConfigError", "ServerResponseCache", "parse_cache_config"]

log = logging.getLogger("pyserver")

_LEN = struct.Struct("<I")


class CacheConfigError(ValueError):
    """A --cache-config that cannot be used; the message says why."""


def parse_cache_config(specs: list[str], legacy_bytes: int = 0) -> int:
    """The local cache size in bytes from ``--cache-config`` values
    (``local,size=N``; ``size`` alone also works for ``local``), or the
    deprecated ``--response-cache-byte-size``. 0: no cache."""
    size = None
    for spec in specs:
        name, sep, setting = spec.partition(",")
        if not sep:
            raise CacheConfigError(
                f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {spec}")
        if name != "local":
            raise CacheConfigError(
                f"unsupported cache '{name}': this server has the 'local' cache only")
        key, eq, value = setting.partition("=")
        if not eq or key != "size":
            raise CacheConfigError(
                f"unknown setting '{setting}' for the local cache: it takes size=<bytes>")
        try:
            size = int(value)
        except ValueError:
            raise CacheConfigError(f"the local cache size must be an integer, got '{value}'") from None
        if size < 0:
            raise CacheConfigError(f"the local cache size must be >= 0, got {size}")
    if size is None:
        size = legacy_bytes
    return size


def _tensor_bytes(datatype: str, data: np.ndarray):
    """A contiguous buffer of a tensor's content (BYTES: Triton's
    length-prefixed serialization)."""
    if datatype == "BYTES":
        parts = []
        for item in data.reshape(-1):
            raw = item if isinstance(item, bytes) else str(item).encode()
            parts.append(_LEN.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)
    return data if data.flags.c_contiguous else np.ascontiguousarray(data)


class ServerResponseCache:
    """The server's cache: keys for requests, responses in and out."""

    def __init__(self, capacity: int):
        self._cache = ResponseCache(capacity)
        self.capacity = capacity

    def stats(self) -> dict:
        return self._cache.stats()

    def key(self, mv, request, arrays: dict) -> bytes:
        outputs = []
        for out in request.outputs:
            k = out.parameters.get("classification") if out.parameters else None
            outputs.append(out.name.encode() if k is None else f"{out.name}\0{k}".encode())
        inputs = []
        by_name = {t.name: t for t in request.inputs}
        for name in sorted(arrays):
            t = by_name[name]
            inputs.append((name.encode(), t.datatype.encode(), tuple(t.shape),
                           _tensor_bytes(t.datatype, t.data)))
        return request_key(mv.name.encode(), mv.version_str.encode(), outputs, inputs)

    def lookup(self, key: bytes, request) -> InferResponse | None:
        raw = self._cache.lookup(key)
        return None if raw is None else _decode(raw, request.id)

    def insert(self, key: bytes, response: InferResponse) -> bool:
        encoded = _encode(response)
        return encoded is not None and self._cache.insert(key, encoded)


def _encode(response: InferResponse) -> bytes | None:
    """header length, JSON header (model, version, parameters, outputs), then
    each output's bytes. None when an output cannot be stored (not on the
    host, or parameters that are not JSON)."""
    heads, blobs = [], []
    for t in response.outputs:
        data = t.data
        if not isinstance(data, np.ndarray):
            return None
        blob = _tensor_bytes(t.datatype, data)
        blob = blob if isinstance(blob, bytes) else blob.tobytes()
        heads.append({"name": t.name, "datatype": t.datatype, "shape": list(t.shape),
                      "parameters": t.parameters or {}, "size": len(blob)})
        blobs.append(blob)
    try:
        header = orjson.dumps({"model": response.model_name, "version": response.model_version,
                               "parameters": response.parameters or {}, "outputs": heads})
    except TypeError:
        return None
    return b"".join([_LEN.pack(len(header)), header, *blobs])


def _decode(raw: bytes, request_id: str) -> InferResponse:
    (n,) = _LEN.unpack_from(raw, 0)
    header = orjson.loads(raw[4:4 + n])
    offset = 4 + n
    tensors = []
    for h in header["outputs"]:
        size, datatype, shape = h["size"], h["datatype"], h["shape"]
        if datatype == "BYTES":
            items, pos, end = [], offset, offset + size
            while pos < end:
                (k,) = _LEN.unpack_from(raw, pos)
                items.append(raw[pos + 4:pos + 4 + k])
                pos += 4 + k
            data = np.empty(len(items), dtype=object)
            data[:] = items
            data = data.reshape(shape)
        else:
            data = np.frombuffer(raw, dtype=dtypes.WIRE_TO_NUMPY[datatype],
                                 count=int(np.prod(shape, dtype=np.int64)),
                                 offset=offset).reshape(shape)
        tensors.append(InferTensor(h["name"], datatype, shape, data, h["parameters"] or None))
        offset += size
    return InferResponse(header["model"], header["version"], request_id, tensors,
                         header["parameters"] or None)


def cache_usable(mv, cache: ServerResponseCache | None, composing: list = ()) -> bool:
    """Whether requests to this model version go through the cache (the
    server asks once per loaded version); logs why an enabled model's
    responses will not be cached. ``composing``: an ensemble's step models,
    which must all be cacheable kinds (not decoupled) for it to be cached."""
    config = mv.config
    if not (config.HasField("response_cache") and config.response_cache.enable):
        return False
    if cache is None:
        log.warning("model '%s' enables response_cache but the server has no cache "
                    "(--cache-config local,size=<bytes>): its responses are not cached", mv.name)
        return False
    if config.model_transaction_policy.decoupled:
        log.warning("model '%s': the response cache does not support decoupled models; "
                    "its responses are not cached", mv.name)
        return False
    for step in composing:
        if step.decoupled:
            log.warning("ensemble '%s': its step model '%s' is decoupled, which the response "
                        "cache does not support; its responses are not cached", mv.name, step.name)
            return False
    return True


def submit_cached(server, mv, request, cache: ServerResponseCache, run=None):
    """Server.submit for a model that uses the cache: a hit resolves at once
    without queueing; a miss is queued as usual (or handed to ``run(validated)``,
    an ensemble's steps) and its response stored when it succeeds. Validation
    errors raise here, as from Server.submit."""
    t0 = now_ns()
    validated = mv.validate(request)
    key = cache.key(mv, request, validated[0])
    hit = cache.lookup(key, request)
    lookup_ns = now_ns() - t0
    if hit is not None:
        mv.stats.record_cache_hit(lookup_ns, lookup_ns)
        future = server._loop.create_future()
        future.set_result(hit)
        return future
    future = server._enqueue(mv, request, validated) if run is None else run(validated)

    def store(f):
        if f.cancelled() or f.exception() is not None:
            return  # only successful responses are cached
        t = now_ns()
        cache.insert(key, f.result())
        mv.stats.record_cache_miss(lookup_ns + now_ns() - t)

    future.add_done_callback(store)
    return future
