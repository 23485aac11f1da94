# csrc/include/pyserver/protocol/json_writer.h
from libcpp cimport bool as cbool
from libcpp.string cimport string


cdef extern from "<string_view>" namespace "std" nogil:
    cdef cppclass string_view:
        string_view(const char* data, size_t size)
        const char* data()
        size_t size()


cdef extern from "pyserver/protocol/json_writer.h" namespace "pyserver::json" nogil:
    cdef enum class ElementKind(int):
        kBool "pyserver::json::ElementKind::kBool"
        kInt8 "pyserver::json::ElementKind::kInt8"
        kInt16 "pyserver::json::ElementKind::kInt16"
        kInt32 "pyserver::json::ElementKind::kInt32"
        kInt64 "pyserver::json::ElementKind::kInt64"
        kUint8 "pyserver::json::ElementKind::kUint8"
        kUint16 "pyserver::json::ElementKind::kUint16"
        kUint32 "pyserver::json::ElementKind::kUint32"
        kUint64 "pyserver::json::ElementKind::kUint64"
        kFloat32 "pyserver::json::ElementKind::kFloat32"
        kFloat64 "pyserver::json::ElementKind::kFloat64"

    cbool AppendArray(ElementKind kind, const void* data, size_t count, string* out)
    void AppendInt(long long value, string* out)


cdef extern from "pyserver/json_string.h" namespace "pyserver" nogil:
    void AppendJsonString(string_view text, string* out)
