# cython: language_level=3
"""HTTP/2 server connections over nghttp2, with gRPC's message framing.

A ``Connection`` is an asyncio protocol (uvloop calls it directly): the bytes
a transport receives go to nghttp2's server session, which answers SETTINGS,
PING and WINDOW_UPDATE itself and calls back here per frame. Requests are
h2c with prior knowledge (the client preface first, no Upgrade).

Each request stream becomes a ``Stream``. Its ``:path`` picks a route from
the ``routes`` dict given to the connection, ``{path: (kind, handler)}``:

- ``UNARY``: ``handler(stream, message)`` once the client has half-closed
  the stream after exactly one gRPC message;
- ``STREAMING``: ``handler(stream, message)`` per message as it completes,
  then ``handler(stream, None)`` when the client half-closes. A third item,
  ``(STREAMING, handler, on_headers)``, is called ``on_headers(stream)`` as
  soon as the request headers are in, before any message (it may finish the
  stream there: a refusal the client sees without sending anything).

Messages arrive as ``bytes`` without the 5-byte gRPC prefix (decompressed
when the client used ``grpc-encoding`` gzip or deflate); they are filled in
place from the DATA frames, never joined. The handler answers with
``stream.respond(message)`` (message, then ``grpc-status: 0``),
``stream.send_message(message)`` (streaming) and ``stream.finish(status,
text)``. An unknown path, a malformed gRPC body (a message cut short, more
than one message on a unary call, a message over ``max_message_size``) or
an unsupported encoding is answered here without calling Python.

Everything runs on the event loop's thread, holding the GIL: nghttp2's
calls are short and non-blocking, and the callbacks build Python objects.
"""
import logging

from pyserver.kernel.errors import GrpcStatus

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.string cimport memcmp, memcpy


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()  # the engine's clock


cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject** bytes, Py_ssize_t newsize) except -1


# Route kinds.
UNARY = 0
STREAMING = 1

# gRPC status codes used by the framing layer (the kernel's one table).
OK = int(GrpcStatus.OK)
CANCELLED = int(GrpcStatus.CANCELLED)
UNKNOWN = int(GrpcStatus.UNKNOWN)
DEADLINE_EXCEEDED = int(GrpcStatus.DEADLINE_EXCEEDED)
RESOURCE_EXHAUSTED = int(GrpcStatus.RESOURCE_EXHAUSTED)
UNIMPLEMENTED = int(GrpcStatus.UNIMPLEMENTED)
INTERNAL = int(GrpcStatus.INTERNAL)
UNAVAILABLE = int(GrpcStatus.UNAVAILABLE)

# HTTP/2 error codes for reset() and goaway().
NO_ERROR = NGHTTP2_NO_ERROR
CANCEL = NGHTTP2_CANCEL
REFUSED_STREAM = NGHTTP2_REFUSED_STREAM
ENHANCE_YOUR_CALM = NGHTTP2_ENHANCE_YOUR_CALM

cdef enum:
    FLUSH_BYTES = 1 << 20         # hand the transport at most this much per write
    FIRST_ALLOC = 1 << 20         # a message buffer starts at most this big, then grows
    PAUSE_READ_BYTES = 16 << 20   # unsent response bytes that stop reading a client...
    RESUME_READ_BYTES = 4 << 20   # ...until they drop below this
    MAX_DIMS = 32

_log = logging.getLogger("pyserver.http2")

cdef bytes _ACCEPT_ENCODING = b"identity,deflate,gzip"
cdef dict _STATUS_TEXT = {}


cdef inline nghttp2_nv _nv(const char* name, size_t namelen, const char* value, size_t valuelen,
                           bint copy_value=False):
    cdef nghttp2_nv nv
    nv.name = <uint8_t*>name
    nv.namelen = namelen
    nv.value = <uint8_t*>value
    nv.valuelen = valuelen
    nv.flags = NGHTTP2_NV_FLAG_NO_COPY_NAME
    if not copy_value:
        nv.flags |= NGHTTP2_NV_FLAG_NO_COPY_VALUE
    return nv


cdef bytes _status_bytes(int status):
    cached = _STATUS_TEXT.get(status)
    if cached is None:
        cached = str(status).encode()
        _STATUS_TEXT[status] = cached
    return <bytes>cached


# The most of an encoded grpc-message a call's trailers carry. Errors echo
# the request id, which a client may make as long as it likes; gRPC clients
# refuse metadata beyond 8-16 KiB and nghttp2 will not send a header block
# beyond 64 KiB, so an unbounded text would leave the call unanswered.
MAX_STATUS_MESSAGE = 4096
_TRUNCATED = b"...(truncated)"


def percent_encode(str message, size_t limit=0):
    """grpc-message's encoding: bytes outside printable ASCII, and '%', as %XX.
    With a limit, the result is cut to at most that many bytes (never inside
    an escape) and marked as truncated."""
    data = message.encode("utf-8", "replace")
    cdef string out = PercentEncode(string_view(PyBytes_AS_STRING(data),
                                                <size_t>PyBytes_GET_SIZE(data)))
    cdef size_t keep
    if limit == 0 or out.size() <= limit:
        return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())
    keep = limit - len(_TRUNCATED) if limit > <size_t>len(_TRUNCATED) else 0
    # an escape is '%' and two hex digits: do not cut one
    if keep >= 1 and out[keep - 1] == b'%':
        keep -= 1
    elif keep >= 2 and out[keep - 2] == b'%':
        keep -= 2
    kept = PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>keep)
    # nor a UTF-8 sequence: the text before the cut must still decode
    from urllib.parse import unquote_to_bytes
    text = unquote_to_bytes(kept).decode("utf-8", "ignore")
    return percent_encode(text) + _TRUNCATED


cdef class Stream:
    """One HTTP/2 request stream carrying a gRPC call."""

    def __cinit__(self):
        self.headers = None
        self.outq = []
        self.timeout_us = -1
        self.status = -1
        self.opened_ns = NowNs()  # a traced call's GRPC_WAITREAD_START

    @property
    def timeout(self):
        """The client's deadline (grpc-timeout) in seconds from its arrival, or None."""
        return None if self.timeout_us < 0 else self.timeout_us / 1e6

    def header(self, bytes name):
        """The value of a captured request header (lower-case name), or None."""
        if self.headers is not None:
            for key, value in self.headers:
                if key == name:
                    return value
        return None

    # -- sending ----------------------------------------------------------------

    cdef int _submit_headers(self, bint with_data) except -1:
        cdef nghttp2_nv nva[4]
        cdef nghttp2_data_provider prd
        cdef size_t n = 3
        cdef int rv
        nva[0] = _nv(":status", 7, "200", 3)
        nva[1] = _nv("content-type", 12, "application/grpc", 16)
        nva[2] = _nv("grpc-accept-encoding", 20, PyBytes_AS_STRING(_ACCEPT_ENCODING),
                     PyBytes_GET_SIZE(_ACCEPT_ENCODING))
        if self.gzip_out:
            nva[3] = _nv("grpc-encoding", 13, "gzip", 4)
            n = 4
        prd.source.ptr = <void*>self
        prd.read_callback = _read_cb
        rv = nghttp2_submit_response(self.connection.session, self.id, nva, n, &prd)
        if rv != 0:
            raise RuntimeError(f"nghttp2_submit_response: {nghttp2_strerror(rv).decode()}")
        self.headers_sent = True
        return 0

    cdef int _submit_trailers(self) except -1:
        """The final status: trailers after DATA, or a trailers-only response."""
        cdef nghttp2_nv nva[6]
        cdef size_t n = 0
        cdef int rv
        status = _status_bytes(self.status)
        message = self.status_message
        if not self.headers_sent:
            nva[0] = _nv(":status", 7, "200", 3)
            nva[1] = _nv("content-type", 12, "application/grpc", 16)
            nva[2] = _nv("grpc-accept-encoding", 20, PyBytes_AS_STRING(_ACCEPT_ENCODING),
                         PyBytes_GET_SIZE(_ACCEPT_ENCODING))
            n = 3
        nva[n] = _nv("grpc-status", 11, PyBytes_AS_STRING(status), PyBytes_GET_SIZE(status))
        n += 1
        if message:
            nva[n] = _nv("grpc-message", 12, PyBytes_AS_STRING(message),
                         PyBytes_GET_SIZE(message), True)
            n += 1
        self.finished = True
        if self.headers_sent:
            rv = nghttp2_submit_trailer(self.connection.session, self.id, nva, n)
        else:
            self.headers_sent = True
            rv = nghttp2_submit_response(self.connection.session, self.id, nva, n, NULL)
        if rv != 0:
            raise RuntimeError(f"nghttp2 trailers: {nghttp2_strerror(rv).decode()}")
        return 0

    cdef int _append(self, object payload) except -1:
        cdef size_t n = <size_t>PyBytes_GET_SIZE(payload)
        if n == 0:
            return 0
        self.outq.append(payload)
        self.out_bytes += n
        self.queued_total += n
        self.connection.pending_bytes += n
        return 0

    cdef int _append_message(self, bytes payload, bint framed) except -1:
        """Queues one gRPC message: the 5-byte prefix (unless framed, when
        payload carries it) and the payload, gzip-compressed when this
        stream's responses are."""
        cdef size_t n
        cdef int flag = 0
        if self.gzip_out:
            import zlib
            if framed:
                payload = payload[5:]
            payload = zlib.compress(payload, self.connection.response_compression, 31)
            flag = 1
        elif framed:
            return self._append(payload)
        n = <size_t>PyBytes_GET_SIZE(payload)
        self._append(bytes((flag, (n >> 24) & 0xFF, (n >> 16) & 0xFF, (n >> 8) & 0xFF,
                            n & 0xFF)))
        return self._append(payload)

    cdef size_t _copy_out(self, string* out, size_t n) except? 0:
        """Moves n queued bytes to out (nghttp2 asked for exactly that many)."""
        cdef size_t done = 0, k, avail
        cdef bytes chunk
        while done < n:
            chunk = <bytes>self.outq[0]
            avail = <size_t>PyBytes_GET_SIZE(chunk) - self.out_pos
            k = n - done if n - done < avail else avail
            out.append(PyBytes_AS_STRING(chunk) + self.out_pos, k)
            done += k
            self.out_pos += k
            if self.out_pos == <size_t>PyBytes_GET_SIZE(chunk):
                del self.outq[0]
                self.out_pos = 0
        self.out_bytes -= n
        self.sent_total += n
        self.connection.pending_bytes -= n
        if self.sent_marks:
            self._notify_sent(False)
        return n

    cdef int _notify_sent(self, bint every) except -1:
        """Calls the notices of the messages nghttp2 has now taken whole
        (``every``: all of them, the stream is gone)."""
        marks = self.sent_marks
        while marks and (every or (<tuple>marks[0])[0] <= self.sent_total):
            callback = (<tuple>marks.pop(0))[1]
            try:
                callback()
            except Exception:
                pass  # a notice must not break the session's callbacks
        return 0

    cdef int _release(self) except -1:
        self.connection.pending_bytes -= self.out_bytes
        if self.sent_marks:
            self._notify_sent(True)
        self.outq = []
        self.out_bytes = 0
        self.out_pos = 0
        self.msg = None
        self.first_message = None
        return 0

    cdef int _wake(self) except -1:
        if self.deferred:
            self.deferred = False
            nghttp2_session_resume_data(self.connection.session, self.id)
        return 0

    def send_message(self, bytes payload, bint framed=False, on_sent=None):
        """Queues one response message (payload without the gRPC prefix, or
        with it when framed). Returns False when the stream is gone.
        ``on_sent()`` is called once nghttp2 has taken the whole message to
        write, or the stream is gone (possibly before this returns)."""
        if self.finished or self.closed:
            return False
        cdef Connection conn = self.connection
        self._append_message(payload, framed)
        if on_sent is not None:
            if self.sent_marks is None:
                self.sent_marks = []
            self.sent_marks.append((self.queued_total, on_sent))
        if not self.headers_sent:
            self._submit_headers(True)
        else:
            self._wake()
        conn._flush()
        return True

    cpdef bint respond(self, bytes payload, bint framed=False) except -1:
        """A unary call's answer: the message, then status OK."""
        if self.finished or self.closed:
            return False
        self._append_message(payload, framed)
        self.finishing = True
        self.status = 0
        if not self.headers_sent:
            self._submit_headers(True)
        else:
            self._wake()
        self.connection._flush()
        return True

    def finish(self, int status=0, message=None):
        """Ends the call with a gRPC status (after any queued messages)."""
        if self.finished or self.closed or self.finishing:
            return False
        self.finishing = True
        self.status = status
        if message:
            self.status_message = percent_encode(
                message if isinstance(message, str) else str(message),
                self.connection._status_message_limit())
        if not self.headers_sent:
            self._submit_trailers()  # trailers-only
        else:
            self._wake()  # the data source submits them after the queued data
        self.connection._flush()
        return True

    def reset(self, uint32_t error_code=NGHTTP2_CANCEL):
        """RST_STREAM: abandons the call at once."""
        if self.closed:
            return False
        self.finished = True
        nghttp2_submit_rst_stream(self.connection.session, NGHTTP2_FLAG_NONE, self.id,
                                  error_code)
        self.connection._flush()
        return True

    def __repr__(self):
        return f"<Stream {self.id} {self.path!r}{' closed' if self.closed else ''}>"


# ---------------------------------------------------------------- nghttp2 callbacks


cdef ssize_t _send_cb(nghttp2_session* session, const uint8_t* data, size_t length, int flags,
                      void* user_data) noexcept:
    cdef Connection conn = <Connection>user_data
    if conn.outbuf.size() >= FLUSH_BYTES:
        conn.blocked = True
        return NGHTTP2_ERR_WOULDBLOCK
    conn.outbuf.append(<const char*>data, length)
    return <ssize_t>length


cdef int _send_data_cb(nghttp2_session* session, nghttp2_frame* frame, const uint8_t* framehd,
                       size_t length, nghttp2_data_source* source, void* user_data) noexcept:
    cdef Connection conn = <Connection>user_data
    cdef Stream stream = <Stream>source.ptr
    if conn.outbuf.size() >= FLUSH_BYTES:
        conn.blocked = True
        return NGHTTP2_ERR_WOULDBLOCK
    conn.outbuf.append(<const char*>framehd, 9)
    try:
        stream._copy_out(&conn.outbuf, length)
    except BaseException:
        return NGHTTP2_ERR_CALLBACK_FAILURE
    return 0


cdef ssize_t _read_cb(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                      uint32_t* data_flags, nghttp2_data_source* source,
                      void* user_data) noexcept:
    cdef Stream stream = <Stream>source.ptr
    cdef size_t avail = stream.out_bytes
    cdef size_t n
    if avail == 0 and not stream.finishing:
        stream.deferred = True
        return NGHTTP2_ERR_DEFERRED
    n = avail if avail < length else length
    if n:
        data_flags[0] |= NGHTTP2_DATA_FLAG_NO_COPY
    if n == avail and stream.finishing:
        data_flags[0] |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM
        try:
            stream._submit_trailers()
        except BaseException:
            return NGHTTP2_ERR_CALLBACK_FAILURE
    return <ssize_t>n


cdef inline Stream _stream_of(nghttp2_session* session, int32_t stream_id):
    cdef void* p = nghttp2_session_get_stream_user_data(session, stream_id)
    if p == NULL:
        return None
    return <Stream>p


cdef int _on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame,
                           void* user_data) noexcept:
    if frame.hd.type != NGHTTP2_HEADERS or frame.headers.cat != NGHTTP2_HCAT_REQUEST:
        return 0
    cdef Connection conn = <Connection>user_data
    cdef Stream stream = Stream.__new__(Stream)
    stream.id = frame.hd.stream_id
    stream.connection = conn
    if conn.capture_headers:
        stream.headers = []
    Py_INCREF(stream)  # nghttp2's reference, dropped in _on_stream_close
    nghttp2_session_set_stream_user_data(session, stream.id, <void*>stream)
    conn.streams.add(stream)
    conn.open_streams += 1
    return 0


cdef inline bint _eq(const uint8_t* a, size_t n, const char* b, size_t m) noexcept:
    return n == m and memcmp(a, b, m) == 0


cdef int _on_header(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                    size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                    void* user_data) noexcept:
    if frame.hd.type != NGHTTP2_HEADERS or frame.headers.cat != NGHTTP2_HCAT_REQUEST:
        return 0  # trailers from a client carry nothing gRPC uses
    cdef Stream stream = _stream_of(session, frame.hd.stream_id)
    if stream is None:
        return 0
    cdef Connection conn = stream.connection
    stream.header_bytes += namelen + valuelen + 32  # RFC 9113's accounting
    if stream.header_bytes > conn.max_header_list_size:
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream.id,
                                  NGHTTP2_ENHANCE_YOUR_CALM)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE
    if namelen and name[0] == 58:  # ':'
        if _eq(name, namelen, ":path", 5):
            stream.path = PyBytes_FromStringAndSize(<const char*>value, <Py_ssize_t>valuelen)
        elif _eq(name, namelen, ":method", 7):
            stream.method_ok = _eq(value, valuelen, "POST", 4)
        return 0
    if _eq(name, namelen, "content-type", 12):
        stream.content_type_ok = valuelen >= 16 and \
            memcmp(value, "application/grpc", 16) == 0 and \
            (valuelen == 16 or value[16] == 43 or value[16] == 59)  # '+', ';'
    elif _eq(name, namelen, "grpc-timeout", 12):
        stream.timeout_us = ParseGrpcTimeoutUs(string_view(<const char*>value, valuelen))
    elif _eq(name, namelen, "grpc-encoding", 13):
        stream.encoding = PyBytes_FromStringAndSize(<const char*>value, <Py_ssize_t>valuelen)
    elif conn.response_compression and _eq(name, namelen, "grpc-accept-encoding", 20):
        stream.accepts_gzip = b"gzip" in PyBytes_FromStringAndSize(<const char*>value,
                                                                   <Py_ssize_t>valuelen)
    elif stream.headers is not None and not _eq(name, namelen, "te", 2):
        stream.headers.append(
            (PyBytes_FromStringAndSize(<const char*>name, <Py_ssize_t>namelen),
             PyBytes_FromStringAndSize(<const char*>value, <Py_ssize_t>valuelen)))
    return 0


cdef int _on_frame_recv(nghttp2_session* session, const nghttp2_frame* frame,
                        void* user_data) noexcept:
    cdef uint8_t t = frame.hd.type
    if t == NGHTTP2_PING:
        return _on_ping(<Connection>user_data, frame.hd.flags & NGHTTP2_FLAG_ACK)
    if t != NGHTTP2_DATA and t != NGHTTP2_HEADERS:
        return 0
    cdef Stream stream = _stream_of(session, frame.hd.stream_id)
    if stream is None:
        return 0
    cdef Connection conn = stream.connection
    try:
        if t == NGHTTP2_HEADERS and frame.headers.cat == NGHTTP2_HCAT_REQUEST:
            conn._headers_done(stream)
        if frame.hd.flags & NGHTTP2_FLAG_END_STREAM:
            conn._end_of_stream(stream)
    except BaseException as e:
        conn._handler_failed(stream, e)
    return 0


cdef int _on_data_chunk(nghttp2_session* session, uint8_t flags, int32_t stream_id,
                        const uint8_t* data, size_t length, void* user_data) noexcept:
    cdef Stream stream = _stream_of(session, stream_id)
    if stream is None or stream.finished or stream.finishing or stream.route is None:
        return 0  # answered already: the rest of the body is dropped
    cdef Connection conn = stream.connection
    try:
        conn._data(stream, data, length)
    except BaseException as e:
        conn._handler_failed(stream, e)
    return 0


cdef int _on_ping(Connection conn, bint ack) noexcept:
    # nghttp2 answers a client's PING itself; the keepalive policy counts
    # them (too many without calls between them: GOAWAY) and takes the ACKs
    # of its own.
    keepalive = conn.keepalive
    if keepalive is None:
        return 0
    try:
        if ack:
            keepalive.ping_acked()
        else:
            keepalive.ping_received()
    except BaseException:
        _log.exception("gRPC keepalive failed")
    return 0


cdef int _on_frame_send(nghttp2_session* session, const nghttp2_frame* frame,
                        void* user_data) noexcept:
    if frame.hd.type == NGHTTP2_DATA or frame.hd.type == NGHTTP2_HEADERS:
        (<Connection>user_data).frames_sent += 1
    # After the final HEADERS of a call the client is still sending: tell it
    # to stop with RST_STREAM(NO_ERROR), as gRPC servers do.
    if frame.hd.type != NGHTTP2_HEADERS or not (frame.hd.flags & NGHTTP2_FLAG_END_STREAM):
        return 0
    cdef Stream stream = _stream_of(session, frame.hd.stream_id)
    if stream is not None and not stream.half_closed:
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream.id, NGHTTP2_NO_ERROR)
    return 0


cdef int _on_frame_not_send(nghttp2_session* session, const nghttp2_frame* frame,
                            int lib_error_code, void* user_data) noexcept:
    # A response's HEADERS that nghttp2 could not send (too large for the
    # peer): reset the stream so that the client is answered, not left to
    # wait for its deadline.
    if frame.hd.type == NGHTTP2_HEADERS:
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame.hd.stream_id,
                                  NGHTTP2_INTERNAL_ERROR)
    return 0


cdef int _on_stream_close(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                          void* user_data) noexcept:
    cdef Stream stream = _stream_of(session, stream_id)
    if stream is None:
        return 0
    cdef Connection conn = stream.connection
    nghttp2_session_set_stream_user_data(session, stream_id, NULL)
    conn._stream_closed(stream, error_code)
    Py_DECREF(stream)  # nghttp2's reference
    return 0


# ---------------------------------------------------------------- connection


cdef class WriteBatch:
    """Holds the answers its connections write during one turn of the event
    loop and writes them at its end, one system call per connection: with
    many calls multiplexed on a connection, the answers of the batches that
    completed in that turn go out together instead of a write each (a
    connection with one call open writes at once: nothing would join it). Stream
    methods (respond, finish, send_message, reset) defer this way; what a
    connection writes while it receives still goes out as receiving ends.
    Loop-thread only, like the connections."""

    def __cinit__(self, loop):
        self.call_soon = loop.call_soon
        self.waiting = []

    cdef int hold(self, Connection conn) except -1:
        conn.flush_waiting = True
        self.waiting.append(conn)
        if not self.scheduled:
            self.scheduled = True
            self.call_soon(self.flush)
        return 0

    def flush(self):
        """Writes what every held connection has queued (the loop calls it)."""
        cdef Connection conn
        self.scheduled = False
        waiting, self.waiting = self.waiting, []
        for conn in waiting:
            conn.flush_waiting = False
            conn._write_out()


cdef nghttp2_session_callbacks* _CALLBACKS = NULL


cdef nghttp2_session_callbacks* _callbacks() except NULL:
    global _CALLBACKS
    if _CALLBACKS == NULL:
        if nghttp2_session_callbacks_new(&_CALLBACKS) != 0:
            raise MemoryError()
        nghttp2_session_callbacks_set_send_callback(_CALLBACKS, _send_cb)
        nghttp2_session_callbacks_set_send_data_callback(_CALLBACKS, _send_data_cb)
        nghttp2_session_callbacks_set_on_begin_headers_callback(_CALLBACKS, _on_begin_headers)
        nghttp2_session_callbacks_set_on_header_callback(_CALLBACKS, _on_header)
        nghttp2_session_callbacks_set_on_frame_recv_callback(_CALLBACKS, _on_frame_recv)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(_CALLBACKS, _on_data_chunk)
        nghttp2_session_callbacks_set_on_frame_send_callback(_CALLBACKS, _on_frame_send)
        nghttp2_session_callbacks_set_on_frame_not_send_callback(_CALLBACKS, _on_frame_not_send)
        nghttp2_session_callbacks_set_on_stream_close_callback(_CALLBACKS, _on_stream_close)
    return _CALLBACKS


cdef class Connection:
    """One HTTP/2 server connection; pass it to ``loop.create_server`` as the
    protocol (a factory making one per accepted socket).

    ``routes``: ``{b"/package.Service/Method": (UNARY or STREAMING, handler)}``.
    ``on_open(conn)`` / ``on_close(conn)`` are called when the transport
    connects and goes away. ``capture_headers``: keep the request headers
    beyond gRPC's own in ``stream.headers`` (costs a little per request).
    ``response_compression``: a zlib level; when not 0, responses to clients
    whose grpc-accept-encoding lists gzip go out gzip-compressed.
    """

    def __cinit__(self, dict routes, *, size_t max_message_size=(1 << 31) - 1,
                  bint capture_headers=False, uint32_t max_concurrent_streams=1000,
                  uint32_t initial_window_size=(1 << 20),
                  int32_t connection_window_size=(16 << 20),
                  uint32_t max_frame_size=(1 << 20),
                  uint32_t max_header_list_size=(16 << 10),
                  int response_compression=0,
                  on_open=None, on_close=None):
        cdef nghttp2_option* option
        cdef nghttp2_settings_entry iv[5]
        self.routes = routes
        self.max_message_size = max_message_size
        self.capture_headers = capture_headers
        self.max_header_list_size = max_header_list_size
        if not 0 <= response_compression <= 9:
            raise ValueError(f"response_compression is a zlib level 0-9, not {response_compression}")
        self.response_compression = response_compression
        self.streams = set()
        self.on_open = on_open
        self.on_close = on_close
        if nghttp2_option_new(&option) != 0:
            raise MemoryError()
        try:
            nghttp2_option_set_max_send_header_block_length(option, 1 << 16)
            # No stream priorities: closed streams need not be remembered.
            nghttp2_option_set_no_closed_streams(option, 1)
            if nghttp2_session_server_new2(&self.session, _callbacks(), <void*>self, option) != 0:
                raise MemoryError()
        finally:
            nghttp2_option_del(option)
        iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS
        iv[0].value = max_concurrent_streams
        iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE
        iv[1].value = initial_window_size
        iv[2].settings_id = NGHTTP2_SETTINGS_MAX_FRAME_SIZE
        iv[2].value = max_frame_size
        iv[3].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE
        iv[3].value = max_header_list_size
        iv[4].settings_id = NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES
        iv[4].value = 1
        nghttp2_submit_settings(self.session, NGHTTP2_FLAG_NONE, iv, 5)
        if connection_window_size > 65535:
            nghttp2_session_set_local_window_size(self.session, NGHTTP2_FLAG_NONE, 0,
                                                  connection_window_size)

    def __dealloc__(self):
        if self.session != NULL:
            nghttp2_session_del(self.session)
            self.session = NULL

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        if self.on_open is not None:
            self.on_open(self)
        self._write_out()  # our SETTINGS

    def data_received(self, data):
        cdef ssize_t rv
        cdef const uint8_t* p
        cdef Py_ssize_t n
        if self.session == NULL or self.transport is None:
            return
        if type(data) is not bytes:
            data = bytes(data)
        p = <const uint8_t*>PyBytes_AS_STRING(data)
        n = PyBytes_GET_SIZE(data)
        self.in_recv = True
        try:
            rv = nghttp2_session_mem_recv(self.session, p, <size_t>n)
        finally:
            self.in_recv = False
        if rv < 0:
            # A connection error: nghttp2 has queued a GOAWAY where one fits.
            _log.debug("HTTP/2 connection error: %s", nghttp2_strerror(<int>rv).decode())
            self._write_out()
            self._close_transport()
            return
        self._write_out()
        if self.close_after_flush:
            self.close()

    def eof_received(self):
        return False  # the transport closes itself

    def connection_lost(self, exc):
        self._teardown()

    def pause_writing(self):
        self.write_paused = True
        self._update_reading()

    def resume_writing(self):
        self.write_paused = False
        self._write_out()
        self._update_reading()

    # -- control ---------------------------------------------------------------------

    def shutdown(self):
        """GOAWAY: no new streams; those open run to their end, then the
        connection closes."""
        if self.session == NULL or self.goaway_sent:
            return
        self.goaway_sent = True
        nghttp2_submit_goaway(self.session, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(self.session),
                              NGHTTP2_NO_ERROR, NULL, 0)
        self._write_out()

    def close(self):
        """Closes the transport now; open streams are cancelled."""
        self._close_transport()
        self._teardown()

    def ping(self):
        """Sends a PING; its ACK goes to ``keepalive.ping_acked()``."""
        if self.session == NULL:
            return
        nghttp2_submit_ping(self.session, NGHTTP2_FLAG_NONE, NULL)
        self._write_out()

    def goaway(self, uint32_t error_code, bytes debug=b""):
        """GOAWAY with an error code (e.g. ENHANCE_YOUR_CALM), then closes
        once it is written; open streams are cancelled."""
        if self.session == NULL:
            return
        self.goaway_sent = True
        nghttp2_submit_goaway(self.session, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(self.session),
                              error_code, <const uint8_t*>PyBytes_AS_STRING(debug),
                              <size_t>PyBytes_GET_SIZE(debug))
        if self.in_recv:  # the session is mid-receive: data_received closes it after
            self.close_after_flush = True
            return
        self._write_out()
        self.close()

    # -- internals ---------------------------------------------------------------------

    cdef int _close_transport(self) except -1:
        t = self.transport
        if t is not None and not t.is_closing():
            t.close()
        return 0

    cdef int _teardown(self) except -1:
        cdef Stream stream
        if self.session == NULL:
            return 0
        for stream in list(self.streams):
            if nghttp2_session_get_stream_user_data(self.session, stream.id) != NULL:
                nghttp2_session_set_stream_user_data(self.session, stream.id, NULL)
                self._stream_closed(stream, NGHTTP2_CANCEL)
                Py_DECREF(stream)
        self.streams.clear()
        nghttp2_session_del(self.session)
        self.session = NULL
        self.transport = None
        self.outbuf.clear()
        keepalive, self.keepalive = self.keepalive, None
        if keepalive is not None:
            keepalive.stop()
        cb, self.on_close = self.on_close, None
        if cb is not None:
            cb(self)
        return 0

    cdef int _stream_closed(self, Stream stream, uint32_t error_code) except -1:
        stream.closed = True
        stream.reset_code = error_code
        self.streams.discard(stream)
        self.open_streams -= 1
        stream._release()
        if not stream.finished:
            cb, stream.cancel_callback = stream.cancel_callback, None
            if cb is not None:
                try:
                    cb()
                except BaseException:
                    _log.exception("gRPC cancel callback failed")
        stream.cancel_callback = None
        return 0

    cdef int _update_reading(self) except -1:
        t = self.transport
        if t is None:
            return 0
        if not self.read_paused and self.write_paused and self.pending_bytes > PAUSE_READ_BYTES:
            self.read_paused = True
            t.pause_reading()
        elif self.read_paused and (not self.write_paused or
                                   self.pending_bytes < RESUME_READ_BYTES):
            self.read_paused = False
            t.resume_reading()
        return 0

    cdef size_t _status_message_limit(self):
        """MAX_STATUS_MESSAGE, or less when the peer's header list limit
        (SETTINGS_MAX_HEADER_LIST_SIZE) leaves less beside the other trailers."""
        cdef uint32_t peer = nghttp2_session_get_remote_settings(
            self.session, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE)
        cdef size_t room = MAX_STATUS_MESSAGE
        if peer < room + 512:
            room = peer - 512 if peer > 1024 else 512
        return room

    cdef int _flush(self) except -1:
        """What a stream's answer calls: the write waits for the end of the
        loop's turn when a WriteBatch holds this connection's writes and
        other calls are open on it (their answers may come in the same
        turn), else _write_out() now: a lone call is answered at once."""
        if self.in_recv or self.session == NULL:
            return 0  # data_received writes once nghttp2 is done
        if self.write_batch is not None and (self.flush_waiting or self.open_streams > 1):
            if not self.flush_waiting:
                self.write_batch.hold(self)
            return 0
        return self._write_out()

    cdef int _write_out(self) except -1:
        """Serializes what nghttp2 has queued and writes it to the transport."""
        cdef int rv
        if self.in_recv or self.session == NULL:
            return 0  # data_received writes once nghttp2 is done
        t = self.transport
        if t is None:
            return 0
        while True:
            self.blocked = False
            rv = nghttp2_session_send(self.session)
            if rv != 0:
                _log.debug("HTTP/2 send failed: %s", nghttp2_strerror(rv).decode())
                self.outbuf.clear()
                self._close_transport()
                return 0
            if self.outbuf.size():
                data = PyBytes_FromStringAndSize(self.outbuf.data(),
                                                 <Py_ssize_t>self.outbuf.size())
                self.outbuf.clear()
                t.write(data)
            if not self.blocked or self.write_paused or self.transport is None:
                break
        if self.read_paused or self.write_paused:
            self._update_reading()
        if self.session != NULL and not nghttp2_session_want_read(self.session) and \
                not nghttp2_session_want_write(self.session):
            self._close_transport()  # after GOAWAY, once the last stream is done
        return 0

    cdef int _handler_failed(self, Stream stream, object exc) except -1:
        _log.error("gRPC handler for %r failed", stream.path, exc_info=exc)
        if not stream.closed and not stream.finished and not stream.finishing:
            stream.finish(INTERNAL, f"{type(exc).__name__}: {exc}")
        return 0

    cdef int _stream_error(self, Stream stream, int status, str message) except -1:
        stream.finish(status, message)
        return 0

    cdef int _http_error(self, Stream stream, const char* status) except -1:
        cdef nghttp2_nv nva[1]
        nva[0] = _nv(":status", 7, status, 3)
        stream.finished = True
        stream.headers_sent = True
        nghttp2_submit_response(self.session, stream.id, nva, 1, NULL)
        return 0

    cdef int _headers_done(self, Stream stream) except -1:
        if not stream.method_ok:
            return self._http_error(stream, "405")
        if not stream.content_type_ok:
            return self._http_error(stream, "415")
        route = self.routes.get(stream.path)
        if route is None:
            path = stream.path.decode("latin-1") if stream.path is not None else ""
            return self._stream_error(stream, UNIMPLEMENTED, f"Method not found: {path}")
        enc = stream.encoding
        if enc is not None and enc != b"identity" and enc != b"gzip" and enc != b"deflate":
            return self._stream_error(
                stream, UNIMPLEMENTED,
                f"Compression algorithm '{enc.decode('latin-1')}' is not supported")
        stream.route = route
        stream.gzip_out = stream.accepts_gzip  # only ever set when compression is on
        if len(route) > 2:
            try:
                route[2](stream)
            except Exception as e:
                self._handler_failed(stream, e)
        return 0

    cdef int _data(self, Stream stream, const uint8_t* data, size_t n) except -1:
        cdef size_t k, length, alloc, have
        cdef PyObject* raw
        while n > 0 and not stream.finishing:
            if stream.prefix_fill < 5:
                k = 5 - stream.prefix_fill
                if k > n:
                    k = n
                memcpy(stream.prefix + stream.prefix_fill, data, k)
                stream.prefix_fill += k
                data += k
                n -= k
                if stream.prefix_fill < 5:
                    break
                if stream.prefix[0] > 1:
                    return self._stream_error(stream, INTERNAL,
                                              "invalid gRPC message compression flag")
                length = ((<size_t>stream.prefix[1] << 24) | (<size_t>stream.prefix[2] << 16) |
                          (<size_t>stream.prefix[3] << 8) | <size_t>stream.prefix[4])
                if length > self.max_message_size:
                    return self._stream_error(
                        stream, RESOURCE_EXHAUSTED,
                        f"Received message larger than max ({length} vs. "
                        f"{self.max_message_size})")
                if stream.route[0] == UNARY and stream.messages >= 1:
                    return self._stream_error(
                        stream, INTERNAL, "more than one request message for a unary call")
                stream.msg_compressed = stream.prefix[0] == 1
                stream.msg_len = length
                stream.msg_fill = 0
                alloc = length if length < FIRST_ALLOC else FIRST_ALLOC
                stream.msg = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>alloc)
                if length == 0:
                    self._message_done(stream)
                continue
            k = stream.msg_len - stream.msg_fill
            if k > n:
                k = n
            have = <size_t>PyBytes_GET_SIZE(stream.msg)
            if stream.msg_fill + k > have:
                # Grow in place (the stream holds the only reference).
                alloc = have * 2
                if alloc < stream.msg_fill + k:
                    alloc = stream.msg_fill + k
                if alloc > stream.msg_len:
                    alloc = stream.msg_len
                raw = <PyObject*>stream.msg
                Py_INCREF(<object>raw)
                stream.msg = None
                _PyBytes_Resize(&raw, <Py_ssize_t>alloc)
                stream.msg = <object>raw
                Py_DECREF(<object>raw)
            memcpy(PyBytes_AS_STRING(stream.msg) + stream.msg_fill, data, k)
            stream.msg_fill += k
            data += k
            n -= k
            if stream.msg_fill == stream.msg_len:
                self._message_done(stream)
        return 0

    cdef int _message_done(self, Stream stream) except -1:
        msg = stream.msg
        stream.msg = None
        stream.prefix_fill = 0
        if stream.msg_compressed:
            msg = self._decompress(stream, msg)
            if msg is None:
                return 0
        stream.messages += 1
        if stream.route[0] == UNARY:
            stream.first_message = msg
        else:
            stream.route[1](stream, msg)
        return 0

    cdef object _decompress(self, Stream stream, bytes msg):
        import zlib
        enc = stream.encoding
        if enc is None or enc == b"identity":
            self._stream_error(stream, INTERNAL,
                               "compressed message received without grpc-encoding")
            return None
        d = zlib.decompressobj(31 if enc == b"gzip" else 15)
        try:
            out = d.decompress(msg, self.max_message_size + 1)
        except zlib.error as e:
            self._stream_error(stream, INTERNAL, f"failed to decompress the message: {e}")
            return None
        if len(out) > self.max_message_size:
            self._stream_error(
                stream, RESOURCE_EXHAUSTED,
                f"Received message larger than max (more than {self.max_message_size} bytes "
                "after decompression)")
            return None
        return out

    cdef int _end_of_stream(self, Stream stream) except -1:
        stream.half_closed = True
        if stream.route is None or stream.finished or stream.finishing:
            return 0
        if stream.prefix_fill != 0:
            return self._stream_error(stream, INTERNAL,
                                      "the request ended inside a gRPC message")
        route = stream.route
        kind, handler = route[0], route[1]
        if kind == UNARY:
            if stream.messages != 1:
                return self._stream_error(stream, INTERNAL,
                                          "a unary call needs exactly one request message")
            msg = stream.first_message
            stream.first_message = None
            handler(stream, msg)
        else:
            handler(stream, None)
        return 0
