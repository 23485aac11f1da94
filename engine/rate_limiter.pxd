# csrc/include/pyserver/rate_limiter.h
from libc.stdint cimport uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.status cimport Status


cdef extern from "<tuple>" namespace "std" nogil:
    cdef cppclass ExplicitResource "std::tuple<std::string, int, uint32_t>":
        pass
    ExplicitResource make_tuple "std::make_tuple"(string name, int device, uint32_t count)


cdef extern from "pyserver/rate_limiter.h" namespace "pyserver" nogil:
    cdef cppclass ResourceNeed:
        string name
        cbool is_global "global"
        uint32_t count

    cdef cppclass CRateLimiter "pyserver::RateLimiter":
        CRateLimiter(vector[ExplicitResource] explicit_resources)
        Status AddInstance(const vector[ResourceNeed]& needs, int device, uint32_t priority,
                           uint64_t* id)
        void RemoveInstance(uint64_t id)
        cbool Acquire(uint64_t id)
        void Release(uint64_t id)
        void Stop()


cdef class RateLimiter:
    cdef unique_ptr[CRateLimiter] c
