# csrc/include/pyserver/status.h, and the one bridge from a C++ Status to a
# Python exception (pyserver.kernel.errors.ServerError).
from libcpp.string cimport string


cdef extern from "pyserver/status.h" namespace "pyserver" nogil:
    cpdef enum class StatusCode(int):
        kOk "pyserver::StatusCode::kOk"
        kUnknown "pyserver::StatusCode::kUnknown"
        kInternal "pyserver::StatusCode::kInternal"
        kNotFound "pyserver::StatusCode::kNotFound"
        kInvalidArg "pyserver::StatusCode::kInvalidArg"
        kUnavailable "pyserver::StatusCode::kUnavailable"
        kUnsupported "pyserver::StatusCode::kUnsupported"
        kAlreadyExists "pyserver::StatusCode::kAlreadyExists"
        kCancelled "pyserver::StatusCode::kCancelled"

    cdef cppclass Status:
        Status()
        Status(StatusCode code, string message)
        bint ok()
        StatusCode code()
        const string& message()


cdef inline int check_status(const Status& status) except -1:
    if status.ok():
        return 0
    from pyserver.kernel.errors import ServerError
    raise ServerError(<int>status.code(), status.message().decode("utf-8", "replace"))
