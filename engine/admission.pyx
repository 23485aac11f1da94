# cython: language_level=3
"""A new request's way into its model's queue, compiled for the common case.

``Server.submit`` took seven Python frames per request on the event loop
(admission, model lookup, dispatch, enqueue, the model's submit): 1.15 µs of
its 2.05 µs per request on ONNX add_sub, the compiled validation and enqueue
being the rest. ``Admission.submit`` does the same for a request the
general path would treat plainly, in one call: a model named without a
version that has one loaded version, no request parameters, tracing off,
and a model whose ``Route`` is open (ModelVersion.start decides: not
decoupled, no ensemble, no sequence batching, no custom batching library;
the server adds: no response cache). Everything else goes to the server's
general path (``general``), which then takes no decision this one already
took: handed the model version once it is found (``general_resolved``).

A frontend that first asks whether a request can run as it is read
(``route``, then ``Route.runnable``) hands the Route it got back to
``submit`` when it cannot, so the model is looked up once per request.
Where the Route has ``records`` (a Python model relayed on the loop), a
frontend may instead read a plain request straight into its queue entry
(types.PlainPending, no InferRequest) and queue it with ``enqueue_plain``.

``Ledger`` holds the server's requests in flight (their count and the
handles cancel() uses) and whether it still takes new ones, where both
paths and the server's Python read and write them.
"""

from libc.stdint cimport uint64_t

from pyserver.engine.batch_execution cimport DirectRoute
from pyserver.engine.batcher cimport Scheduler


cdef extern from "pyserver/clock.h" namespace "pyserver" nogil:
    uint64_t NowNs()


cdef class Ledger:
    """The server's requests in flight: ``inflight`` accepted and not yet
    answered, ``handles`` {future: (scheduler, request id)} for cancel(),
    ``stopping`` once it takes no new ones, ``drained`` the event set when
    the last one is answered while the server waits for that (or None)."""

    def __init__(self):
        self.inflight = 0
        self.handles = {}
        self.stopping = False
        self.drained = None


cdef class Route:
    """One loaded model version's common case: its validation, its
    scheduler and what to call after an enqueue (its loop driver's
    dispatch, or None). ``open`` is False
    for a model every request of which takes the general path; the server
    closes it where its response cache serves the model (``cache_checked``
    once that is decided)."""

    def __init__(self, model, validate, answer, Scheduler scheduler, dispatch, bint open):
        self.model = model
        self.validate = validate
        self.answer = answer
        self.scheduler = scheduler
        self.dispatch = dispatch
        self.open = open
        self.cache_checked = False
        self.direct = None
        self.records = None

    cpdef DirectRoute runnable(self):
        """The DirectRoute a plain request to this model runs through now
        (it is ready to run it as it is read: batch_execution.DirectRoute),
        or None."""
        cdef DirectRoute direct = self.direct
        if direct is None or not direct.ready():
            return None
        return direct


cdef class Admission:
    """``submit(request, future)``: Server.submit's contract (see module).

    Handed at construction: the ledger; ``general(request, future)`` and
    ``general_resolved(model, request, future)``, the server's paths;
    ``uses_cache(model)``; ``spin(model)``, called when a request is the
    only one in flight (the server decides whether to spin for it); the
    tracer. ``bind(manager, loop)`` once the server's models and loop
    exist: before, every request takes the general path."""

    def __init__(self, Ledger ledger, general, general_resolved, uses_cache, spin, tracer):
        self.ledger = ledger
        self.general = general
        self.general_resolved = general_resolved
        self.uses_cache = uses_cache
        self.spin = spin
        self.tracer = tracer
        self.manager = None
        self.versions = None
        self.loop = None

    def bind(self, manager, loop):
        self.manager = manager
        self.versions = manager.versions  # the manager keeps this dict for its life
        self.loop = loop

    cpdef object submit(self, InferRequest request, object future=None, Route route=None):
        """``route``: what ``route(request.model_name)`` gave in this same
        call of the loop, where the caller asked (not looked up again)."""
        cdef Ledger ledger = self.ledger
        cdef PendingRequest pending
        cdef tuple validated
        if self.manager is None or ledger.stopping or request.parameters \
                or request.model_version:
            return self.general(request, future)
        if route is None:
            model = self._only_version(request.model_name)
            if model is None:
                return self.general(request, future)
            route = self._open_route(model)
            if route is None:
                return self.general_resolved(model, request, future)
        validated = route.validate(request)  # raises the general path's errors
        if future is None:
            future = self.loop.create_future()
        direct = route.runnable()
        if direct is not None:
            # run now, as the queue would run it alone (batch_execution.DirectRoute)
            try:
                outputs = direct.run(validated[0], validated[1], NowNs())
                response = route.answer(request, outputs)
            except Exception as err:
                future.set_exception(err)
            else:
                future.set_result(response)
            return future
        pending = PendingRequest(request, future, validated[0], validated[1])
        self._enqueue(route, pending, request.priority, request.timeout_us, validated[2])
        return future

    cpdef object enqueue_plain(self, Route route, PlainPending pending):
        """Queues a plain record that a protocol's reader made for
        ``route`` (what ``route()`` gave in this same call of the loop, its
        ``records`` set): priority 0, no timeout, its inputs of the model's
        fixed shapes. Returns its future."""
        self._enqueue(route, pending, 0, 0, 0)
        route.records_queued += 1
        return pending.future

    cdef int _enqueue(self, Route route, PendingRequest pending, priority, timeout_us,
                      key) except -1:
        """Into the model's queue, the server's books and its loop driver."""
        cdef Ledger ledger = self.ledger
        cdef Scheduler scheduler = route.scheduler
        pending.id = scheduler.enqueue_request(pending, pending.batch_size, priority, timeout_us,
                                               key)
        ledger.handles[pending.future] = (scheduler, pending.id)
        ledger.inflight += 1
        if route.dispatch is not None and not scheduler.wait_holds:
            route.dispatch()
        if ledger.inflight == 1:
            self.spin(route.model)
        return 0

    cpdef Route route(self, model_name):
        """The Route a plain request to ``model_name`` (no version, no
        parameters, tracing off) takes now, or None where submit would
        take it the general way. Its ``runnable()`` says whether such a
        request may run as it is read; else it goes to ``submit`` with it."""
        if self.manager is None or self.ledger.stopping:
            return None
        model = self._only_version(model_name)
        if model is None:
            return None
        return self._open_route(model)

    cdef object _only_version(self, model_name):
        """The model's one loaded version, or None (not loaded, or several:
        the general path picks)."""
        found = self.versions.get(model_name)
        if type(found) is not dict or len(<dict>found) != 1:
            return None
        for model in (<dict>found).values():
            return model

    cdef Route _open_route(self, model):
        """``model``'s Route when it takes the common case now, else None
        (not started: an ensemble, a model still loading; closed; a
        response cache; tracing on)."""
        found = model.route
        if found is None:
            return None
        cdef Route route = <Route>found
        if route.open and not route.cache_checked:
            route.open = not self.uses_cache(model)
            route.cache_checked = True
        if not route.open or self.tracer.active:
            return None
        return route
