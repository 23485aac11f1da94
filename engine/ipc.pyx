# cython: language_level=3
"""Talking to a worker process over its socket cheaply.

A blocking recv on a socket whose answer is a few tens of microseconds away
costs a futex sleep and a wake-up (~50 µs or more on a virtual machine),
once per message, each way. ``spin_readable`` polls the descriptor for a
bounded time with the GIL released; the caller then reads (at once, when it
returned True) or falls back to its blocking read. ``SpinPolicy`` does so
only while such spins have paid lately.

``send_frame`` sends a message with its length ahead of it in one
non-blocking send without releasing the GIL: Python's socket.send releases
and retakes it around the call, and taking it back from a busy event loop
thread can wait for the interpreter's switch interval (5 ms), while a
non-blocking send of a short message never waits (``FrameWriter``: a
socket's frames through it, whole between threads). ``FrameReader`` splits
what arrives back into messages, with a non-blocking read of the same kind
for a reader on an event loop (pyserver/backends/python/channel.py: a u32
length, then a pickle).
"""
import os
import pickle
import struct
import threading

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy, memmove
from libcpp.string cimport string

from pyserver.engine.worker_wire cimport (
    WireReader,
    get_bytes,
    get_str,
    get_u32,
    get_u64,
    put_bytes,
    put_str,
    put_u32,
    put_u64,
)

from pyserver.engine.adaptive_spin cimport AdaptiveSpin, kSpinPaysNs


cdef extern from "<poll.h>" nogil:
    ctypedef unsigned long nfds_t
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, nfds_t nfds, int timeout)
    short POLLIN


cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void* buf, size_t n, int flags)
    ssize_t recv(int fd, void* buf, size_t n, int flags)
    struct iovec:
        void* iov_base
        size_t iov_len
    struct msghdr:
        void* msg_name
        unsigned int msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t sendmsg(int fd, const msghdr* msg, int flags)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


cdef extern from "<errno.h>" nogil:
    int errno
    int EAGAIN
    int EWOULDBLOCK
    int EINTR
    int ECONNRESET
    int EPIPE
    int EBADF


cdef extern from "Python.h":
    int PyBUF_READ


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef extern from "pyserver/spin.h" namespace "pyserver" nogil:
    void CpuRelax()
    const uint64_t kSpinPreemptedNs


cdef bint _spin_readable(int fd, uint64_t spin_ns) noexcept nogil:
    cdef pollfd p
    cdef uint64_t deadline, now, last
    cdef int n
    cdef int i
    cdef bint bounded = AdaptiveSpin.Enabled()
    p.fd = fd
    p.events = POLLIN
    last = NowNs()
    deadline = last + spin_ns
    while True:
        p.revents = 0
        n = poll(&p, 1, 0)
        if n != 0:
            break  # readable, hung up, or an error: the read will tell
        now = NowNs()
        # Past the deadline, or descheduled meanwhile (the machine is busy:
        # see spin.h's kSpinPreemptedNs).
        if now >= deadline or (bounded and now - last > kSpinPreemptedNs):
            break
        last = now
        for i in range(32):
            CpuRelax()
    return n != 0


def spin_readable(int fd, uint64_t spin_ns):
    """True as soon as ``fd`` is readable, False once ``spin_ns`` passed."""
    cdef bint ready
    with nogil:  # only the descriptor and the clock are touched
        ready = _spin_readable(fd, spin_ns)
    return ready


cdef class SpinPolicy:
    """A waiter's spin before it blocks on a descriptor, on only while its
    recent spins caught their message (csrc adaptive_spin.h): a worker whose
    next batch is a client's round trip away stops spinning for it.
    ``pay_ns``: a catch after longer scores as a miss (by default any catch
    within ``max_ns`` pays; SPIN_PAYS_NS: about twice a wake-up's cost)."""

    cdef AdaptiveSpin* c

    def __cinit__(self, uint64_t max_ns, pay_ns=None):
        self.c = new AdaptiveSpin(max_ns, max_ns if pay_ns is None else <uint64_t>pay_ns)

    def __dealloc__(self):
        del self.c

    def wait_readable(self, int fd):
        """Spins (GIL released) up to max_ns for ``fd`` to become readable,
        when the policy says a spin pays now. True if it became readable."""
        cdef uint64_t spin_ns = self.c.Budget()
        cdef uint64_t start
        cdef bint ready
        if spin_ns == 0:
            return False
        with nogil:  # only the descriptor and the clock are touched
            start = NowNs()
            ready = _spin_readable(fd, spin_ns)
            spin_ns = NowNs() - start
        self.c.Record(ready, spin_ns)
        return ready

    @property
    def max_ns(self):
        return self.c.max_ns()

    @property
    def pay_ns(self):
        return self.c.pay_ns()

    @property
    def spinning(self):
        """Whether waits spin now (not counting probes)."""
        return self.c.spinning()


SPIN_PAYS_NS = kSpinPaysNs

# How busy the server was when it sent a worker a group (the "exec"
# message's last field): LOAD_LOW, nothing else queued; LOAD_ALONE, no other
# request in the server at all. It decides the worker's spin for its next
# group (pyserver/backends/python/channel.py spin_after).
LOAD_BUSY = 0
LOAD_LOW = 1
LOAD_ALONE = 2


def send_frame(int fd, bytes data):
    """``data`` with its length ahead of it (a u32), in one non-blocking
    send with the GIL held: the bytes sent of the len(data) + 4, or -errno
    (-EAGAIN when the socket buffer is full)."""
    return _send_frame(fd, data)


cdef ssize_t _send_frame(int fd, bytes data):
    cdef uint32_t size = <uint32_t>PyBytes_GET_SIZE(data)
    cdef iovec parts[2]
    cdef msghdr msg
    cdef ssize_t n
    parts[0].iov_base = &size
    parts[0].iov_len = sizeof(size)
    parts[1].iov_base = PyBytes_AS_STRING(data)
    parts[1].iov_len = size
    msg.msg_name = NULL
    msg.msg_namelen = 0
    msg.msg_iov = parts
    msg.msg_iovlen = 2
    msg.msg_control = NULL
    msg.msg_controllen = 0
    msg.msg_flags = 0
    n = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL)
    return n if n >= 0 else -errno


cdef class FrameWriter:
    """Frames (a u32 length, then the payload) out of one socket, whole
    between threads (``lock``): a message that fits the socket's buffer in
    one send_frame, the rest by the socket's blocking sendall. Once ``fd``
    is -1 (set under ``lock`` by whoever closes the socket) every send
    fails rather than write into whatever reuses the number."""

    cdef object sock
    cdef public int fd
    cdef readonly object lock

    def __init__(self, sock):
        self.sock = sock
        self.fd = sock.fileno()
        self.lock = threading.Lock()

    cpdef send(self, bytes data):
        cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
        cdef ssize_t sent
        with self.lock:
            if size >= 65536:
                self.sock.sendall(_HEADER.pack(size))
                self.sock.sendall(data)
                return
            if self.fd < 0:
                raise OSError(EBADF, "channel closed")
            sent = _send_frame(self.fd, data)
            if sent == size + 4:
                return
            if sent < 0:
                if -sent != EAGAIN and -sent != EWOULDBLOCK and -sent != EINTR:
                    raise OSError(-sent, os.strerror(-sent))
                sent = 0
            self.sock.sendall((_HEADER.pack(size) + data)[sent:])


INCOMPLETE = object()  # FrameReader.take(): no whole message buffered yet
_HEADER = struct.Struct("<I")  # a frame's length
_loads = pickle.loads

# A frame is a pickle, whose first byte is PROTO (0x80), or one of the two
# messages every batch makes, as bytes (a pickle's own setup cost more than
# the rest of them): "R", a ("result", output region size, answers in
# worker_wire's layout, start ns) as u64, u64, the answers; "E", an ("exec",
# input region size, [one bytes object per batch], model name, version,
# load) as u64, u32 load, the name and version (u32 length, UTF-8), u32
# batch count, then per batch a u32 length and its bytes.
cdef enum:
    _RESULT_MARK = 0x52  # "R"
    _EXEC_MARK = 0x45  # "E"


def result_payload(uint64_t out_size, bytes answers, uint64_t started_ns):
    """The frame's payload that FrameReader reads back as ("result",
    out_size, answers, started_ns)."""
    cdef string out
    out.push_back(<char>_RESULT_MARK)
    put_u64(out, out_size)
    put_u64(out, started_ns)
    out.append(PyBytes_AS_STRING(answers), <size_t>PyBytes_GET_SIZE(answers))
    return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


def exec_payload(uint64_t in_size, list groups, str model_name, str version, uint32_t load):
    """The frame's payload that FrameReader reads back as ("exec", in_size,
    groups, model_name, version, load), or None where a group is not bytes
    (it travels pickled)."""
    for group in groups:
        if type(group) is not bytes:
            return None
    cdef string out
    out.push_back(<char>_EXEC_MARK)
    put_u64(out, in_size)
    put_u32(out, load)
    put_str(out, model_name)
    put_str(out, version)
    put_u32(out, <uint32_t>len(groups))
    for group in groups:
        put_bytes(out, group)
    return PyBytes_FromStringAndSize(out.data(), <Py_ssize_t>out.size())


cdef tuple _result_message(const char* p, Py_ssize_t size):
    cdef WireReader r
    r.at = p + 1  # past the mark
    r.end = p + size
    out_size = get_u64(&r)
    started_ns = get_u64(&r)
    return ("result", out_size, PyBytes_FromStringAndSize(r.at, r.end - r.at), started_ns)


cdef tuple _exec_message(const char* p, Py_ssize_t size):
    cdef WireReader r
    cdef uint32_t count, i
    r.at = p + 1  # past the mark
    r.end = p + size
    in_size = get_u64(&r)
    load = get_u32(&r)
    model_name = get_str(&r)
    version = get_str(&r)
    count = get_u32(&r)
    return ("exec", in_size, [get_bytes(&r) for i in range(count)], model_name, version, load)


cdef class FrameReader:
    """Length-prefixed pickled messages out of what a stream socket gave.

    ``take()`` is the next whole message or INCOMPLETE; ``drain(fd)`` every
    whole message after one non-blocking read of ``fd`` (EOFError once the
    peer is gone). A blocking reader reads into ``space()`` itself (with
    its socket's timeout) and says how much with ``filled(n)``."""

    cdef bytearray buf
    cdef Py_ssize_t start
    cdef Py_ssize_t end

    def __cinit__(self, Py_ssize_t size=1 << 16):
        self.buf = bytearray(size)

    cpdef object take(self):
        cdef Py_ssize_t avail = self.end - self.start
        cdef uint32_t size
        cdef char* base = PyByteArray_AS_STRING(self.buf)
        if avail >= 4:
            memcpy(&size, base + self.start, 4)
            if avail >= 4 + <Py_ssize_t>size:
                if size and base[self.start + 4] == _RESULT_MARK:
                    obj = _result_message(base + self.start + 4, size)
                elif size and base[self.start + 4] == _EXEC_MARK:
                    obj = _exec_message(base + self.start + 4, size)
                else:
                    obj = _loads(PyMemoryView_FromMemory(base + self.start + 4, size, PyBUF_READ))
                self.start += 4 + size
                if self.start == self.end:
                    self.start = self.end = 0
                return obj
            self._make_room(4 + size)
        elif PyByteArray_GET_SIZE(self.buf) - self.start < 4:
            self._make_room(4)
        return INCOMPLETE

    def space(self):
        """The free end of the buffer, for a blocking recv_into."""
        return memoryview(self.buf)[self.end:]

    def filled(self, Py_ssize_t n):
        """``n`` bytes were read into ``space()``; 0: the peer closed."""
        if n == 0:
            raise EOFError("peer closed the channel")
        self.end += n

    def drain(self, int fd):
        cdef ssize_t n
        cdef char* base = PyByteArray_AS_STRING(self.buf)
        while True:
            n = recv(fd, base + self.end, PyByteArray_GET_SIZE(self.buf) - self.end,
                     MSG_DONTWAIT)
            if n >= 0 or errno != EINTR:
                break
        if n == 0 or (n < 0 and (errno == ECONNRESET or errno == EPIPE)):
            raise EOFError("peer closed the channel")
        if n < 0 and errno != EAGAIN and errno != EWOULDBLOCK:
            raise OSError(errno, "reading a worker channel")
        if n > 0:
            self.end += n
        cdef list out = []
        while True:
            obj = self.take()
            if obj is INCOMPLETE:
                return out
            out.append(obj)

    cdef int _make_room(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t avail = self.end - self.start
        cdef bytearray bigger
        if need <= PyByteArray_GET_SIZE(self.buf) - self.start:
            return 0
        if need <= PyByteArray_GET_SIZE(self.buf):
            memmove(PyByteArray_AS_STRING(self.buf), PyByteArray_AS_STRING(self.buf) + self.start,
                    avail)
        else:
            bigger = bytearray(max(need, 2 * PyByteArray_GET_SIZE(self.buf)))
            memcpy(PyByteArray_AS_STRING(bigger), PyByteArray_AS_STRING(self.buf) + self.start,
                   avail)
            self.buf = bigger
        self.start, self.end = 0, avail
        return 0
