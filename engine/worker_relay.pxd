# engine/worker_relay.pyx: the event loop's relay to a Python model
# instance's worker process (its common cycle, compiled).

from libc.stdint cimport uint64_t



cdef class WorkerRelay:
    cdef readonly object batches
    cdef readonly object mv
    cdef readonly object instance
    cdef readonly object backend
    cdef readonly object loop
    cdef public object _worker
    cdef public uint64_t _t_start
    cdef public bint _start_unseen
    cdef public bint _stopped
    # duck-typed (tests hand in fakes): a Scheduler, a BatchResults, a
    # region_io.ResultReader or None
    cdef object _scheduler
    cdef object _finish
    cdef object _results
    cdef readonly object _requests
    cdef Py_ssize_t _fill_from
    cdef Py_ssize_t _max_group
    cdef bint _send_scheduled

    cdef _dispatch(self)
    cdef _send_queued(self)
    cdef list _take_group(self)
    cdef _finish_batch(self, object batch, object results, object outcome, uint64_t start_ns)
