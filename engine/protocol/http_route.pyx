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
    JSON_HEADERS,
    READER_MAX,
    answer_infer,
    decode_infer_request,
    encode_infer_response,
    inference_header_length,
    release_shm,
)
from pyserver.engine.protocol.http_infer import NOT_READ
from pyserver.engine.protocol.http_infer cimport (
    HttpPending,
    direct_answer,
    plain_record,
    record_answer,
)
from pyserver.engine.types cimport ImmediateFuture, PlainPending

from pyserver.engine import now_ns
from pyserver.kernel.errors import Code, ServerError

import asyncio

from libc.stdint cimport uint64_t


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef class Slot:
    """A queued answer of an HTTP/1.1 connection, in request order: ``data``
    (the answer as written) is None until it is ready; ``close``: the
    connection closes after it."""

    def __init__(self, bint close):
        self.data = None
        self.close = close


cdef class RouteFrontend:
    """What the route reads of its HTTP frontend and server per request,
    read from them once (as attributes they were a property call and eight
    lookups per request: about 1 µs of the loop's time)."""

    def __init__(self, frontend):
        server = frontend.server
        self.max_input_size = frontend.max_input_size
        self.shared_memory = frontend.shared_memory
        self.model_config = server.model_config
        self.header_forwarder = frontend.header_forwarder
        self.submitter = server.submitter
        # Forwarded headers become request parameters: those go the general
        # way. A server with no compiled admission has no route.
        self.admission = getattr(server, "admission", None) \
            if self.header_forwarder is None else None


cdef RouteFrontend route_frontend(frontend):
    """``frontend``'s RouteFrontend, made on its first request (the
    frontend, its server and its shared memory are all in place by then)."""
    rf = getattr(frontend, "route_frontend", None)
    if rf is None:
        rf = frontend.route_frontend = RouteFrontend(frontend)
    return <RouteFrontend?>rf


cdef class InferRoute:
    """``route(conn, method, headers, body, keep_alive, model, version)``:
    POST /v2/models/<model>[/versions/<v>]/infer on connection ``conn`` (a
    pyserver.frontends.http.connection.HttpConnection)."""

    def __init__(self, decompress, response_encoding, compress, int pipeline_high):
        self.decompress = decompress
        self.response_encoding = response_encoding
        self._encodings = {}
        self.compress = compress
        self.pipeline_high = pipeline_high

    def __call__(self, conn, method, dict headers, body, bint keep_alive, model, version):
        cdef RouteFrontend rf = route_frontend(conn.frontend)
        cdef Slot slot
        try:
            data = self.take(conn, rf, headers, body, model, version, conn.recv_ns, keep_alive,
                             conn.http10)
            if type(data) is not list:
                request, fut = data
        except Exception as e:
            return conn.respond_exception(e, keep_alive)
        slot = Slot(not keep_alive)
        if type(data) is list:
            slot.data = data
            conn.pending.append(slot)
            conn.answered()
            return
        pending = conn.pending
        pending.append(slot)
        cdef InferDone done = InferDone(self, conn, slot, request,
                                        self.encoding_of(headers), conn.http10)
        when_done(fut, done)
        if len(pending) >= self.pipeline_high:
            conn.update_reading()

    cdef object take(self, conn, RouteFrontend rf, dict headers, body, model, version,
                     recv_ns, bint keep_alive, bint http10):
        """The request run as it is read, its answer (a list) returned;
        else decoded and submitted, ``(request, future)`` returned (begin).
        The model is looked up once for both (Admission.route); raises what
        ``begin`` raises."""
        cdef Route route = None
        if rf.admission is not None and not version:
            route = rf.admission.route(model)
        data = self.direct(rf, headers, body, route, keep_alive, http10)
        if type(data) is list or type(data) is tuple:  # answered, or queued as a record
            return data
        # declined: what the reader holds for the decoder
        return self.begin(conn, rf, headers, body, model, version, recv_ns, data, route)

    cdef tuple begin(self, conn, RouteFrontend rf, dict headers, body, model, version,
                     recv_ns, int reader_held=NOT_READ, Route route=None):
        """The request decoded and submitted: ``(request, future)``; raises
        what the client is to be told (the request's shared memory let go).
        ``reader_held``: what ``direct`` declined with; ``route``: the
        model's (take)."""
        request = None
        try:
            enc = headers.get(b"content-encoding")
            if enc is not None:
                body = self.decompress(enc, body, rf.max_input_size)
            request = decode_infer_request(
                model, version, headers.get(b"inference-header-content-length"), body,
                rf.max_input_size, rf.shared_memory, rf.model_config, reader_held)
            if rf.header_forwarder is not None:
                rf.header_forwarder.forward(conn.raw_headers, request.parameters)
            tracer = conn.tracer
            if tracer is not None and tracer.active:
                received = now_ns()
                tracer.frontend_received(request, "HTTP_RECV_START", recv_ns or received,
                                         "HTTP_RECV_END", received)
            # answered as the request's batch completes, not an iteration later
            if route is None:
                return request, rf.submitter(request, ImmediateFuture())
            return request, rf.submitter(request, ImmediateFuture(), route)
        except BaseException:
            if request is not None:
                release_shm(request)
            raise

    cdef object direct(self, RouteFrontend rf, dict headers, body, Route route,
                       bint keep_alive, bint http10):
        """The answer (a list) of a plain request its model runs as it is
        read (http_infer.direct_answer; ``route``: the model's, see take),
        or ``(record, future)`` for one read straight into its model's
        queue (http_infer.plain_record, admission.Route.records); where
        ``begin`` must take it (neither, a compressed body or answer, a
        traced or otherwise unusual request) nothing is run or queued and
        what this thread's reader holds is returned for ``begin``
        (http_infer.NOT_READ, ...)."""
        if route is None or b"content-encoding" in headers \
                or self.encoding_of(headers) is not None:
            return NOT_READ
        direct = route.runnable()
        records = route.records if direct is None else None
        if direct is None and records is None:
            return NOT_READ
        cdef Py_ssize_t total = len(body), hlen
        hval = headers.get(b"inference-header-content-length")
        try:
            hlen = total if hval is None else inference_header_length(hval, total)
        except ServerError:
            return NOT_READ  # the general path's error
        if hlen == 0 or hlen > rf.max_input_size or hlen > READER_MAX:
            return NOT_READ  # raw binary, or too large for the reader
        if direct is not None:
            return direct_answer(direct, body, hlen, rf.max_input_size, JSON_HEADERS,
                                 keep_alive, http10, NowNs(), answer_infer)
        fut = ImmediateFuture()
        record = plain_record(records, body, hlen, rf.max_input_size, fut)
        if type(record) is int:
            return record
        rf.admission.enqueue_plain(route, <PlainPending>record)
        return record, fut

    cdef object encoding_of(self, dict headers):
        """The answer's Content-Encoding for the request's Accept-Encoding, or None."""
        accept = headers.get(b"accept-encoding")
        if accept is None:
            return None
        # a client sends the same value on every request: asked once per value
        cdef dict seen = self._encodings
        enc = seen.get(accept, False)
        if enc is False:
            enc = self.response_encoding(accept)
            if len(seen) < 256:
                seen[accept] = enc
        return enc

    cdef list answer_data(self, conn, fut, request, encoding, bint keep_alive, bint http10):
        """The answer to a request whose future is done, as written (its
        error's, when it failed); lets its shared memory go."""
        try:
            response = settled_result(fut)
            if type(request) is HttpPending:  # read as a record: no InferRequest
                return record_answer(request, response, JSON_HEADERS, keep_alive, http10,
                                     answer_infer)
            if encoding is None:
                return answer_infer(response, request, keep_alive, http10)
            headers, body = encode_infer_response(response, request)
            headers = [*headers, (b"Content-Encoding", encoding.encode())]
            return conn.build(200, headers, self.compress(encoding, body), keep_alive, http10)
        except Exception as e:
            return conn.error_data(e, keep_alive, http10)
        finally:
            release_shm(request)


cdef int when_done(fut, done) except -1:
    """Calls ``done(fut)`` now when ``fut`` is done (no extra loop
    iteration), else when it is."""
    try:
        if fut.done():
            done(fut)
            return 0
        fut.add_done_callback(done)
    except AttributeError:  # a coroutine or other awaitable
        fut = asyncio.ensure_future(fut)
        fut.add_done_callback(done)
    return 0


cpdef object settled_result(fut):
    """A done future's result; raises its exception, or CANCELLED when it
    was cancelled (what an HTTP answer is built from, or its error)."""
    cdef ImmediateFuture f
    if type(fut) is ImmediateFuture:  # its fields, without three method calls
        f = <ImmediateFuture>fut
        if f._state == 1:
            if f._exception is not None:
                raise f._exception
            return f._result
    if fut.cancelled():
        raise ServerError(Code.CANCELLED, "request was cancelled")
    exc = fut.exception()
    if exc is not None:
        raise exc
    return fut.result()


cdef class InferDone:
    """One infer request's done-callback: its answer (or error) into its
    slot, then the connection writes what is ready, in order."""

    def __init__(self, InferRoute route, conn, Slot slot, request, encoding, bint http10):
        self.route = route
        self.conn = conn
        self.slot = slot
        self.request = request
        self.encoding = encoding
        self.http10 = http10

    cdef int done(self, fut) except -1:
        cdef Slot slot = self.slot
        conn = self.conn
        request = self.request
        slot.data = self.route.answer_data(conn, fut, request, self.encoding, not slot.close,
                                           self.http10)
        if request.trace is None:
            conn.answered()
            return 0
        sending = now_ns()  # a traced request: its send stamps (written when not held back)
        conn.answered()
        conn.tracer.sent(request, "HTTP_SEND_START", sending, "HTTP_SEND_END", now_ns())
        return 0
