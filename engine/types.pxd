# The protocol-neutral request and response objects (see types.pyx).

cdef class InferTensor:
    cdef public object name
    cdef public object datatype
    cdef public object shape
    cdef public object data
    cdef public object parameters


cdef class RequestedOutput:
    cdef public object name
    cdef public object parameters


cdef class InferRequest:
    cdef public object model_name
    cdef public object model_version
    cdef public object id
    cdef public object inputs
    cdef public object outputs
    cdef public object parameters
    cdef public object priority
    cdef public object timeout_us
    cdef public object parent_trace
    cdef public object trace


cdef class InferResponse:
    cdef public object model_name
    cdef public object model_version
    cdef public object id
    cdef public object outputs
    cdef public object parameters


cdef class PendingRequest:
    cdef public object request
    cdef public object future
    cdef public object arrays
    cdef public object batch_size
    cdef public object response
    cdef public object id
    cdef public object trace
    cdef public object batch_view  # what a custom batching library reads of it, or None



cdef class PlainPending(PendingRequest):
    # a plain request read straight into its queue entry: no InferRequest
    cdef public object request_id  # str ("" when it has none)
    cdef public list wanted  # the outputs it asked for by name, or None: all


# Fills a PlainPending (or a subclass) made with __new__: what __init__ does,
# as a C call (a protocol's reader makes one per request).
cdef int init_plain(PlainPending p, future, dict arrays, batch_size, request_id,
                    list wanted) except -1

cdef class DoneCallback:
    cdef int done(self, fut) except -1


cdef class ImmediateFuture:
    cdef object _result
    cdef object _exception
    cdef object _callback
    cdef int _state  # 0 pending, 1 done, 2 cancelled

    cdef _settle(self, result, exception)
    cdef _fire(self)
    cdef _call(self, fn)


cdef InferTensor new_tensor(object name, object datatype, list shape, object data,
                            dict parameters)
cdef InferResponse new_response(object model_name, object model_version, object id,
                                list outputs)
cdef RequestedOutput new_output(object name, dict parameters)
cdef InferRequest new_request(object model_name, object model_version, object id, list inputs,
                              list outputs, dict parameters, object priority, object timeout_us)
cpdef tuple request_properties(object params)
