# A pyserver Server as Triton C backends see it (TRITONSERVER_Server*,
# csrc/include/pyserver/triton/inference.h): engine/triton_c.pyx names it to
# the models it creates.

cdef extern from "pyserver/triton/inference.h" nogil:
    cdef struct TRITONSERVER_Server:
        void* owner
    cdef struct TRITONSERVER_Error:
        pass


cdef class ServerHandle:
    # owner points back at this object: the struct lives as long as it does
    cdef TRITONSERVER_Server server
    cdef readonly object router
    # What TRITONSERVER_ServerNew made this server with (its controller,
    # engine/triton_server.pyx); None for a server that only backends see.
    cdef public object control


# The caller's new TRITONSERVER_Error for a Python exception: a ServerError's
# code and message, anything else INTERNAL with its type (the one mapping for
# every hook the C API reaches).
cdef TRITONSERVER_Error* server_error(err)
