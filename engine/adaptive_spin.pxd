# csrc/include/pyserver/adaptive_spin.h: whether a waiter spins before it
# blocks, learnt from how its recent spins ended.
from libc.stdint cimport uint64_t


cdef extern from "pyserver/adaptive_spin.h" namespace "pyserver" nogil:
    cdef cppclass AdaptiveSpin:
        AdaptiveSpin(uint64_t max_ns)
        AdaptiveSpin(uint64_t max_ns, uint64_t pay_ns)
        bint ShouldSpin()
        uint64_t Budget()
        void Record(bint caught)
        void Record(bint caught, uint64_t spun_ns)
        uint64_t max_ns()
        uint64_t pay_ns()
        bint spinning()
        @staticmethod
        bint Enabled()
    const uint64_t kSpinPaysNs "pyserver::AdaptiveSpin::kSpinPaysNs"
