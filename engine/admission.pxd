# engine/admission.pyx: the server's books, shared with engine/settle.pyx, and
# a model's Route, which the protocols' readers hand back to Admission.submit

from pyserver.engine.batch_execution cimport DirectRoute
from pyserver.engine.batcher cimport Scheduler
from pyserver.engine.plain_spec cimport PlainModel
from pyserver.engine.types cimport InferRequest, PendingRequest, PlainPending

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


cdef class Admission:
    cdef Ledger ledger
    cdef object general
    cdef object general_resolved
    cdef object uses_cache
    cdef object spin
    cdef object tracer
    cdef object manager
    cdef dict versions  # the manager's: model name -> {version: ModelVersion}
    cdef object loop

    cpdef object submit(self, InferRequest request, object future=*, Route route=*)
    cpdef object enqueue_plain(self, Route route, PlainPending pending)
    cdef int _enqueue(self, Route route, PendingRequest pending, priority, timeout_us,
                      key) except -1
    cpdef Route route(self, model_name)
    cdef object _only_version(self, model_name)
    cdef Route _open_route(self, model)
