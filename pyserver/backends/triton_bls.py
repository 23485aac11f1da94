"""BLS from Triton C backends: where a backend's TRITONSERVER_ServerInferAsync
lands (csrc/src/triton_inference.cc, engine/triton_bls.pyx).

One ``BlsRouter`` per server, named to the backend as its
``TRITONSERVER_Server*`` (``server_handle(context)``). The engine calls it
from whichever thread the backend called from, holding the GIL; the request
goes to the server's event loop with ``call_soon_threadsafe`` and from there
through ``submit_stream``, the way the Python backend's BLS and network
requests go: same admission, schedulers, batching and statistics. Each
response comes back as ``call.respond(response, error, final)`` on the loop,
which only copies it out; the backend's callbacks run on the library's own
thread, never on the loop. TRITONSERVER_InferenceRequestCancel reaches
``cancel(token)``, which cancels the call's stream on the loop as the Python
backend's BLS cancels its own (Server.cancel_stream).
"""

from __future__ import annotations

import asyncio
import weakref

import numpy as np

from pyserver.engine import triton_bls
from pyserver.kernel.dtypes import CODE_TO_WIRE, WIRE_TO_NUMPY, config_to_wire
from pyserver.kernel.errors import Code, ServerError, not_running
from pyserver.kernel.types import InferRequest, InferTensor, RequestedOutput
from pyserver.runtime.tracing import release_unrecorded

_handles: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

_SEQUENCE_START, _SEQUENCE_END = 1, 2  # TRITONSERVER_REQUEST_FLAG_*


def server_handle(context):
    """The engine's ServerHandle for the server of ``context`` (one per
    server), or None outside a server."""
    server = getattr(context, "requests", None) if context is not None else None
    if server is None:
        return None
    handle = _handles.get(server)
    if handle is None:
        handle = _handles[server] = triton_bls.ServerHandle(BlsRouter(server, context.loop))
    return handle


def version_string(version: int) -> str:
    """A C API model version (-1 or 0: the one the model's version policy
    picks) as the server's version string. For the server calls of a
    program too (inprocess/c_api.py)."""
    return str(version) if version > 0 else ""


class BlsRouter:
    """One server's answers to its C backends' BLS calls (any thread)."""

    def __init__(self, server, loop):
        self._server = weakref.ref(server)  # the models hold the router, not the server
        self._loop = loop
        self._streams: dict[int, object] = {}  # call token -> its stream, until final (loop)

    def _live(self):
        server = self._server()
        if server is None or self._loop is None or self._loop.is_closed():
            raise not_running()
        return server

    def model_info(self, name: str, version: int) -> tuple[bool, bool]:
        """(ready, decoupled); Triton's "unknown model" error if there is none.
        Reads the server's tables only (safe off the loop under the GIL)."""
        server = self._live()
        decoupled = server.is_decoupled(name, version_string(version))
        return server.model_ready(name, version_string(version)), bool(decoupled)

    def load_model(self, name: str, parameters: dict) -> None:
        """TRITONSERVER_ServerLoadModelWithParameters: returns once the model
        is loaded (its error if it failed). Blocks its caller, a backend's
        thread, never the event loop."""
        config, files = None, None
        for key, value in parameters.items():
            if key == "config" and isinstance(value, str):
                config = value
            elif key.startswith("file:") and isinstance(value, bytes):
                files = files or {}
                files[key[5:]] = value
            elif key == "config" or key.startswith("file:"):
                raise ServerError(Code.INVALID_ARG, f"invalid value type for load parameter "
                                                    f"'{key}', expected "
                                                    + ("string" if key == "config" else "bytes"))
            else:
                raise ServerError(Code.INVALID_ARG, f"Unrecognized load parameter '{key}'.")
        server = self._live()
        self._run(server.load_model(name, config=config, files=files))

    def unload_model(self, name: str, unload_dependents: bool) -> None:
        """TRITONSERVER_ServerUnloadModel(AndDependents), as load_model."""
        server = self._live()
        self._run(server.unload_model(name, unload_dependents=unload_dependents))

    def _run(self, coroutine) -> None:
        if self._loop_thread_is_current():
            coroutine.close()
            raise ServerError(Code.INTERNAL, "a model cannot be loaded or unloaded from the "
                                             "server's event loop thread")
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _loop_thread_is_current(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def submit(self, description: dict, call) -> None:
        loop = self._loop
        self._live()
        loop.call_soon_threadsafe(self._submit, description, call)

    def _submit(self, description: dict, call) -> None:
        """On the event loop: into the target model, as a network request."""
        token = call.token
        streams = self._streams
        ended = False

        def on_response(response, error, final):
            nonlocal ended
            if final:
                ended = True
                streams.pop(token, None)
            call.respond(response, error, final)

        program = description["program_trace"]  # a program's own trace, or None
        tracer = None
        try:
            server = self._live()
            request = self._request(server, description)
            if program is not None:
                tracer = server.tracer
                tracer.program_begun()
            stream = server.submit_stream(request, on_response)
        except Exception as err:  # admission and validation errors: the response's
            call.respond(None, err, True)
            return
        finally:  # a trace the server made no record for goes back to its program now
            if tracer is not None:
                tracer.program_settled(program)
            elif program is not None:
                release_unrecorded(program)
        if not ended:
            streams[token] = stream

    def cancel(self, token: int) -> None:
        """TRITONSERVER_InferenceRequestCancel of a submitted call (any
        thread): on the loop, after the submit it follows."""
        self._loop.call_soon_threadsafe(self._cancel, token)

    def _cancel(self, token: int) -> None:
        stream = self._streams.get(token)
        server = self._server()
        if stream is not None and server is not None:
            # queued: it ends now with CANCELLED; running: its model sees it
            # cancelled, and what it still sends is delivered up to the final
            server.cancel_stream(stream)

    @staticmethod
    def _request(server, d: dict) -> InferRequest:
        params = dict(d["parameters"])
        if d["correlation_id"]:
            params["sequence_id"] = d["correlation_id"]
        if d["flags"] & _SEQUENCE_START:
            params["sequence_start"] = True
        if d["flags"] & _SEQUENCE_END:
            params["sequence_end"] = True
        inputs = []
        for name, code, raw, array in d["inputs"]:
            if raw:
                inputs.append(_raw_input(server, d, name, array))
                continue
            datatype = CODE_TO_WIRE.get(code)
            if datatype is None:
                raise ServerError(Code.INVALID_ARG,
                                  f"input '{name}' has an unknown data type {code}")
            inputs.append(InferTensor(name, datatype, array.shape, array))
        outputs = [RequestedOutput(name) for name in d["outputs"]]
        # traced only under the trace the backend passed (a child it
        # spawned), or as the program's own trace
        return InferRequest(d["model_name"], version_string(d["model_version"]), d["id"], inputs,
                            outputs, params, d["priority"], d["timeout_us"],
                            parent_trace=d["program_trace"] or d["trace"])


def _raw_input(server, d: dict, name: str, data):
    """A raw input (TRITONSERVER_InferenceRequestAddRawInput): the model's
    only input, its datatype from the config, its bytes one flat tensor."""
    config = server.model_config(d["model_name"], version_string(d["model_version"]))
    inputs = config.get("input") or []
    wire = next((config_to_wire(i["data_type"]) for i in inputs if i.get("name") == name), None)
    if wire is None or wire == "BYTES":
        raise ServerError(Code.UNSUPPORTED, f"raw input '{name}' needs a fixed-size datatype")
    array = np.frombuffer(data, dtype=WIRE_TO_NUMPY[wire])
    shape = [1, array.size] if config.get("max_batch_size", 0) > 0 else [array.size]
    return InferTensor(name, wire, shape, array.reshape(shape))
