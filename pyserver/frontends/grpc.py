"""gRPC frontend: Triton's ``inference.GRPCInferenceService`` and
``grpc.health.v1.Health`` on prior-knowledge h2c, served natively.

HTTP/2 and gRPC's message framing are handled in native code
(``pyserver.engine.protocol.http2``, nghttp2) driven from the event loop that also
runs the HTTP/1.1 frontend, not by grpcio's server (which costs ~300 µs of
Python per call). ``ModelInfer`` and ``ModelStreamInfer`` messages are
decoded and encoded by ``pyserver.engine.protocol.grpc_codec`` (C++ over the wire
bytes, tensors as views); the other RPCs are rare and use protobuf messages
from our private descriptor pool.

Per unary infer call the Python thread sees one handler call (decode,
``server.submit``) and one done-callback (encode, respond). Errors go out as
trailers, ``grpc-status`` plus a percent-encoded ``grpc-message``; a
``ServerError`` keeps its Triton code (``ServerError.grpc_status``). Streams
(``ModelStreamInfer``) report per-request errors in-stream, in
``error_message``, and stay open.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import types

import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from pyserver._proto import message_class
from pyserver.engine import now_ns
from pyserver.engine.protocol.grpc_statistics import encode_model_statistics
from pyserver.engine.protocol.shared_memory import SharedMemoryUse
from pyserver.frontends.grpc_keepalive import ConnectionKeepalive, KeepaliveOptions
from pyserver.frontends.header_forward import HeaderForwarder
from pyserver.frontends.listener import listen
from pyserver.frontends.restricted import parse_restricted
from pyserver.kernel.dtypes import WIRE_TO_NUMPY
from pyserver.kernel.errors import (
    Code,
    GrpcStatus,
    ServerError,
    request_prefix,
    unknown_load_parameter,
)
from pyserver.kernel.flags import bool_word
from pyserver.kernel.types import InferResponse

try:
    from pyserver.engine.protocol import http2
    from pyserver.engine.protocol.grpc_codec import (
        InferHandler,
        encode_stream_response,
    )
except ImportError as _err:  # built without nghttp2 (libnghttp2-dev)
    http2 = None
    _IMPORT_ERROR = _err

__all__ = ["GrpcFrontend", "PROTOCOL_GROUPS", "parse_restricted_protocols"]

log = logging.getLogger("pyserver")

OK = GrpcStatus.OK
CANCELLED = GrpcStatus.CANCELLED
DEADLINE_EXCEEDED = GrpcStatus.DEADLINE_EXCEEDED
INTERNAL = GrpcStatus.INTERNAL
UNAVAILABLE = GrpcStatus.UNAVAILABLE

_SERVICE = "/inference.GRPCInferenceService/"
_HEALTH = "/grpc.health.v1.Health/Check"

# Triton's --grpc-restricted-protocol groups and the RPCs in each.
PROTOCOL_GROUPS = {
    "health": ("ServerLive", "ServerReady", "ModelReady", "Check"),
    "metadata": ("ServerMetadata", "ModelMetadata"),
    "inference": ("ModelInfer", "ModelStreamInfer"),
    "shared-memory": ("SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
                      "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus",
                      "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister"),
    "model-config": ("ModelConfig",),
    "model-repository": ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
    "statistics": ("ModelStatistics",),
    "trace": ("TraceSetting",),
    "logging": ("LogSettings",),
}
_GROUP_OF = {rpc: group for group, rpcs in PROTOCOL_GROUPS.items() for rpc in rpcs}
# grpc_server.h kRestrictedProtocolHeaderTemplate: what the flag's key becomes
RESTRICTED_HEADER_PREFIX = "triton-grpc-protocol-"

# Triton's gRPC server accepts messages up to INT32_MAX bytes.
DEFAULT_MAX_MESSAGE_SIZE = (1 << 31) - 1


def _m(name: str):
    return message_class(name)


def parse_restricted_protocols(specs) -> dict:
    """``["<protocol>[,<protocol>...]:<key>=<value>", ...]`` (the CLI flag's
    form) or ``{protocol: (key, value)}`` -> ``{protocol: (key, value)}``."""
    if isinstance(specs, dict):
        out = {}
        for group, kv in specs.items():
            if group not in PROTOCOL_GROUPS:
                raise ValueError(f"unknown restricted protocol '{group}'")
            key, value = kv
            out[group] = (str(key), str(value))
        return out
    return parse_restricted(specs, "--grpc-restricted-protocol", "protocol", PROTOCOL_GROUPS,
                            RESTRICTED_HEADER_PREFIX)


# ---------------------------------------------------------------- typed contents

# Which InferTensorContents field carries each datatype (Triton's
# InferGRPCToInput); int_contents / uint_contents also carry the 8 and 16
# bit types, one element per 32-bit value.
_FIELD_TYPES = (
    ("bool_contents", lambda dt: "BOOL"),
    ("int_contents", lambda dt: dt if dt in ("INT8", "INT16") else "INT32"),
    ("int64_contents", lambda dt: "INT64"),
    ("uint_contents", lambda dt: dt if dt in ("UINT8", "UINT16") else "UINT32"),
    ("uint64_contents", lambda dt: "UINT64"),
    ("fp32_contents", lambda dt: "FP32"),
    ("fp64_contents", lambda dt: "FP64"),
    ("bytes_contents", lambda dt: "BYTES"),
)
_INFER_TENSOR_CONTENTS = None


def decode_contents(name, datatype, shape, contents, model_name, request_id):
    """An input tensor from typed ``contents`` (Triton's rules and texts)."""
    global _INFER_TENSOR_CONTENTS
    if _INFER_TENSOR_CONTENTS is None:
        _INFER_TENSOR_CONTENTS = _m("inference.InferTensorContents")
    try:
        msg = _INFER_TENSOR_CONTENTS.FromString(contents)
    except DecodeError:
        raise ServerError(Code.INVALID_ARG,
                          f"failed to parse contents of input '{name}'") from None
    values = None
    for field, type_of in _FIELD_TYPES:
        items = getattr(msg, field)
        if not len(items):
            continue
        tensor_type = type_of(datatype)
        if values is not None:
            raise ServerError(
                Code.INVALID_ARG,
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model_name}', binary data was already supplied.")
        if tensor_type != datatype:
            raise ServerError(
                Code.INVALID_ARG,
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model_name}' of type '{tensor_type}', expected datatype '{datatype}'")
        values = items
    for d in shape:
        if d < 0:
            raise ServerError(Code.INVALID_ARG,
                              f"{request_prefix(request_id)}unexpected shape for input '{name}' for model "
                              f"'{model_name}': dimension {d} is negative")
    count = 1
    for d in shape:
        count *= d
    npdt = WIRE_TO_NUMPY.get(datatype)
    if npdt is None:
        raise ServerError(Code.INVALID_ARG, f"invalid datatype for input {name}")
    got = 0 if values is None else len(values)
    if datatype == "BYTES":
        if got != count:
            if got < count:
                msg_text = (f"{request_prefix(request_id)}expected {count} string elements for inference "
                            f"input '{name}' for model '{model_name}', got {got}")
            else:
                msg_text = (f"{request_prefix(request_id)}unexpected number of string elements "
                            f"{count + 1} for inference input '{name}' for model "
                            f"'{model_name}', expecting {count}")
            raise ServerError(Code.INVALID_ARG, msg_text)
        arr = np.empty(count, dtype=np.object_)
        if count:
            arr[:] = [bytes(v) for v in values]
        return arr.reshape(shape)
    if got != count:
        raise ServerError(
            Code.INVALID_ARG,
            f"{request_prefix(request_id)}input byte size mismatch for input '{name}' for model "
            f"'{model_name}'. Expected {count * npdt.itemsize}, got {got * npdt.itemsize}")
    if values is None:
        return np.empty(shape, npdt)
    if datatype in ("INT8", "INT16", "UINT8", "UINT16"):
        # the low bytes of each 32-bit value, as Triton takes them
        wide = np.array(values, dtype=np.int64 if datatype[0] == "I" else np.uint64)
        return wide.astype(npdt).reshape(shape)
    return np.array(values, dtype=npdt).reshape(shape)


# ---------------------------------------------------------------- shared memory


def _int_param(params: dict, key: str, default: int = 0) -> int:
    value = params.get(key, default)
    if type(value) is not int:
        raise ServerError(Code.INVALID_ARG, f"invalid value type for '{key}' parameter, "
                                            "expected int64_param.")
    return value


def _resolve_shared_memory(manager, request) -> SharedMemoryUse | None:
    use = None
    try:
        for t in request.inputs:
            if t.data is not None or not t.parameters:
                continue
            region = t.parameters.get("shared_memory_region")
            if region is None:
                continue
            if use is None:
                use = SharedMemoryUse()
            size = _int_param(t.parameters, "shared_memory_byte_size")
            offset = _int_param(t.parameters, "shared_memory_offset")
            arr, lease = manager.input_array(
                region, offset, size, t.datatype, t.shape, input_name=t.name,
                model_name=request.model_name, request_id=request.id)
            use.leases.append(lease)
            t.data = arr
        for out in request.outputs:
            region = out.parameters.get("shared_memory_region") if out.parameters else None
            if region is None:
                continue
            if "classification" in out.parameters:
                raise ServerError(Code.INVALID_ARG,
                                  "Output can't set both 'shared_memory_region' and "
                                  "'classification'")
            if use is None:
                use = SharedMemoryUse()
            size = _int_param(out.parameters, "shared_memory_byte_size")
            offset = _int_param(out.parameters, "shared_memory_offset")
            lease = manager.output_writer(region, offset, size)
            use.leases.append(lease)
            use.outputs[out.name] = lease
    except BaseException:
        if use is not None:
            use.release()
        raise
    return use


# ---------------------------------------------------------------- streams


class _StreamCall:
    """State of one ModelStreamInfer call: requests in flight, and whether
    the client has half-closed (then the call ends with the last response)."""

    __slots__ = ("pending", "closing", "futures", "last_read_ns")

    def __init__(self):
        self.pending = 0
        self.closing = False
        self.futures = set()
        # when the last message was read: the next one's GRPC_WAITREAD_START
        # (the stream's opening for the first), taken while tracing is on
        self.last_read_ns = 0

    def cancel_all(self, server):
        for fut in list(self.futures):
            server.cancel(fut)  # queued work leaves the queue too


# ---------------------------------------------------------------- frontend


class GrpcFrontend:
    """Triton-compatible gRPC endpoint on ``host:port`` (port 0: a free port).

    ``restricted_protocols``: ``{group: (header, value)}`` or the CLI's
    ``["<group>,...:<key>=<value>"]``; calls in a restricted group need that
    request header (else UNAVAILABLE, as Triton answers).
    ``header_forward_pattern`` (``--grpc-header-forward-pattern``): infer
    calls get the metadata it matches as string parameters. ``keepalive``:
    PING and connection-age settings (grpc_keepalive.py; Triton's defaults
    when None). ``max_response_pool_size`` (``--grpc-max-response-pool-size``,
    0: no bound): how many responses of one ModelStreamInfer request may be
    written but not yet taken by the connection; a decoupled model sending
    more waits for the client (ResponseWindow), as in Triton.
    """

    def __init__(self, server, host: str = "0.0.0.0", port: int = 8001, *,
                 restricted_protocols=None, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 max_concurrent_streams: int = 1000, backlog: int = 1024,
                 reuse_port: bool = False, ssl_context=None, response_compression: int = 0,
                 header_forward_pattern: str = "", keepalive: KeepaliveOptions | None = None,
                 max_response_pool_size: int = 0, io_threads: int = 0):
        if http2 is None:
            raise RuntimeError(
                "pyserver was built without nghttp2, so gRPC is unavailable: install "
                f"libnghttp2-dev and reinstall pyserver ({_IMPORT_ERROR})")
        self._server = server
        self._tracer = getattr(server, "tracer", None)
        self.host = host
        self.port = port
        self.max_message_size = int(max_message_size)
        self.max_concurrent_streams = int(max_concurrent_streams)
        self._restricted = parse_restricted_protocols(restricted_protocols or {})
        self._backlog = backlog
        self._reuse_port = reuse_port
        self._ssl = ssl_context  # an ssl.SSLContext offering ALPN h2, or None for h2c
        self._response_compression = int(response_compression)
        # --grpc-header-forward-pattern: matching metadata become request parameters
        self._forwarder = HeaderForwarder(header_forward_pattern, "--grpc-header-forward-pattern") \
            if header_forward_pattern else None
        self._keepalive = keepalive or KeepaliveOptions()
        self._response_window = int(max_response_pool_size)
        # --grpc-infer-thread-count: the socket pump's threads (listener.py)
        self.io_threads = int(io_threads)
        self._listener = None
        self._closing_listener = None
        self._loop = None
        self._connections: set = set()
        self._all_closed: asyncio.Event | None = None
        self._infer = None  # the InferHandler both infer calls decode with (start())
        self._routes = self._build_routes()

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        server = self._server
        infer = self._infer = InferHandler(
            server.submitter, self._loop, contents_decoder=decode_contents,
            shm_resolver=lambda request: _resolve_shared_memory(server.shared_memory, request),
            on_error=_finish_error, on_deadline=self._deadline_expired,
            canceller=server.cancel,
            header_forwarder=self._forwarder.forward if self._forwarder is not None else None,
            tracer=self._tracer,
            # forwarded headers become request parameters: those go the general way
            admission=getattr(server, "admission", None) if self._forwarder is None else None)
        self._routes[(_SERVICE + "ModelInfer").encode()] = (
            http2.UNARY, self._guarded(infer, "inference"))
        routes = self._routes
        capture = bool(self._restricted) or self._forwarder is not None
        max_message = self.max_message_size
        max_streams = self.max_concurrent_streams
        Connection = http2.Connection
        on_close = self._connection_closed
        compression = self._response_compression
        keepalive = self._keepalive
        connections = self._connections
        loop = self._loop
        # The answers of one turn of the loop: one write per connection
        # (PYSERVER_GRPC_WRITE_BATCH=0, the alternative bench/perf_analyzer.py
        # measures it against: one write per answer).
        write_batch = None
        if bool_word(os.environ.get("PYSERVER_GRPC_WRITE_BATCH", "1")) is not False:
            write_batch = http2.WriteBatch(loop)

        def on_open(conn):
            connections.add(conn)
            conn.keepalive.start(loop)

        def factory():
            conn = Connection(routes, max_message_size=max_message, capture_headers=capture,
                              max_concurrent_streams=max_streams, on_open=on_open,
                              on_close=on_close, response_compression=compression)
            conn.keepalive = ConnectionKeepalive(conn, keepalive)
            conn.write_batch = write_batch
            return conn

        self._listener = await listen(factory, self.host, self.port, backlog=self._backlog,
                                      reuse_port=self._reuse_port, ssl=self._ssl,
                                      io_threads=self.io_threads)
        sockets = self._listener.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]

    def begin_shutdown(self) -> None:
        """Stops accepting connections and sends every client GOAWAY: calls
        already started run to their end, new ones go elsewhere. ``stop()``
        then waits for them and closes."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
            self._closing_listener = listener
        for conn in list(self._connections):
            conn.shutdown()

    async def stop(self, timeout: float = 30.0) -> None:
        """GOAWAY to every client: calls in flight finish (up to timeout s),
        no new ones start; then every connection closes."""
        self.begin_shutdown()
        listener, self._closing_listener = self._closing_listener, None
        if self._connections:
            self._all_closed = asyncio.Event()
            deadline = asyncio.get_running_loop().time() + timeout
            # A connection whose calls have all ended is closed by us (its
            # answers written first): a client may keep one open after GOAWAY.
            while self._connections:
                for conn in list(self._connections):
                    if conn.open_streams == 0:
                        conn.close()
                left = deadline - asyncio.get_running_loop().time()
                if not self._connections or left <= 0:
                    break
                try:
                    await asyncio.wait_for(self._all_closed.wait(), min(left, 0.05))
                except asyncio.TimeoutError:
                    pass
            if self._connections:
                log.warning("gRPC: %d connections still busy after %.1f s; closing them",
                            len(self._connections), timeout)
            for conn in list(self._connections):
                conn.close()
            self._connections.clear()
        if listener is not None:
            await listener.wait_closed()

    def _connection_closed(self, conn):
        self._connections.discard(conn)
        if not self._connections and self._all_closed is not None:
            self._all_closed.set()

    # -- routing ------------------------------------------------------------------

    def _build_routes(self) -> dict:
        unary, streaming = http2.UNARY, http2.STREAMING
        simple = {
            "ServerLive": ("inference.ServerLiveRequest", self._server_live),
            "ServerReady": ("inference.ServerReadyRequest", self._server_ready),
            "ModelReady": ("inference.ModelReadyRequest", self._model_ready),
            "ServerMetadata": ("inference.ServerMetadataRequest", self._server_metadata),
            "ModelMetadata": ("inference.ModelMetadataRequest", self._model_metadata),
            "ModelConfig": ("inference.ModelConfigRequest", self._model_config),
            "ModelStatistics": ("inference.ModelStatisticsRequest", self._model_statistics),
            "RepositoryIndex": ("inference.RepositoryIndexRequest", self._repository_index),
            "RepositoryModelLoad": ("inference.RepositoryModelLoadRequest", self._model_load),
            "RepositoryModelUnload": ("inference.RepositoryModelUnloadRequest",
                                      self._model_unload),
            "SystemSharedMemoryStatus": ("inference.SystemSharedMemoryStatusRequest",
                                         self._system_shm_status),
            "SystemSharedMemoryRegister": ("inference.SystemSharedMemoryRegisterRequest",
                                           self._system_shm_register),
            "SystemSharedMemoryUnregister": ("inference.SystemSharedMemoryUnregisterRequest",
                                             self._system_shm_unregister),
            "CudaSharedMemoryStatus": ("inference.CudaSharedMemoryStatusRequest",
                                       self._cuda_shm_status),
            "CudaSharedMemoryRegister": ("inference.CudaSharedMemoryRegisterRequest",
                                         self._cuda_shm_register),
            "CudaSharedMemoryUnregister": ("inference.CudaSharedMemoryUnregisterRequest",
                                           self._cuda_shm_unregister),
            "TraceSetting": ("inference.TraceSettingRequest", self._trace_setting),
            "LogSettings": ("inference.LogSettingsRequest", self._log_settings),
        }
        routes = {}
        for rpc, (request_type, fn) in simple.items():
            routes[(_SERVICE + rpc).encode()] = (unary, self._unary(rpc, _m(request_type), fn))
        routes[_HEALTH.encode()] = (unary, self._unary(
            "Check", _m("grpc.health.v1.HealthCheckRequest"), self._health_check))
        # ModelInfer's handler needs the running loop: added by start().
        # A restricted stream is refused as it opens, before any message, as
        # Triton refuses it: the client finds the stream ended at once.
        stream_route = (streaming, self._stream_infer)
        if "inference" in self._restricted:
            stream_route += (functools.partial(self._denied, group="inference"),)
        routes[(_SERVICE + "ModelStreamInfer").encode()] = stream_route
        return routes

    def _denied(self, stream, group: str) -> bool:
        rule = self._restricted.get(group)
        if rule is None:
            return False
        key, value = rule
        got = stream.header(key.lower().encode("latin-1"))
        if got is not None and got.decode("latin-1") == value:
            return False
        stream.finish(UNAVAILABLE, f"This protocol is restricted, expecting header '{key}'")
        return True

    def _guarded(self, handler, group: str):
        if group not in self._restricted:
            return handler

        def guarded(stream, msg):
            if self._denied(stream, group):
                return None
            return handler(stream, msg)

        return guarded

    def _unary(self, rpc: str, request_class, fn):
        """The handler of a unary call: ``fn(request)`` gives the response
        message, its wire bytes, or an awaitable of the message."""
        group = _GROUP_OF[rpc]
        frontend = self

        def handler(stream, msg):
            if group in frontend._restricted and frontend._denied(stream, group):
                return
            try:
                request = request_class.FromString(msg)
            except DecodeError as e:
                stream.finish(GrpcStatus.INVALID_ARGUMENT,
                              f"failed to parse the {rpc} request: {e}")
                return
            try:
                result = fn(request)
            except Exception as e:
                _finish_error(stream, e)
                return
            if asyncio.iscoroutine(result):
                task = asyncio.ensure_future(result)
                stream.cancel_callback = task.cancel
                task.add_done_callback(functools.partial(_unary_task_done, stream))
                return
            stream.respond(result if type(result) is bytes else result.SerializeToString())

        return handler

    # -- infer ------------------------------------------------------------------------

    def _stream_infer(self, stream, msg):
        """One ModelStreamInfer message: decoded as ModelInfer's are
        (InferHandler.prepare), submitted once as a stream whatever the
        model (one response for most, 0..N for a decoupled one), every
        response encoded as it comes by the same codec."""
        call = stream.data
        if call is None:
            call = stream.data = _StreamCall()
            stream.cancel_callback = functools.partial(call.cancel_all, self._server)
        if msg is None:  # the client half-closed: end once every response is out
            call.closing = True
            if call.pending == 0:
                stream.finish(OK)
            return
        request = None
        use = None
        try:
            request, flags, use = self._infer.prepare(stream, msg)
            empty_final = bool(flags and flags.get("triton_enable_empty_final_response"))
            tracer = self._tracer
            if tracer is not None and tracer.active:
                read = now_ns()
                tracer.frontend_received(request, "GRPC_WAITREAD_START",
                                         call.last_read_ns or stream.opened_ns,
                                         "GRPC_WAITREAD_END", read)
                call.last_read_ns = read
            reply = _StreamReply(stream, call, request, empty_final, use, tracer)
            reply.handle = self._server.submit_stream(request, reply, self._response_window)
        except Exception as e:
            if use is not None:
                use.release()
            if request is None:
                request = _request_id_only(msg)
            message = e.message if isinstance(e, ServerError) else f"{type(e).__name__}: {e}"
            if not isinstance(e, ServerError):
                log.exception("gRPC ModelStreamInfer request failed")
            stream.send_message(encode_stream_response(None, request, message), True)
            return
        call.pending += 1
        call.futures.add(reply.handle)

    def _deadline_expired(self, stream, fut):
        stream.finish(DEADLINE_EXCEEDED, "Deadline Exceeded")
        self._server.cancel(fut)  # removes the request if still queued

    # -- the other RPCs ---------------------------------------------------------------

    def _server_live(self, req):
        return _m("inference.ServerLiveResponse")(live=self._server.is_live())

    def _server_ready(self, req):
        return _m("inference.ServerReadyResponse")(ready=self._server.is_ready())

    def _health_check(self, req):
        cls = _m("grpc.health.v1.HealthCheckResponse")
        return cls(status=1 if self._server.is_ready() else 2)  # SERVING / NOT_SERVING

    def _model_ready(self, req):
        try:
            ready = self._server.model_ready_check(req.name, req.version)
        except ServerError:
            ready = False  # an unknown model is simply not ready
        if asyncio.iscoroutine(ready):
            return self._model_ready_later(ready)
        return _m("inference.ModelReadyResponse")(ready=bool(ready))

    @staticmethod
    async def _model_ready_later(check):
        """ModelReady for a model whose own is_ready() is asked."""
        try:
            ready = bool(await check)
        except Exception:
            ready = False
        return _m("inference.ModelReadyResponse")(ready=ready)

    def _server_metadata(self, req):
        md = self._server.metadata()
        return _m("inference.ServerMetadataResponse")(
            name=md.get("name", ""), version=md.get("version", ""),
            extensions=list(md.get("extensions", ())))

    def _model_metadata(self, req):
        md = self._server.model_metadata(req.name, req.version)
        return json_format.ParseDict(md, _m("inference.ModelMetadataResponse")(),
                                     ignore_unknown_fields=True)

    def _model_config(self, req):
        cfg = self._server.model_config(req.name, req.version)
        resp = _m("inference.ModelConfigResponse")()
        json_format.ParseDict(cfg, resp.config, ignore_unknown_fields=True)
        return resp

    def _model_statistics(self, req):
        # Written straight to the wire: a decoupled model's statistics hold
        # an entry per response index (engine/protocol/grpc_statistics.pyx).
        return encode_model_statistics(self._server.statistics(req.name, req.version))

    def _repository_index(self, req):
        if req.repository_name:
            raise ServerError(Code.UNSUPPORTED,
                              "'repository_name' specification is not supported")
        rows = self._server.repository_index(req.ready)
        resp = _m("inference.RepositoryIndexResponse")()
        for row in rows:
            resp.models.add(name=str(row.get("name", "")), version=str(row.get("version", "")),
                            state=str(row.get("state", "")), reason=str(row.get("reason", "")))
        return resp

    async def _model_load(self, req):
        if req.repository_name:
            raise ServerError(Code.UNSUPPORTED,
                              "'repository_name' specification is not supported")
        config = None
        files = None
        for key, param in req.parameters.items():
            kind = param.WhichOneof("parameter_choice")
            if key == "config":
                if kind != "string_param":
                    raise ServerError(Code.INVALID_ARG,
                                      "invalid value type for load parameter 'config', "
                                      "expected string_param.")
                config = param.string_param
            elif key.startswith("file:"):
                if kind != "bytes_param":
                    raise ServerError(Code.INVALID_ARG,
                                      f"invalid value type for load parameter '{key}', "
                                      "expected bytes_param.")
                if files is None:
                    files = {}
                files[key[5:]] = param.bytes_param
            else:
                raise unknown_load_parameter(key)
        await self._server.load_model(req.model_name, config=config, files=files)
        return _m("inference.RepositoryModelLoadResponse")()

    async def _model_unload(self, req):
        if req.repository_name:
            raise ServerError(Code.UNSUPPORTED,
                              "'repository_name' specification is not supported")
        dependents = False
        if "unload_dependents" in req.parameters:
            param = req.parameters["unload_dependents"]
            if param.WhichOneof("parameter_choice") != "bool_param":
                raise ServerError(Code.INVALID_ARG,
                                  "invalid value type for unload parameter 'unload_dependents', "
                                  "expected bool_param.")
            dependents = param.bool_param
        await self._server.unload_model(req.model_name, unload_dependents=dependents)
        return _m("inference.RepositoryModelUnloadResponse")()

    def _system_shm_status(self, req):
        resp = _m("inference.SystemSharedMemoryStatusResponse")()
        for r in self._server.shared_memory.status(req.name or None, kind="system"):
            region = resp.regions[r["name"]]
            region.name = r["name"]
            region.key = r["key"]
            region.offset = int(r["offset"])
            region.byte_size = int(r["byte_size"])
        return resp

    def _system_shm_register(self, req):
        self._server.shared_memory.register_system(req.name, req.key, req.offset, req.byte_size)
        return _m("inference.SystemSharedMemoryRegisterResponse")()

    def _system_shm_unregister(self, req):
        self._server.shared_memory.unregister(req.name or None, kind="system")
        return _m("inference.SystemSharedMemoryUnregisterResponse")()

    def _cuda_shm_status(self, req):
        resp = _m("inference.CudaSharedMemoryStatusResponse")()
        for r in self._server.shared_memory.status(req.name or None, kind="cuda"):
            region = resp.regions[r["name"]]
            region.name = r["name"]
            region.device_id = int(r["device_id"])
            region.byte_size = int(r["byte_size"])
        return resp

    def _cuda_shm_register(self, req):
        self._server.shared_memory.register_cuda(req.name, req.raw_handle, req.device_id,
                                                 req.byte_size)
        return _m("inference.CudaSharedMemoryRegisterResponse")()

    def _cuda_shm_unregister(self, req):
        self._server.shared_memory.unregister(req.name or None, kind="cuda")
        return _m("inference.CudaSharedMemoryUnregisterResponse")()

    def _trace_setting(self, req):
        update = {}
        for key, setting in req.settings.items():
            values = list(setting.value)
            if not values:
                update[key] = None  # clear: back to the global value
            elif key == "trace_level":
                update[key] = values
            else:
                update[key] = values[0]
        settings = self._server.trace_settings(req.model_name or None, update or None,
                                               network=True)
        resp = _m("inference.TraceSettingResponse")()
        for key, value in settings.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            resp.settings[key].value.extend(str(v) for v in values)
        return resp

    def _log_settings(self, req):
        update = {}
        for key, setting in req.settings.items():
            kind = setting.WhichOneof("parameter_choice")
            expected = _LOG_SETTING_KINDS.get(key)
            if expected is None:
                continue  # not a setting Triton reads: passed over, as there
            if kind != expected[0]:
                raise ServerError(Code.INVALID_ARG, f"expect {expected[1]} for '{key}'")
            update[key] = getattr(setting, kind)
        settings = self._server.log_settings(update or None, network=True)
        resp = _m("inference.LogSettingsResponse")()
        for key, value in settings.items():
            slot = resp.settings[key]
            if isinstance(value, bool):
                slot.bool_param = value
            elif isinstance(value, int):
                slot.uint32_param = value
            else:
                slot.string_param = str(value)
        return resp


# ---------------------------------------------------------------- completion paths


# The value each log setting must carry over gRPC, and Triton's word for it.
_LOG_SETTING_KINDS = {
    "log_file": ("string_param", "string"),
    "log_info": ("bool_param", "boolean"),
    "log_warning": ("bool_param", "boolean"),
    "log_error": ("bool_param", "boolean"),
    "log_verbose_level": ("uint32_param", "int32"),
    "log_format": ("string_param", "string"),
}


def _finish_error(stream, exc: BaseException):
    if isinstance(exc, ServerError):
        stream.finish(exc.grpc_status, exc.grpc_message)
    elif isinstance(exc, asyncio.CancelledError):
        stream.finish(CANCELLED, "the call was cancelled")
    else:
        log.error("gRPC call %r failed", stream.path, exc_info=exc)
        stream.finish(INTERNAL, f"{type(exc).__name__}: {exc}")


def _unary_task_done(stream, task):
    if stream.closed:
        return
    if task.cancelled():
        stream.finish(CANCELLED, "the call was cancelled")
        return
    exc = task.exception()
    if exc is not None:
        _finish_error(stream, exc)
        return
    stream.respond(task.result().SerializeToString())


def _request_id_only(msg):
    """A stand-in request carrying just the id of a message that did not
    decode (Triton names the failed request in-stream)."""
    try:
        rid = _m("inference.ModelInferRequest").FromString(msg).id
    except Exception:
        rid = ""
    return types.SimpleNamespace(id=rid)




def _stream_error(request, message: str, final: bool) -> bytes:
    """An in-stream error for a request that reached a model: as Triton's,
    its infer_response names the request (id, model, version) and says
    whether it was the request's last (clients of decoupled models wait for
    ``triton_final_response``)."""
    named = InferResponse(request.model_name, request.model_version, request.id, [],
                          {"triton_final_response": final})
    return encode_stream_response(named, request, message)


class _StreamReply:
    """Streams the responses of one ModelStreamInfer request, whatever the
    model: each one as it comes, marked ``triton_final_response`` (false
    but for the last, as Triton marks them; a model that is not decoupled
    sends one, final); the final flag alone (no response) goes out as an
    empty response only when the request set
    ``triton_enable_empty_final_response``. Errors go in-stream; the stream
    stays open."""

    __slots__ = ("stream", "call", "request", "empty_final", "use", "handle", "tracer")

    def __init__(self, stream, call, request, empty_final, use, tracer=None):
        self.stream = stream
        self.call = call
        self.request = request
        self.empty_final = empty_final
        self.use = use
        self.handle = None
        self.tracer = tracer  # the send of a traced request's final response is timed

    def __call__(self, response, error, final):
        stream = self.stream
        call = self.call
        if final:
            call.pending -= 1
            call.futures.discard(self.handle)
        # A response holding a place in the request's ResponseWindow gives
        # it back once the connection has taken it (or at once if dropped).
        window = self.handle.window if self.handle is not None and self.handle.held else None
        try:
            if stream.closed or stream.finished:
                if window is not None:
                    window.give()
                return
            request = self.request
            payload = None
            if error is not None:
                message = error.message if isinstance(error, ServerError) \
                    else f"{type(error).__name__}: {error}"
                payload = _stream_error(request, message, final)
            elif response is not None:
                try:
                    if self.use is not None:
                        self.use.write(response)
                    response.parameters = {**response.parameters, "triton_final_response": final}
                    payload = encode_stream_response(response, request)
                except ServerError as e:
                    payload = _stream_error(request, e.message, final)
                except Exception as e:
                    log.error("gRPC ModelStreamInfer response failed", exc_info=e)
                    payload = _stream_error(request, f"{type(e).__name__}: {e}", final)
            elif final and self.empty_final:
                empty = InferResponse(request.model_name, request.model_version, request.id, [],
                                      {"triton_final_response": True})
                payload = encode_stream_response(empty, request)
            traced = final and request.trace is not None
            sending = now_ns() if traced else 0
            if payload is not None:
                stream.send_message(payload, True, None if window is None else window.give)
            elif window is not None:
                window.give()
            if traced and self.tracer is not None:
                self.tracer.sent(request, "GRPC_SEND_START", sending, "GRPC_SEND_END", now_ns())
            if final and call.closing and call.pending == 0:
                stream.finish(OK)
        finally:
            if final and self.use is not None:
                self.use.release()
