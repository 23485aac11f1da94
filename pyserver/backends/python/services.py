"""What a Python model asks of the server while it runs, server side: BLS
requests (``pb_utils.InferenceRequest(...).exec()``), custom metrics and
model control.

Messages arrive on a worker's control reader thread. Work that belongs to
the server (submitting a request, loading a model) is handed to the event
loop with ``call_soon_threadsafe``; the answer goes back on the control
channel as ``("reply", seq, payload, final)``. Tensors travel through the
worker's two asynchronous regions: a BLS request's inputs are read in place
from the region the worker writes (the worker frees them once the final
reply is in), its outputs are written into blocks of the region we write,
which the worker frees after copying them out.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging

from pyserver.backends.python import channel
from pyserver.kernel.dtypes import CODE_TO_NUMPY, CODE_TO_WIRE, WIRE_TO_CODE
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferTensor, RequestedOutput
from pyserver.runtime.custom_metrics import CustomMetricError

log = logging.getLogger("pyserver")


def _error_payload(err: BaseException) -> tuple:
    if isinstance(err, ServerError):
        return ("error", err.code.name, err.message)
    return ("error", "INTERNAL", f"{type(err).__name__}: {err}")


class Services:
    """The server-side answers to one Python model instance's requests."""

    def __init__(self, backend):
        self.backend = backend
        self._streams: dict = {}  # (worker, seq) -> ResponseStream of a decoupled BLS call

    def handle(self, worker, msg) -> None:
        kind = msg[0]
        if kind == "bls":
            self._bls(worker, msg)
        elif kind == "bls_cancel":
            try:
                context = self.backend.server_context()
            except ServerError:
                return
            context.loop.call_soon_threadsafe(self._bls_cancel, context.requests, worker, msg[1])
        elif kind == "metric":
            self._metric(worker, msg)
        elif kind == "model":
            self._model_control(worker, msg)

    # -- BLS -------------------------------------------------------------------------

    def _bls(self, worker, msg) -> None:
        _, seq, size, desc, encoded, decoupled = msg
        try:
            context = self.backend.server_context()
            arrays = channel.read_tensors(worker.up, size, encoded, CODE_TO_NUMPY, copy=False)
            inputs = []
            for name, code, shape, _start, _nbytes, _data in encoded:
                datatype = CODE_TO_WIRE.get(code)
                if datatype is None:
                    raise ServerError(Code.INVALID_ARG,
                                      f"BLS input '{name}' has an unknown data type {code}")
                inputs.append(InferTensor(name, datatype, shape, arrays[name]))
            request = bls_request(desc, inputs)
        except Exception as err:
            worker.reply(seq, _error_payload(err))
            return
        context.loop.call_soon_threadsafe(self._bls_submit, context.requests, worker, seq,
                                          request, decoupled)

    def _bls_submit(self, server, worker, seq, request, decoupled) -> None:
        """On the event loop: the request into the target model's scheduler."""
        name = request.model_name
        try:
            try:
                target_decoupled = server.is_decoupled(name, request.model_version)
                ready = server.model_ready(name, request.model_version)
            except ServerError:
                ready = False
            if not ready:
                raise ServerError(Code.INTERNAL, f"Failed for execute the inference request. "
                                                 f"Model '{name}' is not ready.")
            if target_decoupled and not decoupled:
                raise ServerError(
                    Code.INTERNAL,
                    f"Model {name} is using the decoupled. The current BLS request call doesn't "
                    "support models using the decoupled transaction policy. Please use "
                    "'decoupled=True' argument to the 'exec' or 'async_exec' calls for "
                    "decoupled models.'")
            if decoupled:
                self._streams[(worker, seq)] = server.submit_stream(
                    request, functools.partial(self._bls_stream, worker, seq))
            else:
                server.submit(request).add_done_callback(
                    functools.partial(self._bls_done, worker, seq))
        except Exception as err:
            worker.reply(seq, _error_payload(err))

    def _bls_done(self, worker, seq, future) -> None:
        try:
            if future.cancelled():
                raise ServerError(Code.CANCELLED, "the BLS request was cancelled")
            payload = self._response_payload(worker, future.result())
        except Exception as err:
            payload = ("bls", 0, None, None, _error_payload(err)[1:])
        worker.reply(seq, payload)

    def _bls_cancel(self, server, worker, seq) -> None:
        stream = self._streams.get((worker, seq))
        if stream is not None:
            server.cancel_stream(stream)

    def _bls_stream(self, worker, seq, response, error, final) -> None:
        if final:
            self._streams.pop((worker, seq), None)
        if error is not None:
            payload = ("bls", 0, None, None, _error_payload(error)[1:])
        elif response is not None:
            try:
                payload = self._response_payload(worker, response)
            except Exception as err:
                payload = ("bls", 0, None, None, _error_payload(err)[1:])
        else:
            payload = ("bls", 0, None, None, None)  # the final flag alone
        worker.reply(seq, payload, final)

    @staticmethod
    def _response_payload(worker, response) -> tuple:
        tensors = [(t.name, WIRE_TO_CODE.get(t.datatype, 0), t.data) for t in response.outputs]
        size, encoded = worker.write_tensors(tensors)
        return ("bls", size, encoded, response.parameters or None, None)

    # -- custom metrics ------------------------------------------------------------------

    def _metric(self, worker, msg) -> None:
        _, seq, op, args = msg
        try:
            metrics = self.backend.server_context().custom_metrics
            owner = id(self.backend)
            if op == "family":
                result = metrics.new_family(args[0], args[1], args[2], owner)
            elif op == "metric":
                result = metrics.new_metric(args[0], args[1], args[2], owner)
            else:
                result = metrics.operate(args[0], op, *args[1:])
            payload = ("ok", result)
        except CustomMetricError as err:
            payload = ("error", err.code, err.message)
        except Exception as err:
            payload = _error_payload(err)
        worker.reply(seq, payload)

    def release(self) -> None:
        """The instance is closing: the metrics it made go (unless shared)."""
        try:
            context = self.backend.server_context()
        except ServerError:
            return
        context.custom_metrics.drop_owner(id(self.backend))

    # -- model control --------------------------------------------------------------------

    def _model_control(self, worker, msg) -> None:
        """load_model / unload_model / is_model_ready, through the server's
        model manager on the event loop (load and unload need explicit
        model control, as over HTTP and gRPC)."""
        _, seq, op, args = msg
        try:
            context = self.backend.server_context()
        except ServerError as err:
            worker.reply(seq, _error_payload(err))
            return
        server = context.requests

        async def run():
            if op == "load":
                name, config, files = args
                await server.load_model(name, config=config or None, files=files or None)
                return None
            if op == "unload":
                name, unload_dependents = args
                await server.unload_model(name, unload_dependents=unload_dependents)
                return None
            if op == "ready":
                name, version = args
                return server.model_ready(name, version)
            raise ServerError(Code.INTERNAL, f"unknown model control operation '{op}'")

        def done(future):
            try:
                payload = ("ok", future.result())
            except Exception as err:
                payload = _error_payload(err)
            worker.reply(seq, payload)

        asyncio.run_coroutine_threadsafe(run(), context.loop).add_done_callback(done)


def bls_request(desc: dict, inputs: list) -> InferRequest:
    """The server's InferRequest for a BLS request's description."""
    try:
        params = json.loads(desc["parameters"] or "{}")
    except ValueError:
        raise ServerError(Code.INVALID_ARG, "BLS request parameters are not valid JSON") from None
    correlation_id = desc["correlation_id"]
    if correlation_id:
        params["sequence_id"] = correlation_id
    flags = int(desc["flags"] or 0)
    if flags & 1:
        params["sequence_start"] = True
    if flags & 2:
        params["sequence_end"] = True
    version = desc["model_version"]
    version = "" if version is None or int(version) < 0 else str(int(version))
    outputs = [RequestedOutput(name) for name in desc["outputs"]]
    return InferRequest(desc["model_name"], version, desc["request_id"] or "", inputs, outputs,
                        params, 0, int(desc["timeout"] or 0),
                        parent_trace=int(desc.get("trace") or 0))
