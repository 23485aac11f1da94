# cython: language_level=3
"""The event loop's side of the engine's completion path.

Tokens in the queue are Python objects whose reference travels with them:
whoever pushes increfs, ``drain`` hands the reference back to Python.
"""
from cpython.ref cimport PyObject, Py_DECREF
from libcpp.memory cimport unique_ptr
from libcpp.utility cimport move

from pyserver.engine.adaptive_spin cimport kSpinPaysNs
from pyserver.engine.status cimport check_status


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef class CompletionQueue:
    """Finished work from engine threads; ``fd`` becomes readable when there
    is some. Watch it with ``loop.add_reader(q.fd, ...)`` and ``drain()``."""

    def __cinit__(self):
        cdef unique_ptr[CCompletionQueue] q
        check_status(CCompletionQueue.Create(&q))
        self.c = shared_ptr[CCompletionQueue](q.release())

    def __dealloc__(self):
        # Drop references still queued so they are not leaked.
        cdef vector[Completion] items
        if self.c.get() != NULL:
            self.c.get().Drain(&items)
            for item in items:
                Py_DECREF(<object><PyObject*>item.token)

    @property
    def fd(self):
        return self.c.get().fd()

    @property
    def signal_count(self):
        return self.c.get().signal_count()

    def drain(self):
        """Every waiting completion as (object, code, message); code 0 is OK."""
        cdef vector[Completion] items
        cdef list out = []
        self.c.get().Drain(&items)
        for item in items:
            obj = <object><PyObject*>item.token
            Py_DECREF(obj)  # the queue's reference; `obj` keeps its own
            if <int>item.code == 0:
                out.append((obj, 0, None))
            else:
                out.append((obj, <int>item.code, item.message.decode("utf-8", "replace")))
        return out

    def wait(self, double timeout_s):
        """Block (GIL released) until a completion waits or timeout_s passes."""
        cdef uint64_t ns = <uint64_t>(timeout_s * 1e9)
        cdef bint ready
        with nogil:
            ready = self.c.get().WaitReadable(ns)
        return ready

    def spin_wait(self, double timeout_s):
        """Spin (GIL released, no sleeping) up to timeout_s for a completion.
        For a caller that expects one within microseconds: waking a sleeping
        thread costs tens of µs, spinning costs nothing at low load."""
        cdef uint64_t ns = <uint64_t>(timeout_s * 1e9)
        cdef bint ready
        with nogil:
            ready = self.c.get().SpinWaitNonEmpty(ns)
        return ready


cdef class CompletionSpin:
    """One model's spin_wait, on only while such spins pay (csrc
    adaptive_spin.h): the event loop spins for the answer of a request alone
    in the server. A spin pays when the completion comes inside it and
    within kSpinPaysNs, the most a spin may last and still cost less than
    the sleep and wake-up it saves: a model slower than that (one that runs
    for milliseconds on its instance thread, or whose batching delay the
    spin would sit through) would make every such spin CPU burnt for a few
    tens of µs of latency."""

    def __cinit__(self):
        # each wait says how long it may spin; probes spin at most kSpinPaysNs
        self.c = new AdaptiveSpin(10 ** 10, kSpinPaysNs)

    def __dealloc__(self):
        del self.c

    def wait(self, CompletionQueue queue, double timeout_s):
        """queue.spin_wait(timeout_s) when the policy says a spin pays now;
        True if a completion waits."""
        cdef uint64_t ns = <uint64_t>(timeout_s * 1e9)
        cdef uint64_t budget = self.c.Budget()
        cdef uint64_t started
        cdef bint ready
        if budget == 0:
            return False
        if budget < ns:
            ns = budget
        with nogil:
            started = NowNs()
            ready = queue.c.get().SpinWaitNonEmpty(ns)
            self.c.Record(ready, NowNs() - started)
        return ready

    @property
    def spinning(self):
        """Whether waits spin now (not counting probes)."""
        return self.c.spinning()
