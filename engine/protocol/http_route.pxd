# engine/protocol/http_route.pyx: the HTTP infer route, which the pump's
# infer lane (http_lane.pyx) shares.

from pyserver.engine.admission cimport Admission, Route
from pyserver.engine.types cimport DoneCallback


cdef class Slot:
    cdef public object data
    cdef public bint close


cdef class RouteFrontend:
    cdef readonly object max_input_size
    cdef readonly object shared_memory
    cdef readonly object model_config
    cdef readonly object header_forwarder
    cdef readonly object submitter
    # the server's compiled admission (Server.admission: route, submit,
    # enqueue_plain), or None where requests take the general way
    cdef readonly Admission admission


cdef RouteFrontend route_frontend(frontend)


cdef class InferRoute:
    cdef object decompress  # (content-encoding, body, limit) -> body
    cdef object response_encoding  # accept-encoding header -> "gzip"/"deflate"/None
    cdef dict _encodings  # what response_encoding said of each header value seen (bounded)
    cdef object compress  # (encoding, body) -> bytes
    cdef readonly int pipeline_high

    cdef object take(self, conn, RouteFrontend rf, dict headers, body, model, version,
                     recv_ns, bint keep_alive, bint http10)
    cdef tuple begin(self, conn, RouteFrontend rf, dict headers, body, model, version,
                     recv_ns, int reader_held=*, Route route=*)
    cdef object direct(self, RouteFrontend rf, dict headers, body, Route route,
                       bint keep_alive, bint http10)
    cdef object encoding_of(self, dict headers)
    cdef list answer_data(self, conn, fut, request, encoding, bint keep_alive, bint http10)


cdef class InferDone(DoneCallback):
    cdef InferRoute route
    cdef object conn
    cdef Slot slot
    cdef object request
    cdef object encoding
    cdef bint http10


cdef int when_done(fut, done) except -1
