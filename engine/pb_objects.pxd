# pb_utils' per-request objects, compiled (engine/pb_objects.pyx): their
# fields, which the worker's batch IO (worker_io) makes and reads directly.

cdef class Tensor:
    cdef public object _name
    cdef public object _array
    cdef public int _dtype


cdef class RequestBase:
    cdef public object _request_id
    cdef public object _correlation_id
    cdef public object _inputs
    cdef public object _requested_output_names
    cdef public object _model_name
    cdef public object _model_version
    cdef public object _flags
    cdef public object _timeout
    cdef public object _preferred_memory
    cdef public object _trace
    cdef public object _parameters
    cdef public object _release_flags
    cdef public object _index
    cdef public object _key
    cdef public object _sender


cdef class InferenceResponse:
    cdef public object _output_tensors
    cdef public object _error
    cdef public object _parameters
    cdef public object _parameters_dict


cdef Tensor new_tensor(object name, object array, int code)
cpdef RequestBase new_request(type cls, Py_ssize_t index, object request_id,
                              object correlation_id, object flags, object timeout,
                              object parameters_json, object requested_output_names,
                              object inputs, object model_name, object model_version, object key,
                              object trace)
