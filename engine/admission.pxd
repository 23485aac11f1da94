# engine/admission.pyx: the server's books, shared with engine/settle.pyx, and
# a model's Route, which the protocols' readers hand back to Admission.submit

from pyserver.engine.batch_execution cimport DirectRoute
from pyserver.engine.batcher cimport Scheduler
from pyserver.engine.plain_spec cimport PlainModel

cdef class Ledger:
    cdef public Py_ssize_t inflight
    cdef public dict handles
    cdef public bint stopping
    cdef public object drained  # an asyncio.Event while Server.drain() waits, else None


cdef class Route:
    cdef readonly object model
    cdef object validate
    cdef object answer
    cdef Scheduler scheduler
    cdef object dispatch
    cdef public bint open
    cdef public bint cache_checked
    cdef public DirectRoute direct  # its requests may run as they are read, or None
    # its plain requests may be read straight into their queue entries
    # (types.PlainPending), or None
    cdef public PlainModel records
    cdef readonly unsigned long long records_queued  # so far (for tests and the bench)

    cpdef DirectRoute runnable(self)
