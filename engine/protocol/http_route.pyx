# cython: language_level=3
"""The HTTP infer route's steps on the event loop, compiled: the request
decoded (http_codec, the one authority for its rules), submitted with an
ImmediateFuture, and its answer written into its place in the connection's
queue as its batch completes.

As Python (pyserver.frontends.http.infer before) these were two frames, a
functools.partial and a slot object per request on the loop's thread; the
gRPC route's counterpart is grpc_codec.InferHandler. What the route needs of
the frontend (decompression, Accept-Encoding, compression) it is handed as
callables: the engine imports nothing above it.
"""

from pyserver.engine.protocol.http_codec import (
    answer_infer,
    decode_infer_request,
    encode_infer_response,
    release_shm,
)
from pyserver.engine.types cimport ImmediateFuture

from pyserver.engine import now_ns
from pyserver.kernel.errors import Code, ServerError

import asyncio


cdef class Slot:
    """A queued answer of an HTTP/1.1 connection, in request order: ``data``
    (the answer as written) is None until it is ready; ``close``: the
    connection closes after it."""

    cdef public object data
    cdef public bint close

    def __init__(self, bint close):
        self.data = None
        self.close = close


cdef class InferRoute:
    """``route(conn, method, headers, body, keep_alive, model, version)``:
    POST /v2/models/<model>[/versions/<v>]/infer on connection ``conn`` (a
    pyserver.frontends.http.connection.HttpConnection)."""

    cdef object decompress  # (content-encoding, body, limit) -> body
    cdef object response_encoding  # accept-encoding header -> "gzip"/"deflate"/None
    cdef object compress  # (encoding, body) -> bytes
    cdef readonly int pipeline_high

    def __init__(self, decompress, response_encoding, compress, int pipeline_high):
        self.decompress = decompress
        self.response_encoding = response_encoding
        self.compress = compress
        self.pipeline_high = pipeline_high

    def __call__(self, conn, method, dict headers, body, bint keep_alive, model, version):
        frontend = conn.frontend
        request = None
        try:
            enc = headers.get(b"content-encoding")
            if enc is not None:
                body = self.decompress(enc, body, frontend.max_input_size)
            request = decode_infer_request(
                model, version, headers.get(b"inference-header-content-length"), body,
                frontend.max_input_size, frontend.shared_memory, conn.server.model_config)
            if frontend.header_forwarder is not None:
                frontend.header_forwarder.forward(conn.raw_headers, request.parameters)
            tracer = conn.tracer
            if tracer is not None and tracer.active:
                received = now_ns()
                tracer.frontend_received(request, "HTTP_RECV_START", conn.recv_ns or received,
                                         "HTTP_RECV_END", received)
            # answered as the request's batch completes, not an iteration later
            fut = conn.server.submitter(request, ImmediateFuture())
        except Exception as e:
            if request is not None:
                release_shm(request)
            return conn.respond_exception(e, keep_alive)
        cdef Slot slot = Slot(not keep_alive)
        pending = conn.pending
        pending.append(slot)
        accept = headers.get(b"accept-encoding")
        cdef InferDone done = InferDone(self, conn, slot, request,
                                        None if accept is None else self.response_encoding(accept),
                                        conn.http10)
        try:
            if fut.done():  # answered synchronously: no extra loop iteration
                return done(fut)
            fut.add_done_callback(done)
        except AttributeError:  # a coroutine or other awaitable
            fut = asyncio.ensure_future(fut)
            fut.add_done_callback(done)
        if len(pending) >= self.pipeline_high:
            conn.update_reading()


cpdef object settled_result(fut):
    """A done future's result; raises its exception, or CANCELLED when it
    was cancelled (what an HTTP answer is built from, or its error)."""
    if fut.cancelled():
        raise ServerError(Code.CANCELLED, "request was cancelled")
    exc = fut.exception()
    if exc is not None:
        raise exc
    return fut.result()


cdef class InferDone:
    """One infer request's done-callback: its answer (or error) into its
    slot, then the connection writes what is ready, in order."""

    cdef InferRoute route
    cdef object conn
    cdef Slot slot
    cdef object request
    cdef object encoding
    cdef bint http10

    def __init__(self, InferRoute route, conn, Slot slot, request, encoding, bint http10):
        self.route = route
        self.conn = conn
        self.slot = slot
        self.request = request
        self.encoding = encoding
        self.http10 = http10

    def __call__(self, fut):
        cdef Slot slot = self.slot
        cdef bint keep_alive = not slot.close
        conn = self.conn
        request = self.request
        try:
            response = settled_result(fut)
            if self.encoding is None:
                slot.data = answer_infer(response, request, keep_alive, self.http10)
            else:
                headers, body = encode_infer_response(response, request)
                headers = [*headers, (b"Content-Encoding", self.encoding.encode())]
                slot.data = conn.build(200, headers, self.route.compress(self.encoding, body),
                                       keep_alive, self.http10)
        except Exception as e:
            slot.data = conn.error_data(e, keep_alive, self.http10)
        finally:
            release_shm(request)
        if request.trace is None:
            conn.answered()
            return
        sending = now_ns()  # a traced request: its send stamps (written when not held back)
        conn.answered()
        conn.tracer.sent(request, "HTTP_SEND_START", sending, "HTTP_SEND_END", now_ns())
