# engine/admission.pyx: the server's books, shared with engine/settle.pyx

cdef class Ledger:
    cdef public Py_ssize_t inflight
    cdef public dict handles
    cdef public bint stopping
    cdef public object drained  # an asyncio.Event while Server.drain() waits, else None
