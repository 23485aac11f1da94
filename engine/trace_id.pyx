# cython: language_level=3
"""Trace ids from the process's one sequence (csrc trace_id.h), which the
traces C programs make draw from too."""
from libc.stdint cimport uint64_t


cdef extern from "pyserver/trace_id.h" namespace "pyserver" nogil:
    uint64_t NextTraceId()


def next_trace_id():
    return NextTraceId()
