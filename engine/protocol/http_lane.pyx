# cython: language_level=3
"""The event loop's side of the HTTP infer lane (csrc's InferLane): infer
requests read whole on the socket pump's threads, run and answered here
with no Python frame of the connection's.

The frontend hands the listener a ``LaneHost`` as its pump's reader source,
so every connection's bytes pass a lane reader on its pump thread first,
and publishes each request target its router has sent to the infer route
(``add_route``). A request the reader takes arrives here, one eventfd
wake-up for all that are waiting; it goes through the infer route's own
steps (http_route.InferRoute: decode, submit, the answer or its error) on
the connection's HttpConnection, and the answer is queued on the pump with
the connection handed back to its reader in the same call. Everything the
reader does not take reaches the HttpConnection as bytes, as without a
lane; it hands the connection back once it has answered all it was given
(HttpConnection._hand_back).
"""
import logging

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint32_t, uint64_t
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.protocol.http_route cimport InferRoute, _when_done
from pyserver.engine.socket_pump cimport ConnectionReader, PumpTransport, ReaderSource, SocketPump
from pyserver.engine.status cimport Status, check_status

from pyserver.engine import now_ns

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
                      shared_ptr[InferLane]* lane)
        int notify_fd()
        void AddRoute(const string& target, uint32_t route)
        void ClearRoutes()
        unique_ptr[ConnectionReader] NewReader()
        size_t Drain(vector[LaneRequest]* out)
        uint64_t taken()


cdef inline bytes _bytes(const string& s):
    return PyBytes_FromStringAndSize(s.data(), <Py_ssize_t>s.size())


cdef class LaneHost(ReaderSource):
    """The lane of one HTTP frontend's pump (see the module)."""

    cdef shared_ptr[InferLane] lane
    cdef SocketPump pump
    cdef InferRoute route
    cdef object loop
    cdef int fd
    cdef dict routes  # route id -> (model, version)
    cdef uint32_t next_route

    def __cinit__(self, SocketPump pump, InferRoute route, Py_ssize_t max_header_size,
                  Py_ssize_t max_body_size):
        check_status(InferLane.Create(<size_t>max_header_size, <size_t>max_body_size,
                                      &self.lane))
        self.pump = pump
        self.route = route
        self.loop = pump.loop
        self.routes = {}
        self.next_route = 0
        self.fd = self.lane.get().notify_fd()
        self.loop.add_reader(self.fd, self._on_requests)

    cdef unique_ptr[ConnectionReader] new_reader(self):
        return self.lane.get().NewReader()

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
        """No more requests from the lane (its readers hand the rest of
        their connections' bytes to the host, or go with the pump)."""
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            self.fd = -1
            self.clear_routes()

    def _on_requests(self):
        cdef vector[LaneRequest] requests
        self.lane.get().Drain(&requests)
        cdef size_t i
        for i in range(requests.size()):
            try:
                self._run(requests[i])
            except Exception:
                _log.exception("HTTP infer lane: request not answered")

    cdef int _run(self, LaneRequest& r) except -1:
        cdef uint64_t connection = r.connection
        t = self.pump.transports.get(connection)
        if t is None or (<PumpTransport>t).closing:
            return 0  # the connection is gone: nobody to answer
        conn = (<PumpTransport>t).protocol
        headers = self._headers(r)
        body = _bytes(r.body)
        route = self.routes.get(r.route)
        if route is None:
            # its target was forgotten since it was read (the route cache
            # was reset): the connection routes it as it would any request
            conn.on_request("POST", _bytes(r.target), headers, body, True, False)
            return 0
        model, version = route
        try:
            request, fut = self.route.begin(conn, headers, body, model, version,
                                            r.received_ns)
        except Exception as e:
            self.pump.write_answer(connection, conn.error_data(e, True, False))
            return 0
        _when_done(fut, LaneDone(self, connection, conn, request,
                                 self.route.encoding_of(headers)))
        return 0

    cdef dict _headers(self, LaneRequest& r):
        cdef dict headers = {}
        if r.has_header_length:
            headers[b"inference-header-content-length"] = _bytes(r.header_length)
        if r.has_accept_encoding:
            headers[b"accept-encoding"] = _bytes(r.accept_encoding)
        return headers


cdef class LaneDone:
    """One lane request's done-callback: its answer onto its connection."""

    cdef LaneHost host
    cdef uint64_t connection
    cdef object conn
    cdef object request
    cdef object encoding

    def __cinit__(self, LaneHost host, uint64_t connection, conn, request, encoding):
        self.host = host
        self.connection = connection
        self.conn = conn
        self.request = request
        self.encoding = encoding

    def __call__(self, fut):
        request = self.request
        data = self.host.route.answer_data(self.conn, fut, request, self.encoding, True, False)
        if request.trace is None:
            self.host.pump.write_answer(self.connection, data)
            return
        sending = now_ns()
        self.host.pump.write_answer(self.connection, data)
        self.conn.tracer.sent(request, "HTTP_SEND_START", sending, "HTTP_SEND_END", now_ns())
