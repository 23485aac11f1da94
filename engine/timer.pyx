# cython: language_level=3
"""A one-shot timer on the event loop, precise to the microsecond.

libuv's timers (``loop.call_at``) count whole milliseconds: a batching delay
of 100 µs would wait 1 ms. ``DueTimer(loop, callback)`` watches a timerfd
(CLOCK_MONOTONIC, the engine's clock: pyserver.engine.clock) with the loop's
``add_reader``; ``arm(due_ns)`` makes the loop call ``callback()`` once that
time has come. Arming again for a later time than the one pending changes
nothing (the callback asks again then); for an earlier one it moves the
timer. ``close()`` stops it for good.

An idle loop wakes tens of µs after its timer fires (45 µs at the median on
the 2-core VM the bench runs on). ``arm(due_ns, spin=True)``, for a caller
with nothing else to do meanwhile, sets the timerfd that much early and
spins the rest with the GIL released, as the dynamic batcher's own threads
do (csrc/src/dynamic_batch_scheduler.cc, spin.h; a spin cut short on a busy
machine calls back early, and the caller's scheduler then says to wait on). How early: the least lateness of
the last SAMPLES fires that were set ahead, plus SPIN_SLACK_NS, within
[MIN_SPIN_NS, MAX_SPIN_NS]. The least, not the mean: a fire the loop saw
late because it was busy says nothing about waking up.
"""
from libc.errno cimport errno
from libc.stdint cimport uint64_t
from libc.string cimport strerror
from posix.time cimport timespec
from posix.unistd cimport close, read


cdef extern from "<sys/timerfd.h>" nogil:
    cdef struct itimerspec:
        timespec it_interval
        timespec it_value
    int timerfd_create(int clockid, int flags)
    int timerfd_settime(int fd, int flags, const itimerspec* new_value, itimerspec* old_value)
    int TFD_NONBLOCK
    int TFD_CLOEXEC
    int TFD_TIMER_ABSTIME
    int CLOCK_MONOTONIC


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef extern from "pyserver/spin.h" namespace "pyserver" nogil:
    void SpinUntilTime(uint64_t deadline_ns)


# The early wake-up's bounds, and what it adds to the oversleep it follows.
DEF SAMPLES = 8
MAX_SPIN_NS = 100_000
MIN_SPIN_NS = 5_000
SPIN_SLACK_NS = 5_000


cdef class DueTimer:
    cdef int fd
    cdef readonly object loop
    cdef object callback
    cdef uint64_t due_ns     # what the caller asked for; 0: not armed
    cdef uint64_t fire_ns    # when the timerfd fires
    cdef bint ahead          # fire_ns was still to come when set: its lateness is an oversleep
    cdef uint64_t margin_ns  # how early a spinning arm() sets it
    cdef uint64_t late_ns[SAMPLES]  # the last fires' lateness (ring)
    cdef int late_next

    def __cinit__(self, loop, callback):
        self.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(errno, strerror(errno).decode())
        self.loop = loop
        self.callback = callback
        self.margin_ns = 50_000
        for i in range(SAMPLES):
            self.late_ns[i] = 50_000
        loop.add_reader(self.fd, self._fired)

    @property
    def armed_ns(self):
        """The time the callback is due (0: not armed)."""
        return self.due_ns

    @property
    def spin_margin_ns(self):
        """How early a spinning arm() sets the timerfd now."""
        return self.margin_ns

    def arm(self, uint64_t due_ns, bint spin=False):
        cdef itimerspec spec
        cdef uint64_t fire = due_ns
        if self.fd < 0 or due_ns == 0:
            return
        if self.due_ns != 0 and self.due_ns <= due_ns:
            return
        if spin:
            fire = due_ns - self.margin_ns if due_ns > self.margin_ns else 1
        spec.it_interval.tv_sec = 0
        spec.it_interval.tv_nsec = 0
        spec.it_value.tv_sec = fire // 1000000000
        spec.it_value.tv_nsec = fire % 1000000000
        if timerfd_settime(self.fd, TFD_TIMER_ABSTIME, &spec, NULL) != 0:
            raise OSError(errno, strerror(errno).decode())
        self.due_ns = due_ns
        self.fire_ns = fire
        self.ahead = fire > NowNs()

    def _fired(self):
        cdef uint64_t expirations
        cdef uint64_t now, due = self.due_ns, least
        cdef int i
        if read(self.fd, &expirations, sizeof(expirations)) < 0:
            return  # EAGAIN: re-armed for later since it became readable
        now = NowNs()
        if self.ahead and now >= self.fire_ns:
            self.late_ns[self.late_next] = now - self.fire_ns
            self.late_next = (self.late_next + 1) % SAMPLES
            least = self.late_ns[0]
            for i in range(1, SAMPLES):
                least = min(least, self.late_ns[i])
            self.margin_ns = min(MAX_SPIN_NS, max(MIN_SPIN_NS, least + SPIN_SLACK_NS))
        if now < due:  # set early for a spinning arm(): its end is spun
            with nogil:  # (bounded by how busy the machine is, as csrc's spins)
                SpinUntilTime(due)
        self.due_ns = 0
        self.callback()

    def close(self):
        if self.fd < 0:
            return
        self.loop.remove_reader(self.fd)
        close(self.fd)
        self.fd = -1
        self.due_ns = 0
