# cython: language_level=3
"""HTTP/1.1 request parsing for the HTTP frontend, over llhttp (the C
parser of Node.js, which httptools wraps) with its callbacks in C.

httptools calls a Python method for every parser event: message begin, URL,
each header, headers complete, each body piece, message complete: ~4.5 µs of
the event loop's thread for a plain infer request with three headers, against
~0.7 µs for the C parse alone. Here the events collect the request in C and
the connection gets one call per request: ``on_request(method, url, headers,
body, keep_alive, http10)``, headers keyed by their lower-case names. The
limits the frontend sets are enforced as the request arrives (a head over
``max_header_size`` is refused with 431 before it ends, a body over
``max_body_size`` with 413 before it is read, an out-of-range Content-Length
with Triton's 400), raising ``reject(status, message)``; a request for
``Expect: 100-continue`` calls ``on_continue()`` once its head is in.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy
from libcpp.string cimport string

from pyserver.kernel.errors import request_json_too_large


cdef extern from "llhttp.h" nogil:
    ctypedef enum llhttp_errno_t:
        HPE_OK
        HPE_PAUSED_UPGRADE
        HPE_USER

    ctypedef enum llhttp_type_t:
        HTTP_REQUEST


# The callbacks run inside llhttp_execute, which feed() calls holding the GIL.
cdef extern from "llhttp.h":
    ctypedef int (*llhttp_data_cb)(llhttp_t*, const char* at, size_t length) noexcept
    ctypedef int (*llhttp_cb)(llhttp_t*) noexcept

    ctypedef struct llhttp_settings_t:
        llhttp_cb on_message_begin
        llhttp_data_cb on_url
        llhttp_data_cb on_header_field
        llhttp_data_cb on_header_value
        llhttp_cb on_header_value_complete
        llhttp_cb on_headers_complete
        llhttp_data_cb on_body
        llhttp_cb on_message_complete
        llhttp_cb on_chunk_header


cdef extern from "llhttp.h" nogil:
    void llhttp_settings_init(llhttp_settings_t* settings)
    void llhttp_init(llhttp_t* parser, llhttp_type_t type, const llhttp_settings_t* settings)
    llhttp_errno_t llhttp_execute(llhttp_t* parser, const char* data, size_t length)
    int llhttp_should_keep_alive(const llhttp_t* parser)
    const char* llhttp_get_error_reason(const llhttp_t* parser)
    ctypedef enum llhttp_method_t:
        pass
    const char* llhttp_method_name(llhttp_method_t method)
    void llhttp_set_lenient_chunked_length(llhttp_t* parser, int enabled)


class ParseError(Exception):
    """The bytes are not an HTTP/1.1 request (llhttp's reason)."""


class Upgrade(Exception):
    """The request asked to switch protocols (Upgrade, CONNECT): it was
    handed over as usual; nothing after it is HTTP/1.1."""


cdef int64_t INT32_MAX = (1 << 31) - 1
# Triton's cap on a chunked body's non-empty chunks (2.6x): each chunk costs
# an object (here a bytes), so a body of one-byte chunks is refused early.
MAX_CHUNKS = 1 << 16
# Bodies from this size up (by Content-Length) go into one buffer (body_buffer).
cdef Py_ssize_t BODY_BUFFER_MIN = 256 * 1024
cdef dict _METHODS = {}  # llhttp method number -> name


cdef str _method_name(uint8_t method):
    name = _METHODS.get(method)
    if name is None:
        name = _METHODS[method] = llhttp_method_name(<llhttp_method_t>method).decode("latin-1")
    return name


cdef inline RequestParser _of(llhttp_t* p):
    return <RequestParser>p.data


cdef int _on_message_begin(llhttp_t* p) noexcept:
    cdef RequestParser self = _of(p)
    self.url.clear()
    self.field.clear()
    self.value.clear()
    self.headers = {}
    if self.raw_headers is not None:
        self.raw_headers = []
    self.body = []
    self.body_buffer = None
    self.in_head = True
    self.in_message = True
    self.head_size = 0
    self.head_raw = 0
    self.body_size = 0
    self.chunk_count = 0
    return 0


cdef int _on_url(llhttp_t* p, const char* at, size_t n) noexcept:
    cdef RequestParser self = _of(p)
    self.url.append(at, n)
    return self.count_head(n)


# RFC 9110 token characters, the only ones a header name may hold (this
# llhttp lets a space inside a name through; newer ones refuse it)
cdef bint _TOKEN[256]
for _c in range(256):
    _TOKEN[_c] = (chr(_c).isascii() and chr(_c).isalnum()) or chr(_c) in "!#$%&'*+-.^_`|~"


cdef int _on_header_field(llhttp_t* p, const char* at, size_t n) noexcept:
    cdef RequestParser self = _of(p)
    cdef size_t i
    for i in range(n):
        if not _TOKEN[<unsigned char>at[i]]:
            self.error = ParseError("Invalid header token")
            return -1
    self.field.append(at, n)
    return self.count_head(n)


cdef int _on_header_value(llhttp_t* p, const char* at, size_t n) noexcept:
    cdef RequestParser self = _of(p)
    self.value.append(at, n)
    return self.count_head(n)


cdef int _on_header_value_complete(llhttp_t* p) noexcept:
    cdef RequestParser self = _of(p)
    cdef size_t i
    cdef char c
    if self.count_head(4):  # ": " and CRLF, as the size limit counts them
        return -1
    if self.raw_headers is not None:
        try:
            self.raw_headers.append(
                (PyBytes_FromStringAndSize(self.field.data(), self.field.size()),
                 PyBytes_FromStringAndSize(self.value.data(), self.value.size())))
        except BaseException as e:
            self.error = e
            return -1
    for i in range(self.field.size()):
        c = self.field[i]
        if b'A' <= c <= b'Z':
            self.field[i] = c + 32
    try:
        self.headers[PyBytes_FromStringAndSize(self.field.data(), self.field.size())] = \
            PyBytes_FromStringAndSize(self.value.data(), self.value.size())
    except BaseException as e:
        self.error = e
        return -1
    self.field.clear()
    self.value.clear()
    return 0


cdef int _on_headers_complete(llhttp_t* p) noexcept:
    cdef RequestParser self = _of(p)
    self.in_head = False
    try:
        self.method = _method_name(p.method)
        self.keep_alive = llhttp_should_keep_alive(p) != 0
        self.http10 = p.http_major == 1 and p.http_minor == 0
        length = self.headers.get(b"content-length")
        coding = self.headers.get(b"transfer-encoding")
        chunked = coding is not None
        if chunked and coding.rsplit(b",", 1)[-1].strip().lower() != b"chunked":
            # RFC 9112 6.3: a request whose last coding is not chunked has
            # no length to read (llhttp, lenient here, would wait for EOF)
            raise self.reject(400, "malformed HTTP request: Transfer-Encoding must end with "
                                   "chunked")
        if length is not None and chunked:
            # Both (python-requests sends so when told to chunk): the chunks
            # frame the body, as in Triton; the connection then closes, as
            # RFC 9112 asks, so no request can hide behind the length.
            self.keep_alive = False
        elif length is not None:
            self.check_length(length)
            n = int(length)
            if n >= BODY_BUFFER_MIN:
                try:
                    self.body_buffer = PyBytes_FromStringAndSize(NULL, n)
                except MemoryError:
                    raise self.reject(413, f"request body of {n} bytes does not fit in the "
                                           "server's memory") from None
                self.body_filled = 0
        expect = self.headers.get(b"expect")
        if expect is not None and expect.lower() == b"100-continue":
            self.protocol.on_continue()
    except BaseException as e:
        self.error = e
        return -1
    return 0


cdef int _on_body(llhttp_t* p, const char* at, size_t n) noexcept:
    cdef RequestParser self = _of(p)
    self.body_size += n
    cdef bytes buffer = self.body_buffer
    if buffer is not None:
        if self.body_filled + <Py_ssize_t>n > PyBytes_GET_SIZE(buffer):
            self.error = ParseError("body longer than its Content-Length")
            return -1
        memcpy(PyBytes_AS_STRING(buffer) + self.body_filled, at, n)
        self.body_filled += n
        return 0
    try:
        if self.body_size > self.max_body_size:  # chunked bodies
            raise self.reject(413, f"request body exceeds the maximum allowed size of "
                                   f"{self.max_body_size} bytes")
        self.body.append(PyBytes_FromStringAndSize(at, n))
    except BaseException as e:
        self.error = e
        return -1
    return 0


cdef int _on_chunk_header(llhttp_t* p) noexcept:
    cdef RequestParser self = _of(p)
    if p.content_length == 0:  # the last chunk
        return 0
    self.chunk_count += 1
    if self.chunk_count <= MAX_CHUNKS:
        return 0
    try:
        self.error = self.reject(400, f"Chunked request body exceeds maximum of {MAX_CHUNKS} "
                                      "non-empty chunks. Send fewer or larger HTTP chunks.")
    except BaseException as e:
        self.error = e
    return -1


cdef int _on_message_complete(llhttp_t* p) noexcept:
    cdef RequestParser self = _of(p)
    cdef list chunks = self.body
    cdef bytes buffer = self.body_buffer
    self.body = []
    self.body_buffer = None
    self.body_size = 0
    self.in_message = False
    try:
        if buffer is not None:
            body = buffer
        elif not chunks:
            body = b""
        elif len(chunks) == 1:
            body = chunks[0]
        else:
            body = b"".join(chunks)
        url = PyBytes_FromStringAndSize(self.url.data(), self.url.size())
        self.protocol.on_request(self.method, url, self.headers, body, self.keep_alive,
                                 self.http10)
    except BaseException as e:
        self.error = e
        return -1
    return 0


cdef llhttp_settings_t _SETTINGS
llhttp_settings_init(&_SETTINGS)
_SETTINGS.on_message_begin = _on_message_begin
_SETTINGS.on_url = _on_url
_SETTINGS.on_header_field = _on_header_field
_SETTINGS.on_header_value = _on_header_value
_SETTINGS.on_header_value_complete = _on_header_value_complete
_SETTINGS.on_headers_complete = _on_headers_complete
_SETTINGS.on_body = _on_body
_SETTINGS.on_message_complete = _on_message_complete
_SETTINGS.on_chunk_header = _on_chunk_header


cdef class RequestParser:
    """The requests of one connection, fed as its bytes arrive."""

    def __cinit__(self, protocol, Py_ssize_t max_header_size, Py_ssize_t max_body_size,
                  reject, bint keep_raw_headers=False, Py_ssize_t max_json_size=-1):
        llhttp_init(&self.parser, HTTP_REQUEST, &_SETTINGS)
        llhttp_set_lenient_chunked_length(&self.parser, 1)  # see _on_headers_complete
        self.parser.data = <void*>self
        self.protocol = protocol
        self.max_header_size = max_header_size
        self.max_body_size = max_body_size
        self.max_json_size = max_json_size
        self.reject = reject
        self.headers = {}
        self.raw_headers = [] if keep_raw_headers else None
        self.body = []
        self.method = "GET"

    @property
    def receiving(self):
        """0 between requests, 1 while a request's head is arriving, 2 while
        its body is (what the connection's read timeouts bound)."""
        if not self.in_message:
            return 0
        return 1 if self.in_head else 2

    def feed(self, data):
        """Parses ``data`` (bytes): on_request for each request it completes.
        Raises ParseError, Upgrade, or what a limit or the protocol raised."""
        cdef const char* p
        cdef Py_ssize_t n
        cdef llhttp_errno_t err
        if type(data) is not bytes:
            data = bytes(data)
        p = PyBytes_AS_STRING(data)
        n = PyBytes_GET_SIZE(data)
        cdef bint in_head = self.in_head
        err = llhttp_execute(&self.parser, p, <size_t>n)
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        if err == HPE_PAUSED_UPGRADE:
            raise Upgrade()
        if err != HPE_OK:
            raise ParseError(llhttp_get_error_reason(&self.parser).decode("latin-1"))
        if in_head and self.in_head:
            # the whole chunk was still request head (an endless header line
            # never completes a field): bound it here
            self.head_raw += n
            if self.head_raw > self.max_header_size:
                raise self.head_too_large()

    cdef object head_too_large(self):
        return self.reject(431, "request header fields exceed the maximum allowed size of "
                                f"{self.max_header_size} bytes")

    cdef int count_head(self, size_t n) noexcept:
        """Adds ``n`` bytes of request head; -1 (the refusal pending) past
        the limit."""
        self.head_size += n
        if self.head_size <= self.max_header_size:
            return 0
        try:
            self.error = self.head_too_large()
        except BaseException as e:
            self.error = e
        return -1

    cdef int check_length(self, bytes value) except -1:
        try:
            n = int(value)
        except ValueError:
            return 0  # llhttp refuses it
        if self.max_json_size >= 0 and n > self.max_json_size:
            path = PyBytes_FromStringAndSize(self.url.data(), self.url.size()).split(b"?", 1)[0]
            if not path.endswith(b"/infer"):  # a JSON-only body: refused before it is read
                raise self.reject(400, request_json_too_large(n, self.max_json_size))
        if n > INT32_MAX:
            raise self.reject(400, "Unable to parse Content-Length, value is out of range "
                                   f"[ {-INT32_MAX - 1}, {INT32_MAX} ], got: "
                                   + value.decode("latin-1"))
        if n > self.max_body_size:
            raise self.reject(413, f"request body of {n} bytes exceeds the maximum allowed "
                                   f"size of {self.max_body_size} bytes")
        return 0
