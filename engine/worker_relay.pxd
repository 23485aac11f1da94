# engine/worker_relay.pyx: the server's side of a Python model instance's
# worker channel (a group sent, a result read, the event loop's relay).

from libc.stdint cimport uint32_t, uint64_t


cpdef uint64_t batch_start(tuple reply, uint64_t default)


cdef class GroupSender:
    cdef dict codes
    cdef object code_of
    cdef int bytes_code
    cdef object all_outputs
    cdef object state_outputs
    cdef str model_name
    cdef str version

    cpdef list pack(self, worker, list batches)
    cpdef send_packed(self, worker, list groups, uint32_t load)
    cpdef send(self, worker, list batches, uint32_t load)


cdef class ResultReader:
    cdef dict dtypes
    cdef object error_of
    cdef object again

    cpdef list read(self, worker, tuple reply)


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
    # stop()'s wait for no batch in flight (a threading.Event), set from
    # the loop; None while nobody waits (an Event cleared and set per group
    # cost the loop 1.7 µs)
    cdef public object _idle_waiter
    # duck-typed (tests hand in fakes): a Scheduler, a BatchResults
    cdef object _scheduler
    cdef object _finish
    cdef GroupSender _sender  # or None (tests subclass it)
    cdef ResultReader _results  # or None (tests subclass it)
    cdef object _requests  # the server's Ledger (its count in flight), or None
    cdef Py_ssize_t _fill_from
    cdef Py_ssize_t _max_group
    cdef bint _send_scheduled

    cdef _dispatch(self)
    cdef _send_queued(self)
    cdef bint _sibling_busy(self)
    cdef Py_ssize_t _free_siblings(self) except -1
    cdef list _take_group(self)
    cdef int _load(self, list group)
    cdef _finish_batch(self, object batch, object results, object outcome, uint64_t start_ns)
