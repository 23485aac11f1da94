# cython: language_level=3
"""The engine's monotonic clock (the one csrc stamps requests with)."""
from libc.stdint cimport uint64_t


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


def now_ns():
    return NowNs()
