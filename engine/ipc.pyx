# cython: language_level=3
"""Talking to a worker process over its socket cheaply.

A blocking recv on a socket whose answer is a few tens of microseconds away
costs a futex sleep and a wake-up (~50 µs or more on a virtual machine),
once per message, each way. ``spin_readable`` polls the descriptor for a
bounded time with the GIL released; the caller then reads (at once, when it
returned True) or falls back to its blocking read.

``send_held`` makes one non-blocking send without releasing the GIL:
Python's socket.send releases and retakes it around the call, and taking it
back from a busy event loop thread can wait for the interpreter's switch
interval (5 ms), while a non-blocking send of a short message never waits.
"""
from libc.stdint cimport uint64_t


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
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


cdef extern from "<errno.h>" nogil:
    int errno


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef extern from "pyserver/spin.h" namespace "pyserver" nogil:
    void CpuRelax()


def spin_readable(int fd, uint64_t spin_ns):
    """True as soon as ``fd`` is readable, False once ``spin_ns`` passed."""
    cdef pollfd p
    cdef uint64_t deadline
    cdef int n
    cdef int i
    p.fd = fd
    p.events = POLLIN
    with nogil:  # only the descriptor and the clock are touched
        deadline = NowNs() + spin_ns
        while True:
            p.revents = 0
            n = poll(&p, 1, 0)
            if n != 0:
                break  # readable, hung up, or an error: the read will tell
            if NowNs() >= deadline:
                break
            for i in range(32):
                CpuRelax()
    return n != 0


def send_held(int fd, const unsigned char[::1] data):
    """One non-blocking send of ``data`` with the GIL held: the bytes sent,
    or -errno (-EAGAIN when the socket buffer is full)."""
    cdef ssize_t n
    if data.shape[0] == 0:
        return 0
    n = send(fd, &data[0], data.shape[0], MSG_DONTWAIT | MSG_NOSIGNAL)
    return n if n >= 0 else -errno
