# A Triton C API parameter (pyserver::triton::Parameter, response_sink.h)
# and its conversions to and from Python values, for the modules that carry
# parameters between the C API and the server (triton_c, triton_bls).
# Inline, so each of them compiles its own copy: no module of its own.
from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string


cdef extern from "triton/core/tritonserver.h" nogil:
    ctypedef enum TRITONSERVER_ParameterType:
        TRITONSERVER_PARAMETER_STRING
        TRITONSERVER_PARAMETER_INT
        TRITONSERVER_PARAMETER_BOOL
        TRITONSERVER_PARAMETER_DOUBLE
        TRITONSERVER_PARAMETER_BYTES


cdef extern from "pyserver/triton/response_sink.h" namespace "pyserver::triton" nogil:
    cdef cppclass Parameter:
        string name
        TRITONSERVER_ParameterType type
        string string_value
        int64_t int_value
        cbool bool_value
        double double_value


cdef inline object parameter_value(const Parameter& p):
    """The Python value: int, bool, float, bytes (BYTES) or str."""
    if p.type == TRITONSERVER_PARAMETER_INT:
        return p.int_value
    if p.type == TRITONSERVER_PARAMETER_BOOL:
        return bool(p.bool_value)
    if p.type == TRITONSERVER_PARAMETER_DOUBLE:
        return p.double_value
    if p.type == TRITONSERVER_PARAMETER_BYTES:
        return <bytes>p.string_value
    return p.string_value.decode("utf-8", "replace")


cdef inline Parameter parameter_of(object name, object value) except *:
    """A parameter as Triton types a Python value (bool before int: a bool
    is one; anything else as its string)."""
    cdef Parameter p
    p.name = str(name).encode()
    if isinstance(value, bool):
        p.type, p.bool_value = TRITONSERVER_PARAMETER_BOOL, value
    elif isinstance(value, int):
        p.type, p.int_value = TRITONSERVER_PARAMETER_INT, value
    elif isinstance(value, float):
        p.type, p.double_value = TRITONSERVER_PARAMETER_DOUBLE, value
    else:
        p.type, p.string_value = TRITONSERVER_PARAMETER_STRING, str(value).encode()
    return p
