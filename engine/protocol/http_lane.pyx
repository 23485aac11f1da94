# cython: language_level=3
"""The event loop's side of the HTTP infer lane (csrc's InferLane): infer
requests read whole by a C reader in front of each connection, run and
answered here with no Python frame of the connection's.

Each connection's bytes pass a lane reader first: on the socket pump's
thread with a pump (``LaneHost(pump, ...)``, the listener's reader source;
the requests it takes arrive here, many per eventfd wake-up), or, without
one, in the connection's own ``data_received`` on the loop
(``LaneHost(None, ...)``: ``wrap`` puts a ``LaneConnection`` in front of
each HttpConnection, which drains what its reader took at once). The
frontend publishes each request target its router has sent to the infer
route (``add_route``). A taken request goes through the infer route's own
steps (http_route.InferRoute: decode, submit, the answer or its error) on
the connection's HttpConnection, and its answer is written with the
connection handed back to its reader. Everything the reader does not take
reaches the HttpConnection as bytes, as without a lane; it hands the
connection back once it has answered all it was given
(HttpConnection._hand_back).
"""
import logging

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.errno cimport EINTR, errno
from libc.stdint cimport uint32_t, uint64_t
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.protocol.http_infer cimport HttpPending
from pyserver.engine.protocol.http_route cimport (
    InferRoute,
    RouteFrontend,
    route_frontend,
    when_done,
)
from pyserver.engine.socket_pump cimport (
    ConnectionReader,
    PumpTransport,
    ReaderSource,
    SocketPump,
    progress_tuple,
)
from pyserver.engine.status cimport Status, check_status
from pyserver.engine.types cimport DoneCallback

from pyserver.engine import now_ns


cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void* buf, size_t n, int flags)
    enum: MSG_NOSIGNAL

_log = logging.getLogger("pyserver")


cdef extern from "pyserver/protocol/http1_infer_lane.h" namespace "pyserver::http1" nogil:
    cdef cppclass LaneRequest:
        uint64_t connection
        uint32_t route
        string target
        string body
        bint has_header_length
        string header_length
        bint has_accept_encoding
        string accept_encoding
        uint64_t received_ns

    cdef cppclass InferLane:
        @staticmethod
        Status Create(size_t max_header_size, size_t max_body_size,
                      shared_ptr[InferLane]* lane, bint notify)
        int notify_fd()
        void AddRoute(const string& target, uint32_t route)
        void ClearRoutes()
        unique_ptr[ConnectionReader] NewReader()
        size_t Drain(vector[LaneRequest]* out)
        uint64_t taken()


cdef inline bytes _bytes(const string& s):
    return PyBytes_FromStringAndSize(s.data(), <Py_ssize_t>s.size())


cdef class AnswerSink:
    """Where a lane request's answer goes: ``answer`` writes it and hands
    the connection back to its reader."""

    cdef int answer(self, uint64_t connection, list data) except -1:
        raise NotImplementedError


cdef class PumpSink(AnswerSink):
    cdef SocketPump pump

    cdef int answer(self, uint64_t connection, list data) except -1:
        return self.pump.write_answer(connection, data)


cdef class LaneHost(ReaderSource):
    """The lane of one HTTP frontend (see the module)."""

    cdef shared_ptr[InferLane] lane
    cdef SocketPump pump  # None: readers on the loop (wrap)
    cdef PumpSink pump_sink
    cdef InferRoute route
    cdef RouteFrontend frontend  # the connections' frontend's, from its first request
    cdef object loop
    cdef int fd
    cdef dict routes  # route id -> (model, version)
    cdef uint32_t next_route
    cdef dict connections  # without a pump: connection id -> LaneConnection
    cdef uint64_t next_connection
    cdef bint running  # in run_pending

    def __cinit__(self, SocketPump pump, InferRoute route, Py_ssize_t max_header_size,
                  Py_ssize_t max_body_size):
        check_status(InferLane.Create(<size_t>max_header_size, <size_t>max_body_size,
                                      &self.lane, pump is not None))
        self.pump = pump
        self.route = route
        self.routes = {}
        self.connections = {}
        self.fd = -1
        if pump is not None:
            self.pump_sink = PumpSink.__new__(PumpSink)
            self.pump_sink.pump = pump
            self.loop = pump.loop
            self.fd = self.lane.get().notify_fd()
            self.loop.add_reader(self.fd, self.run_pending)

    cdef unique_ptr[ConnectionReader] new_reader(self):
        return self.lane.get().NewReader()

    def wrap(self, conn):
        """Without a pump: the protocol to give the loop for HttpConnection
        ``conn``, its lane reader in front."""
        cdef LaneConnection lc = LaneConnection.__new__(LaneConnection)
        self.next_connection += 1
        lc.id = self.next_connection
        lc.host = self
        lc.conn = conn
        lc.fd = -1  # until connection_made knows the socket
        lc.reader = self.lane.get().NewReader()
        self.connections[lc.id] = lc
        return lc

    @property
    def taken(self):
        """Requests the lane's readers have taken."""
        return self.lane.get().taken()

    def add_route(self, bytes target, model, version):
        """``target`` (as sent) is an infer request for ``model``/``version``."""
        cdef uint32_t route = self.next_route
        self.next_route += 1
        self.routes[route] = (model, version)
        self.lane.get().AddRoute(target, route)

    def clear_routes(self):
        self.lane.get().ClearRoutes()
        self.routes = {}

    def close(self):
        """No more requests through the lane: its readers pass every later
        request to their connections."""
        self.clear_routes()
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            self.fd = -1

    def run_pending(self):
        """Runs every request the readers have taken (once at a time: a
        request answered at once, whose reader then takes the next, adds
        to this loop rather than nesting)."""
        self._run_pending()

    cdef int _run_pending(self) except -1:
        if self.running:
            return 0
        cdef vector[LaneRequest] requests
        cdef size_t i
        self.running = True
        try:
            while self.lane.get().Drain(&requests):
                for i in range(requests.size()):
                    try:
                        self._run(requests[i])
                    except Exception:
                        _log.exception("HTTP infer lane: request not answered")
                requests.clear()
        finally:
            self.running = False
        return 0

    cdef int _run(self, LaneRequest& r) except -1:
        cdef uint64_t connection = r.connection
        cdef AnswerSink sink
        if self.pump is not None:
            t = self.pump.transports.get(connection)
            if t is None or (<PumpTransport>t).closing:
                return 0  # the connection is gone: nobody to answer
            sink = self.pump_sink
            conn = (<PumpTransport>t).protocol
        else:
            lc = self.connections.get(connection)
            if lc is None:
                return 0
            sink = <AnswerSink>lc
            conn = (<LaneConnection>lc).conn
        headers = self._headers(r)
        body = _bytes(r.body)
        try:
            route = self.routes.get(r.route)
            if route is None:
                # its target was forgotten since it was read (the route
                # cache was reset): the connection routes it again
                route = conn.infer_route(_bytes(r.target))
            model, version = route
            if self.frontend is None:
                self.frontend = route_frontend(conn.frontend)
            data = self.route.take(conn, self.frontend, headers, body, model, version,
                                   r.received_ns, True, False)
            if type(data) is list:  # run as it was read: answered now
                sink.answer(connection, data)
                return 0
            request, fut = data
        except Exception as e:
            sink.answer(connection, conn.error_data(e, True, False))
            return 0
        # a record's answer is never compressed (InferRoute.direct took it so)
        encoding = None if type(request) is HttpPending else self.route.encoding_of(headers)
        when_done(fut, LaneDone(self.route, sink, connection, conn, request, encoding))
        return 0

    cdef dict _headers(self, LaneRequest& r):
        cdef dict headers = {}
        if r.has_header_length:
            headers[b"inference-header-content-length"] = _bytes(r.header_length)
        if r.has_accept_encoding:
            headers[b"accept-encoding"] = _bytes(r.accept_encoding)
        return headers


cdef class LaneDone(DoneCallback):
    """One lane request's done-callback: its answer onto its connection."""

    cdef InferRoute route
    cdef AnswerSink sink
    cdef uint64_t connection
    cdef object conn
    cdef object request
    cdef object encoding

    def __cinit__(self, InferRoute route, AnswerSink sink, uint64_t connection, conn, request,
                  encoding):
        self.route = route
        self.sink = sink
        self.connection = connection
        self.conn = conn
        self.request = request
        self.encoding = encoding

    cdef int done(self, fut) except -1:
        request = self.request
        data = self.route.answer_data(self.conn, fut, request, self.encoding, True, False)
        if request.trace is None:
            self.sink.answer(self.connection, data)
            return 0
        sending = now_ns()
        self.sink.answer(self.connection, data)
        self.conn.tracer.sent(request, "HTTP_SEND_START", sending, "HTTP_SEND_END", now_ns())
        return 0


cdef list _send_direct(int fd, list data):
    """Sends ``data``'s buffers on the socket now, as far as it takes them
    without blocking; what is left (from the first buffer not sent whole,
    or after any error, which the transport then meets and reports itself)
    is returned for the transport to write. The transport's write costs the
    loop about 1.5 µs per answer more than this (its buffering and checks,
    needed only when the socket is full)."""
    cdef Py_buffer view
    cdef ssize_t n
    cdef Py_ssize_t i
    for i in range(len(data)):
        PyObject_GetBuffer(data[i], &view, PyBUF_SIMPLE)
        try:
            while True:
                n = send(fd, view.buf, <size_t>view.len, MSG_NOSIGNAL)
                if n >= 0 or errno != EINTR:
                    break
            if n == view.len:
                continue
            if n <= 0:  # EAGAIN, or an error the transport will meet
                return data[i:]
            return [memoryview(data[i])[n:], *data[i + 1:]]
        finally:
            PyBuffer_Release(&view)
    return []


cdef class LaneConnection(AnswerSink):
    """Without a pump: the asyncio protocol of one connection, its lane
    reader in front of its HttpConnection (``conn``), which gets every
    byte the reader does not take and every protocol event."""

    cdef readonly uint64_t id
    cdef LaneHost host
    cdef unique_ptr[ConnectionReader] reader
    cdef readonly object conn
    cdef object transport
    # the socket an answer is sent on directly while the transport holds
    # nothing unsent (-1: always through the transport, as over TLS)
    cdef int fd
    cdef bint closed
    cdef bint eof_held  # the peer's EOF, held until the answer is out
    cdef bint paused  # reading paused: the reader's buffer is full

    def connection_made(self, transport):
        self.transport = transport
        self.fd = -1
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("ssl_object") is None:
            self.fd = sock.fileno()
        conn = self.conn
        conn.connection_made(transport)
        if conn._transport is None:  # refused (over the connection cap)
            self._forget()
            return
        conn._reader = self

    def data_received(self, data):
        if self.closed:
            return
        cdef string host
        cdef const char* p = PyBytes_AS_STRING(data) if type(data) is bytes else NULL
        if p == NULL:
            data = bytes(data)
            p = PyBytes_AS_STRING(data)
        cdef bint more = self.reader.get().Read(self.id, p, <size_t>PyBytes_GET_SIZE(data),
                                                &host)
        if host.size():
            self.conn.data_received(_bytes(host))
        if not more and not self.paused:
            self.paused = True
            self.transport.pause_reading()
        self.host._run_pending()

    def eof_received(self):
        cdef string host
        if self.closed:
            return None
        cdef bint hold = self.reader.get().HoldEof(&host)
        if host.size():
            self.conn.data_received(_bytes(host))
        if hold:
            self.eof_held = True
            return True  # half open until the answer is out
        return self.conn.eof_received()

    def connection_lost(self, exc):
        self._forget()
        self.conn.connection_lost(exc)

    def pause_writing(self):
        self.conn.pause_writing()

    def resume_writing(self):
        self.conn.resume_writing()

    cdef void _forget(self):
        self.closed = True
        self.host.connections.pop(self.id, None)

    # -- the reader, as HttpConnection sees it (PumpTransport's two methods)

    def resume_reader(self, uint64_t consumed):
        if not self.closed:
            self._resume(False, consumed)

    def reader_progress(self):
        return progress_tuple(self.reader.get().Progress())

    # -- answers

    cdef int answer(self, uint64_t connection, list data) except -1:
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return 0
        if self.fd >= 0 and t.get_write_buffer_size() == 0:
            data = _send_direct(self.fd, data)
        if len(data) == 1:
            t.write(data[0])
        elif data:
            t.writelines(data)
        self._resume(True, 0)
        return 0

    cdef int _resume(self, bint answered, uint64_t consumed) except -1:
        cdef string host
        self.reader.get().Resume(self.id, answered, consumed, &host)
        if host.size():
            self.conn.data_received(_bytes(host))
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        if self.eof_held:
            host.clear()
            if not self.reader.get().HoldEof(&host):
                self.eof_held = False
                if host.size():
                    self.conn.data_received(_bytes(host))
                if not self.conn.eof_received():
                    self.transport.close()
        self.host._run_pending()
        return 0
