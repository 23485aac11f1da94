# cython: language_level=3
"""Waiting on a worker's socket without a thread wake-up.

A blocking recv on a socket whose answer is a few tens of microseconds away
costs a futex sleep and a wake-up (~50 µs or more on a virtual machine),
once per message, each way. ``spin_readable`` polls the descriptor for a
bounded time with the GIL released; the caller then reads (at once, when it
returned True) or falls back to its blocking read.
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
