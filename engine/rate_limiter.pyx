# cython: language_level=3
"""Triton's execution_count rate limiter (csrc's RateLimiter): an instance
with rate_limiter resources holds them while it executes a batch; waiting
for them releases the GIL."""
from libc.stdint cimport uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.status cimport Status, check_status

ANY_DEVICE = -1  # an --rate-limit-resource given without a device: every device


cdef class RateLimiter:
    """``explicit``: the --rate-limit-resource entries, (name, device or
    ANY_DEVICE, count); without any, each resource has as many copies as
    the largest need of an instance."""

    def __cinit__(self, explicit=()):
        cdef vector[ExplicitResource] given
        for name, device, count in explicit:
            given.push_back(make_tuple(str(name).encode(), <int>device, <uint32_t>count))
        self.c.reset(new CRateLimiter(given))

    def add_instance(self, needs, int device, uint32_t priority):
        """Registers an instance; ``needs``: [(name, global, count)]. Returns
        its id; ServerError(INVALID_ARG) with Triton's text when the
        resources cannot work."""
        cdef vector[ResourceNeed] wanted
        cdef ResourceNeed need
        cdef uint64_t id = 0
        for name, is_global, count in needs:
            need.name = str(name).encode()
            need.is_global = bool(is_global)
            need.count = <uint32_t>count
            wanted.push_back(need)
        check_status(self.c.get().AddInstance(wanted, device, priority, &id))
        return id

    def remove_instance(self, uint64_t id):
        self.c.get().RemoveInstance(id)

    def acquire(self, uint64_t id):
        """Blocks (GIL released) until the instance holds its resources;
        False once the limiter is stopped."""
        cdef bint ok
        with nogil:
            ok = self.c.get().Acquire(id)
        return ok

    def release(self, uint64_t id):
        self.c.get().Release(id)

    def stop(self):
        self.c.get().Stop()
