# csrc/include/pyserver/completion_queue.h
from libc.stdint cimport uint64_t
from libcpp.memory cimport shared_ptr, unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.adaptive_spin cimport AdaptiveSpin
from pyserver.engine.status cimport Status, StatusCode


cdef extern from "pyserver/completion_queue.h" namespace "pyserver" nogil:
    ctypedef uint64_t Token

    cdef cppclass Completion:
        Token token
        StatusCode code
        string message

    cdef cppclass CCompletionQueue "pyserver::CompletionQueue":
        @staticmethod
        Status Create(unique_ptr[CCompletionQueue]* queue)
        int fd()
        void Push(Completion completion)
        void ReleaseHeldSignal()
        size_t Drain(vector[Completion]* out)
        bint WaitReadable(uint64_t timeout_ns)
        bint SpinWaitNonEmpty(uint64_t spin_ns)
        bint SpinUntilWaiter(uint64_t spin_ns)
        uint64_t signal_count()


cdef class CompletionQueue:
    cdef shared_ptr[CCompletionQueue] c


cdef class CompletionSpin:
    cdef AdaptiveSpin* c
