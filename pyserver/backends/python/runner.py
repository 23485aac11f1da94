"""Running a Triton Python model: what the worker process (stub.py) and the
in-process runner (in_process.py) share, apart from the API models import
(triton_python_backend_utils holds only what Triton defines): describing a
model's errors, the instance's asyncio loop, checking what execute()
returned, and the BLS plumbing behind pb_utils' exec() and async_exec()."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import traceback

import numpy as np

if __package__:  # pyserver.backends.python.runner, in the server process
    from pyserver.backends.python import triton_python_backend_utils as pb
else:  # a worker's copy, loaded by stub.py beside its pb_utils
    import triton_python_backend_utils as pb

_HERE = os.path.dirname(os.path.abspath(__file__))


def describe(err):
    """An exception as Triton's stub reports it: "Type: message", then the
    model's frames (not pyserver's), innermost first."""

    text = f"{type(err).__name__}: {err}"
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if os.path.dirname(os.path.abspath(f.filename)) != _HERE]
    if frames:
        text += "\n\nAt:\n" + "".join(f"  {f.filename}({f.lineno}): {f.name}\n"
                                      for f in reversed(frames))
    return text


class Reported(Exception):
    """A contract violation reported with Triton's own text (no type name)."""


def execute_failure(instance_name, err):
    """The message every request of a batch whose execute() failed gets."""
    detail = str(err) if isinstance(err, Reported) else describe(err)
    return f"Failed to process the request(s) for model '{instance_name}', message: {detail}"


def awaitable(obj):
    # What `async def` methods return; asyncio itself is imported only by
    # models that use it (it costs ~60 ms of worker start).
    return hasattr(obj, "__await__")


async def _await(awaitable):
    return await awaitable


class AsyncRunner:
    """An instance's asyncio loop, on a daemon thread as in Triton, so
    tasks a model starts keep running between executes. ``on_start`` runs
    first on that thread; ``bind_caller``: the thread that first needs the
    loop gets it as its current event loop (a worker's main thread; not a
    thread of the server's)."""

    def __init__(self, on_start=None, bind_caller=True):

        self.loop = None
        self._on_start = on_start
        self._bind_caller = bind_caller
        self._lock = threading.Lock()

    def _ensure_loop(self):
        import threading

        with self._lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                on_start = self._on_start

                def run():
                    if on_start is not None:
                        on_start()
                    loop.run_forever()

                threading.Thread(target=run, name="model-asyncio", daemon=True).start()
                if self._bind_caller:
                    asyncio.set_event_loop(loop)
                self.loop = loop

    def run(self, awaitable, timeout=None):

        self._ensure_loop()
        if not asyncio.iscoroutine(awaitable):
            awaitable = _await(awaitable)
        return asyncio.run_coroutine_threadsafe(awaitable, self.loop).result(timeout)

    def spawn(self, awaitable, name):
        """Runs a coroutine on the loop without waiting; its failure is
        logged (a decoupled model's async execute)."""

        self._ensure_loop()
        if not asyncio.iscoroutine(awaitable):
            awaitable = _await(awaitable)
        future = asyncio.run_coroutine_threadsafe(awaitable, self.loop)

        def done(f):
            err = f.exception()
            if err is not None:
                sys.stderr.write(f"model '{name}': async execute failed: {describe(err)}\n")

        future.add_done_callback(done)

    def stop(self):
        loop = self.loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)


def decoupled_result(result, runner, instance_name):
    """What a decoupled execute() returned: None, or a coroutine (an async
    execute, which runs on in the background as in Triton)."""
    if result is not None and type(result) is not list and awaitable(result):
        runner.spawn(result, instance_name)
    elif result is not None:
        raise Reported(f"Python model '{instance_name}' is using the decoupled mode "
                        "and the execute function must return None.")


def check_responses(responses, requests):
    """Raises Reported unless execute() returned one InferenceResponse (or
    None, having sent it through the sender) per request."""
    if type(responses) is not list:
        raise Reported(f"Expected a list in the execute return, found type "
                        f"'{type(responses)}'.")
    if len(responses) != len(requests):
        raise Reported(
            "Number of InferenceResponse objects do not match the number of "
            f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
            f"InferenceResponse(s) size is:{len(responses)}\n")
    for r, request in zip(responses, requests):
        if r is None:
            continue
        if rescheduled(request):  # it runs again: its answer comes later
            raise Reported("Expected a None object in the execute function return list for "
                            f"reschduled request, found type '{type(r)}'.")
        if not isinstance(r, pb.InferenceResponse):
            raise Reported("Expected an 'InferenceResponse' object in the execute function "
                            f"return list, found type '{type(r)}'.")
    for r, request in zip(responses, requests):
        sender = request._sender
        if r is not None and sender is not None and sender._count:
            raise Reported("Unable to send response. Non-decoupled model cannot send more "
                            "than one response.")


def rescheduled(request):
    """Whether execute() released ``request`` to run again (iterative
    sequences), as Triton's stub tells: the flags are exactly RESCHEDULE."""
    return request._release_flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


MISSING_RESPONSE = ("Expected an 'InferenceResponse' object in the execute function return "
                     "list, found type '<class 'NoneType'>'.")


def bytes_array(array):
    """A BYTES tensor's array as an object array of bytes (str items encoded)."""
    items = pb._bytes_items(array)
    data = np.empty(len(items), dtype=np.object_)
    data[:] = items
    return data.reshape(array.shape)


def response_tensors(response, wanted):
    """(name, code, array) of the outputs the request asked for (Triton
    prunes the others), BYTES as object arrays of bytes."""
    out = []
    for t in response._output_tensors:
        if wanted is not None and t._name not in wanted:
            continue
        array = t._array
        if t._dtype == pb.TYPE_BYTES:
            array = bytes_array(array)
        out.append((t._name, t._dtype, array))
    return out


def error_from(code_name, message):
    """A TritonError from the server's error code name ("INVALID_ARG" ...)."""
    return pb.TritonError(message, getattr(pb.TritonError, code_name, pb.TritonError.INTERNAL))


def bls_failure(payload):
    """The InferenceResponse of a BLS reply that carries an error, else None
    (a reply: ("error", code, message) or ("bls", size, tensors, parameters,
    (code, message) or None), see services.py)."""
    if payload[0] == "error":
        return pb.InferenceResponse(error=error_from(payload[1], payload[2]))
    if payload[4] is not None:
        return pb.InferenceResponse(error=error_from(payload[4][0], payload[4][1]))
    return None


def bls_inputs(request):
    """A BLS request's inputs as (name, code, array), BYTES as object arrays."""
    for t in request._inputs:
        if not isinstance(t, pb.Tensor):
            raise pb.TritonModelException(
                f"BLS request inputs must be pb_utils.Tensor objects, got {type(t)}")
    return [(t._name, t._dtype, bytes_array(t._array) if t._dtype == pb.TYPE_BYTES else t._array)
            for t in request._inputs]


def bls_description(request):
    """What the server needs of a BLS request besides its tensors."""
    return {
        "model_name": request._model_name,
        "model_version": request._model_version,
        "request_id": request._request_id,
        "correlation_id": request._correlation_id,
        "flags": request._flags,
        "timeout": request._timeout,
        "parameters": request._parameters,
        "outputs": request._requested_output_names,
        # the trace this call is a child of (trace=request.trace()); 0: none
        "trace": request._trace._id if isinstance(request._trace, pb.InferenceTrace) else 0,
    }


class StreamedCall:
    """The responses of one decoupled BLS call, queued for its iterator.
    ``on_cancel`` (set once the call is sent) asks the server to cancel it."""

    def __init__(self):
        import queue

        self.queue = queue.SimpleQueue()
        self.finished = False
        self.cancelled = False
        self.on_cancel = None

    def put(self, response, final):
        if response is None:
            response = pb.InferenceResponse()  # the final flag alone
        self.queue.put(response)
        if final:
            self.queue.put(None)

    def next(self):
        if self.finished:
            return None
        item = self.queue.get()
        if item is None:
            self.finished = True
        return item

    def cancel(self):
        """Asks the server to cancel the request: the model it runs on sees
        is_cancelled() (a queued one ends at once, CANCELLED); responses it
        still sends arrive, up to the final one."""
        if self.cancelled or self.finished or self.on_cancel is None:
            return
        self.cancelled = True
        self.on_cancel()


def one_reply(send):
    """Calls ``send(on_reply)``, which arranges for ``on_reply(payload,
    final)`` to be called from another thread, and waits for that call:
    its payload."""

    box = []
    done = threading.Event()

    def on_reply(payload, _final):
        box.append(payload)
        done.set()

    send(on_reply)
    done.wait()
    return box[0]


def bls_exec(send, request, decoupled):
    """InferenceRequest.exec over a runtime's ``send(request, decoupled,
    on_reply)``: it sends the request, calls ``on_reply(response or None,
    final)`` from another thread as answers arrive, and returns a function
    that cancels the call."""
    if decoupled:
        call = StreamedCall()
        call.on_cancel = send(request, True, call.put)
        return pb.ResponseIterator(call)
    response = one_reply(lambda on_reply: send(request, False, on_reply))
    return response if response is not None else pb.InferenceResponse()


def bls_async_exec(send, request, decoupled):
    """InferenceRequest.async_exec over ``send`` (see bls_exec): a future
    of the running asyncio loop."""

    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value):
        if not future.done():
            future.set_result(value)

    if decoupled:
        call = StreamedCall()
        iterator = pb.ResponseIterator(call)
        first = []

        def on_first(response, final):
            call.put(response, final)
            if not first:
                first.append(True)
                loop.call_soon_threadsafe(settle, iterator)

        call.on_cancel = send(request, True, on_first)
        return future

    def on_reply(response, final):
        loop.call_soon_threadsafe(settle, response if response is not None else pb.InferenceResponse())

    send(request, False, on_reply)
    return future
