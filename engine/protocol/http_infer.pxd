# engine/protocol/http_infer.pyx: the HTTP infer codec's compiled parts; what
# the infer route (http_route.pyx) calls per request, as C calls.

from libc.stdint cimport uint64_t
from libcpp.vector cimport vector

from pyserver.engine.batch_execution cimport DirectRoute
from pyserver.engine.plain_spec cimport PlainModel
from pyserver.engine.protocol.plain_request cimport PlainRequestOutput
from pyserver.engine.types cimport PlainPending


cdef class HttpPending(PlainPending):
    cdef PlainModel model
    cdef vector[PlainRequestOutput] outputs
    cdef bint outputs_named
    cdef object binary_data_output


cpdef object direct_answer(DirectRoute direct, body, Py_ssize_t hlen, Py_ssize_t max_input_size,
                           json_headers, bint keep_alive, bint http10, uint64_t received,
                           fallback)
cpdef object plain_record(PlainModel m, body, Py_ssize_t hlen, Py_ssize_t max_input_size,
                          future)
cpdef object record_answer(HttpPending p, result, json_headers, bint keep_alive, bint http10,
                           fallback)
