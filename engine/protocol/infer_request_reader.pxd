# csrc/include/pyserver/protocol/infer_request_reader.h
from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.vector cimport vector

from pyserver.engine.protocol.json_writer cimport ElementKind, string_view


cdef extern from "pyserver/protocol/infer_request_reader.h" namespace "pyserver::json" nogil:
    cdef enum class ParamsState(int):
        kAbsent "pyserver::json::ParamsState::kAbsent"
        kEmpty "pyserver::json::ParamsState::kEmpty"
        kOne "pyserver::json::ParamsState::kOne"

    cdef cppclass RequestInput:
        string_view name
        string_view datatype
        vector[int64_t] shape
        ParamsState parameters
        int64_t binary_data_size
        cbool has_data

    cdef cppclass RequestOutput:
        string_view name
        ParamsState parameters
        cbool binary_data

    cdef cppclass InferRequestReader:
        cbool Read(const char* json, size_t size)
        cbool has_id()
        string_view id()
        ParamsState parameters()
        cbool binary_data_output()
        const vector[RequestInput]& inputs()
        const vector[RequestOutput]& outputs()
        cbool FillData(size_t i, ElementKind kind, void* dst, size_t count)

    InferRequestReader& ThreadInferRequestReader()
