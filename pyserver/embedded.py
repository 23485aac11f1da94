"""pyserver inside another program, with no network: a blocking API over a
Server whose event loop runs on a thread of its own.

From Python::

    with pyserver.EmbeddedServer("models/") as server:
        out = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})  # numpy arrays in and out

From C++, ``embed/pyserver_embed.h`` drives the same class through
pybind11's embedded interpreter (``infer_raw`` takes and returns raw bytes).
Requests go through the same schedulers, batching, caching and statistics
as network requests; the HTTP and gRPC frontends are not started.
"""

from __future__ import annotations

import numpy as np

from pyserver.kernel import dtypes
from pyserver.kernel.types import InferRequest, InferTensor, RequestedOutput

__all__ = ["EmbeddedServer"]


class EmbeddedServer:
    """Starts the server on construction (models loaded as with ``python -m
    pyserver``; keyword arguments are ``Server``'s) and stops it on
    ``close()`` or leaving a ``with`` block. Thread-safe: calls from several
    threads are batched together like concurrent network requests."""

    def __init__(self, model_repository, timeout_s: float = 300.0, **server_kwargs):
        from pyserver.inprocess.host import ServerHost
        from pyserver.server.server import Server

        self.server = Server(model_repository, **server_kwargs)
        self._host = ServerHost(self.server, timeout_s)
        self._host.start()
        self._closed = False

    def _call(self, coro):
        return self._host.call(coro)

    def _run(self, fn, *args):
        return self._host.run(fn, *args)

    # -- queries -------------------------------------------------------------

    def is_ready(self) -> bool:
        return self._run(self.server.is_ready)

    def model_ready(self, name: str, version: str = "") -> bool:
        return self._run(self.server.model_ready, name, version)

    def model_config(self, name: str, version: str = "") -> dict:
        return self._run(self.server.model_config, name, version)

    def statistics(self, name: str = "", version: str = "") -> dict:
        return self._run(self.server.statistics, name, version)

    # -- inference -----------------------------------------------------------

    def infer(self, model: str, inputs: dict, version: str = "",
              outputs: list[str] | None = None, parameters: dict | None = None) -> dict:
        """``inputs``: {name: numpy array} (object arrays of bytes for
        BYTES); returns {name: numpy array}. Raises ServerError with Triton's
        code and text."""
        tensors = [InferTensor(name, _wire_of(arr), list(arr.shape), arr)
                   for name, arr in ((n, np.asarray(a)) for n, a in inputs.items())]
        request = InferRequest(model, str(version or ""), "", tensors,
                               [RequestedOutput(n) for n in (outputs or [])], parameters or {})
        response = self._call(self.server.infer(request))
        return {t.name: t.data for t in response.outputs}

    def infer_raw(self, model: str, inputs: dict, version: str = "") -> dict:
        """For the C++ API: ``inputs`` {name: (datatype, shape, bytes)} (BYTES
        in Triton's length-prefixed serialization); the same back."""
        arrays = {}
        for name, (datatype, shape, raw) in inputs.items():
            if datatype == "BYTES":
                arrays[name] = dtypes.deserialize_bytes_tensor(raw).reshape(shape)
            else:
                npdt = dtypes.WIRE_TO_NUMPY.get(datatype)
                if npdt is None:
                    from pyserver.kernel.errors import invalid_arg
                    raise invalid_arg(f"invalid datatype for input {name}: {datatype}")
                arrays[name] = np.frombuffer(raw, dtype=npdt).reshape(shape)
        out = {}
        for name, arr in self.infer(model, arrays, version).items():
            datatype = _wire_of(arr)
            raw = dtypes.serialize_bytes_tensor(arr) if datatype == "BYTES" \
                else np.ascontiguousarray(arr).tobytes()
            out[name] = (datatype, [int(d) for d in arr.shape], raw)
        return out

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._host.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _wire_of(arr: np.ndarray) -> str:
    if arr.dtype.hasobject:
        return "BYTES"
    return dtypes.numpy_to_wire(arr.dtype)
