# csrc/include/pyserver/socket_pump.h
from libc.stdint cimport uint64_t
from libcpp.memory cimport unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.status cimport Status


cdef extern from "pyserver/socket_pump.h" namespace "pyserver" nogil:
    cdef enum class PumpKind "pyserver::PumpEvent::Kind":
        kData "pyserver::PumpEvent::Kind::kData"
        kEof "pyserver::PumpEvent::Kind::kEof"
        kDrained "pyserver::PumpEvent::Kind::kDrained"
        kClosed "pyserver::PumpEvent::Kind::kClosed"
        kThreadRestarted "pyserver::PumpEvent::Kind::kThreadRestarted"

    cdef cppclass ReaderProgress:
        int state
        uint64_t since_ns
        uint64_t last_read_ns

    cdef cppclass ConnectionReader:
        bint Read(uint64_t connection, const char* data, size_t size, string* host)
        void Resume(uint64_t connection, bint answered, uint64_t consumed, string* host)
        bint HoldEof(string* host)
        ReaderProgress Progress()

    cdef cppclass PumpEvent:
        uint64_t connection
        PumpKind kind
        string data
        int error

    cdef cppclass CSocketPump "pyserver::SocketPump":
        @staticmethod
        Status Create(int threads, unique_ptr[CSocketPump]* pump)
        int notify_fd()
        int threads()
        uint64_t Attach(int fd)
        uint64_t Attach(int fd, unique_ptr[ConnectionReader] reader)
        void Resume(uint64_t connection, bint answered, uint64_t consumed)
        bint Progress(uint64_t connection, ReaderProgress* out)
        size_t Write(uint64_t connection, const char* data, size_t size)
        size_t Unsent(uint64_t connection)
        void WatchDrain(uint64_t connection, size_t low_water)
        void SetReading(uint64_t connection, bint reading)
        void Close(uint64_t connection)
        void Abort(uint64_t connection)
        void BreakThreadForTesting(int thread) except +
        size_t Drain(vector[PumpEvent]* out)


# (state, since, last_read): a reader's progress as PumpTransport.reader_progress
# gives it, times in seconds on the steady clock.
cdef tuple progress_tuple(ReaderProgress p)


cdef class ReaderSource:
    """What makes each connection's ConnectionReader (a protocol's first
    look at its bytes, on its pump thread): engine/protocol/http_lane.pyx."""
    cdef unique_ptr[ConnectionReader] new_reader(self)


cdef class SocketPump:
    cdef unique_ptr[CSocketPump] c
    cdef readonly object loop
    cdef int fd
    cdef dict transports  # connection id -> PumpTransport
    cdef readonly int restarts  # threads that failed and were restarted

    cdef int write_answer(self, uint64_t connection, list pieces) except -1


cdef class PumpTransport:
    cdef SocketPump pump
    cdef readonly uint64_t connection
    cdef object protocol
    cdef dict extra
    cdef bint closing
    cdef bint closed
    cdef bint write_paused
    cdef bint read_paused
    cdef bytes held      # read while paused: delivered on resume_reading()
    cdef bint eof_held   # the peer's EOF came after the held bytes
    cdef size_t high_water
    cdef size_t low_water
    cdef readonly bint has_reader  # attached with a ConnectionReader

    cdef int _data(self, bytes data) except -1
    cdef int _eof(self) except -1
    cdef int _drained(self) except -1
    cdef int _closed(self, int error) except -1
