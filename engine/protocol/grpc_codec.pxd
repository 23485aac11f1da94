# csrc/include/pyserver/protocol/grpc_codec.h
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.status cimport Status


cdef extern from "<string_view>" namespace "std" nogil:
    cdef cppclass string_view:
        string_view()
        string_view(const char* data, size_t size)
        const char* data()
        size_t size()
        cbool empty()


cdef extern from "pyserver/protocol/grpc_codec.h" namespace "pyserver::grpc" nogil:
    cdef enum class ParamKind "pyserver::grpc::Parameter::Kind"(int):
        kNone "pyserver::grpc::Parameter::Kind::kNone"
        kBool "pyserver::grpc::Parameter::Kind::kBool"
        kInt64 "pyserver::grpc::Parameter::Kind::kInt64"
        kString "pyserver::grpc::Parameter::Kind::kString"
        kDouble "pyserver::grpc::Parameter::Kind::kDouble"
        kUint64 "pyserver::grpc::Parameter::Kind::kUint64"

    cdef cppclass Parameter:
        string_view key
        ParamKind kind
        cbool bool_value
        int64_t int64_value
        uint64_t uint64_value
        double double_value
        string_view string_value

    cdef cppclass InputTensorView:
        string_view name
        string_view datatype
        vector[int64_t] shape
        vector[Parameter] parameters
        cbool has_contents
        string contents

    cdef cppclass RequestedOutputView:
        string_view name
        vector[Parameter] parameters

    cdef cppclass InferRequestView:
        string_view model_name
        string_view model_version
        string_view id
        vector[Parameter] parameters
        vector[InputTensorView] inputs
        vector[RequestedOutputView] outputs
        vector[string_view] raw_input_contents
        void Clear()

    Status ParseModelInferRequest(const uint8_t* data, size_t size, InferRequestView* out)

    cdef cppclass OutputTensorView:
        string_view name
        string_view datatype
        vector[int64_t] shape
        vector[Parameter] parameters
        const uint8_t* raw
        size_t raw_size

    cdef cppclass InferResponseView:
        string_view model_name
        string_view model_version
        string_view id
        vector[Parameter] parameters
        vector[OutputTensorView] outputs

    size_t ModelInferResponseSize(const InferResponseView& response)
    size_t WriteModelInferResponse(const InferResponseView& response, uint8_t* out)
    size_t StreamResponsePrefixSize(string_view error, size_t infer_size, cbool has_infer)
    size_t WriteStreamResponsePrefix(string_view error, size_t infer_size, cbool has_infer,
                                     uint8_t* out)
