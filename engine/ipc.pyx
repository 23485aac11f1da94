# cython: language_level=3
"""Talking to a worker process over its socket cheaply.

A blocking recv on a socket whose answer is a few tens of microseconds away
costs a futex sleep and a wake-up (~50 µs or more on a virtual machine),
once per message, each way. ``spin_readable`` polls the descriptor for a
bounded time with the GIL released; the caller then reads (at once, when it
returned True) or falls back to its blocking read. ``SpinPolicy`` does so
only while such spins have paid lately.

``send_held`` makes one non-blocking send without releasing the GIL:
Python's socket.send releases and retakes it around the call, and taking it
back from a busy event loop thread can wait for the interpreter's switch
interval (5 ms), while a non-blocking send of a short message never waits.
"""
from libc.stdint cimport uint64_t

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
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


cdef extern from "<errno.h>" nogil:
    int errno


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


def send_held(int fd, const unsigned char[::1] data):
    """One non-blocking send of ``data`` with the GIL held: the bytes sent,
    or -errno (-EAGAIN when the socket buffer is full)."""
    cdef ssize_t n
    if data.shape[0] == 0:
        return 0
    n = send(fd, &data[0], data.shape[0], MSG_DONTWAIT | MSG_NOSIGNAL)
    return n if n >= 0 else -errno
