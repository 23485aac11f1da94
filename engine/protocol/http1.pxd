# HTTP/1.1 request parsing over llhttp (Debian's node-llhttp sources).
from libc.stdint cimport uint8_t, uint64_t
from libcpp.string cimport string


cdef extern from "llhttp.h" nogil:
    ctypedef struct llhttp_t:
        uint64_t content_length       # the chunk's size, in on_chunk_header
        uint8_t method
        uint8_t http_major
        uint8_t http_minor
        uint8_t upgrade
        void* data


cdef class RequestParser:
    cdef llhttp_t parser
    cdef object protocol              # on_request(...), on_continue()
    cdef object reject                # reject(status, message) -> the exception to raise
    cdef Py_ssize_t max_header_size
    cdef Py_ssize_t max_body_size
    cdef Py_ssize_t max_json_size     # bodies of routes other than .../infer; -1: no bound
    cdef object error                 # raised in a callback, re-raised by feed
    # the request being parsed
    cdef string url
    cdef string field
    cdef string value
    cdef dict headers
    # the headers as sent, (name, value) in order, when asked for (header
    # forwarding names parameters as the client spelled them); else None
    cdef public list raw_headers
    cdef list body
    # a body whose Content-Length is known and large is copied into one
    # buffer of that size as it arrives (no chunks to join: half the peak
    # memory, and a buffer the allocator returns to the OS once freed)
    cdef bytes body_buffer
    cdef Py_ssize_t body_filled
    cdef str method
    cdef bint keep_alive
    cdef bint http10
    cdef bint in_head
    cdef bint in_message              # between a request's first byte and its end
    cdef Py_ssize_t head_size
    cdef Py_ssize_t head_raw
    cdef Py_ssize_t body_size
    cdef Py_ssize_t chunk_count       # non-empty chunks of a chunked body so far

    cdef object head_too_large(self)
    cdef int count_head(self, size_t n) noexcept
    cdef int check_length(self, bytes value) except -1
