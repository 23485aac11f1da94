# csrc/protocol/include/pyserver/protocol/plain_request.h
from libc.stdint cimport uint8_t
from libcpp cimport bool as cbool
from libcpp.vector cimport vector

from pyserver.engine.plain_spec cimport CPlainSpec, PlainMatch
from pyserver.engine.protocol.grpc_codec cimport InferRequestView
from pyserver.engine.protocol.infer_request_reader cimport InferRequestReader, RequestInput
from pyserver.engine.protocol.json_writer cimport ElementKind, string_view


cdef extern from "pyserver/protocol/plain_request.h" namespace "pyserver::json" nogil:
    cdef enum class Asked "pyserver::json::PlainRequest::Asked"(uint8_t):
        kDefault "pyserver::json::PlainRequest::Asked::kDefault"
        kEmpty "pyserver::json::PlainRequest::Asked::kEmpty"
        kFlag "pyserver::json::PlainRequest::Asked::kFlag"

    cdef cppclass PlainRequestInput "pyserver::json::PlainRequest::Input":
        int index
        size_t source
        size_t count
        cbool binary
        size_t offset
        ElementKind kind

    cdef cppclass PlainRequestOutput "pyserver::json::PlainRequest::Output":
        int index
        cbool binary
        Asked asked

    cdef cppclass PlainRequest:
        PlainMatch match
        vector[PlainRequestInput] inputs
        vector[PlainRequestOutput] outputs
        cbool outputs_named

    cbool FillKindOf(string_view datatype, ElementKind* kind)
    cbool PlaceInput(const RequestInput& inp, size_t count, size_t itemsize, size_t body_size,
                     size_t max_input_size, size_t* offset, PlainRequestInput* read)
    cbool ReadPlainRequest(const InferRequestReader& reader, const CPlainSpec& spec,
                           const vector[size_t]& itemsizes, size_t header_size,
                           size_t body_size, size_t max_input_size, PlainRequest* out)
    cbool ReadPlainRequest(const InferRequestView& view, const CPlainSpec& spec,
                           const vector[size_t]& itemsizes, PlainRequest* out)


cdef inline list wanted_names(list output_names, const PlainRequest& plain):
    """The names of the outputs a plain request named, in its order, or None
    where it named none (all of them): what its queue entry carries
    (types.PlainPending.wanted). ``output_names``: its model's, config order."""
    if not plain.outputs_named:
        return None
    return [output_names[plain.outputs[i].index] for i in range(plain.outputs.size())]
