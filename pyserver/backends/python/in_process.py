"""Python models run in the server's own process, on its instance threads:
``parameters { key: "pyserver_execution_mode" value { string_value: "thread" } }``.

The default ("process") gives each instance a worker process (backend.py):
N instances are N cores of parallel Python, a crash or a hang stays in its
worker, and tensors cross shared memory. "thread" imports model.py here,
once per instance (each instance has its own module, as each worker would),
and calls ``execute`` on the instance's thread: no process, no copy of
inputs or outputs, no message per batch, and instances share the GIL, so
they run in parallel only while ``execute`` is in code that releases it
(numpy on large arrays, torch, I/O). Choose it for models whose work
releases the GIL or that want one copy of their weights for all instances;
keep processes for pure-Python work and for models that may crash or hang
(bench/python_execution_mode.py measures both; see the README).

Everything pb_utils offers works the same: BLS (``exec``/``async_exec``,
decoupled iterators), decoupled response senders, ``async def`` methods (on
the instance's own asyncio loop thread), custom metrics, model control,
Logger, ``is_ready``. pb_utils is this process's module: ``_runtime`` is one
``_Router`` that sends each call to the instance it comes from (the thread's
instance; a request's sender to the request's instance; from a thread the
model started itself, the only in-process instance, if there is one).

A model's outputs are handed over as they are (not copied): it must not
change an array after returning it in a response.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np

from pyserver.backends.base import RESCHEDULED, Capability
from pyserver.backends.python import runner
from pyserver.backends.python import triton_python_backend_utils as pb
from pyserver.backends.python.execution_env import PARAMETER as ENV_PARAMETER
from pyserver.backends.python.instance import (
    EXECUTE_TIMEOUT_PARAMETER,
    ServedInstance,
    code_of,
    execute_timeout,
    log_from_model,
    word_parameter,
    worker_error,
)
from pyserver.backends.python.services import bls_request
from pyserver.engine import now_ns
from pyserver.engine.region_io import request_item
from pyserver.kernel.dtypes import BYTES_CODE, CODE_TO_NUMPY, CODE_TO_WIRE
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferTensor

log = logging.getLogger("pyserver")

EXECUTION_MODE_PARAMETER = "pyserver_execution_mode"
_MODES = ("process", "thread")


def execution_mode(config) -> str:
    """The config's pyserver_execution_mode: "process" (default) or "thread"."""
    return word_parameter(config, EXECUTION_MODE_PARAMETER, _MODES, "process")


class _Router:
    """pb_utils._runtime in the server process (see the module)."""

    def __init__(self):
        self._local = threading.local()
        self._instances: list[ThreadPythonBackend] = []
        self._lock = threading.Lock()

    def add(self, instance) -> None:
        """Registers an instance; the first links pb_utils to the router."""
        with self._lock:
            if not self._instances:
                sys.modules.setdefault("triton_python_backend_utils", pb)
                if pb._runtime is None:
                    pb._runtime = self
            self._instances.append(instance)

    def remove(self, instance) -> None:
        """Unregisters an instance; after the last, pb_utils is as it was."""
        with self._lock:
            if instance in self._instances:
                self._instances.remove(instance)
            if not self._instances:
                if pb._runtime is self:
                    pb._runtime = None
                if sys.modules.get("triton_python_backend_utils") is pb:
                    del sys.modules["triton_python_backend_utils"]

    def enter(self, instance):
        """Makes ``instance`` this thread's; returns the one it replaces."""
        local = self._local
        previous = getattr(local, "instance", None)
        local.instance = instance
        return previous

    def leave(self, previous) -> None:
        self._local.instance = previous

    def current(self):
        instance = getattr(self._local, "instance", None)
        if instance is not None:
            return instance
        with self._lock:
            if len(self._instances) == 1:
                return self._instances[0]
        raise pb.TritonModelException(
            "this call needs the model instance it comes from, and the thread it was made on "
            "belongs to no instance (several models run in this process)")

    # -- what pb_utils calls ---------------------------------------------------------

    @property
    def model_dir(self) -> str:
        try:
            return self.current().version_dir
        except pb.TritonModelException:
            return ""

    @staticmethod
    def for_request(request):
        return request._key[0]

    @staticmethod
    def is_cancelled(_index, key) -> bool:
        future = key[1].future
        return bool(future is not None and future.cancelled())

    def bls_exec(self, request, decoupled):
        return runner.bls_exec(self.current().bls_send, request, decoupled)

    def bls_async_exec(self, request, decoupled):
        return runner.bls_async_exec(self.current().bls_send, request, decoupled)

    def ask(self, msg):
        return self.current().ask(msg)

    def log(self, level, message, filename, line):
        instance = getattr(self._local, "instance", None)
        log_from_model(instance.instance_name if instance is not None else "python",
                        level, message, filename, line)


_router = _Router()


class _SysPath:
    """The model folders on sys.path, each while an instance imported from
    it is loaded (a folder that was there before stays)."""

    def __init__(self):
        self._users: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, *folders: str) -> list[str]:
        added = []
        with self._lock:
            for folder in folders:
                if folder in self._users:
                    self._users[folder] += 1
                elif folder not in sys.path:
                    sys.path.append(folder)
                    self._users[folder] = 1
                else:
                    continue
                added.append(folder)
        return added

    def drop(self, folders: list[str]) -> None:
        with self._lock:
            for folder in folders:
                self._users[folder] -= 1
                if not self._users[folder]:
                    del self._users[folder]
                    try:
                        sys.path.remove(folder)
                    except ValueError:
                        pass


_paths = _SysPath()


class _LocalPeer:
    """What Services (services.py) answers for an in-process instance: its
    replies go to the waiting callbacks, tensors are handed over as arrays."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seq = 0
        self._handlers: dict[int, object] = {}

    def register(self, handler) -> int:
        with self._lock:
            self._seq += 1
            self._handlers[self._seq] = handler
            return self._seq

    def reply(self, seq: int, payload, final: bool = True) -> None:
        with self._lock:
            handler = self._handlers.pop(seq, None) if final else self._handlers.get(seq)
        if handler is not None:
            handler(payload, final)

    @staticmethod
    def write_tensors(tensors) -> tuple:
        return 0, tensors


class ThreadPythonBackend(ServedInstance):
    """One instance of a Triton Python model run in this process (module)."""

    # The batch goes to the model as separate requests (Triton's
    # execute(requests) API), on the instance's thread in this process.
    capabilities = Capability.TAKES_REQUESTS | Capability.SERVER_CONTEXT | \
        Capability.TAKES_PLAIN_RECORDS

    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int,
                 context=None):
        super().__init__(model_path, config, instance_name, context)
        if ENV_PARAMETER in config.parameters:
            raise ServerError(Code.INVALID_ARG,
                              f"python model '{config.name}': {ENV_PARAMETER} needs "
                              f"{EXECUTION_MODE_PARAMETER} \"process\": in a thread the model runs "
                              "in the server's own Python")
        if execute_timeout(config) and instance_name.endswith("_0"):
            log.warning("python model '%s': parameter %s has no effect in thread mode (a thread "
                        "cannot be stopped)", self.model_name, EXECUTE_TIMEOUT_PARAMETER)
        started = time.monotonic()
        self.version_dir = str(Path(self.model_path).parent)
        self._peer = _LocalPeer()
        self._closed = False
        self._module_name = ""
        self._paths: list[str] = []
        self.runner = runner.AsyncRunner(on_start=lambda: _router.enter(self), bind_caller=False)
        _router.add(self)  # models here import this process's pb_utils, linked to it
        previous = _router.enter(self)
        try:
            cls = self._import_model()
            self.model = cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                result = init(self._init_args(instance_name))
                if runner.awaitable(result):
                    self.runner.run(result)
        except Exception as err:
            _router.remove(self)
            self.runner.stop()
            sys.modules.pop(self._module_name, None)
            _paths.drop(self._paths)
            raise ServerError(Code.INTERNAL,
                              f"python model '{self.model_name}' instance '{instance_name}': "
                              f"{runner.describe(err)}") from None
        finally:
            _router.leave(previous)
        if hasattr(self.model, "is_ready"):  # the model answers readiness itself
            self.capabilities = type(self).capabilities | Capability.READINESS
        self.start_seconds = time.monotonic() - started
        log.info("python model '%s' instance '%s': running in the server process (threads) "
                 "ready in %.0f ms", self.model_name, instance_name, self.start_seconds * 1000)

    def _import_model(self):
        """Imports model.py as its own module (one per instance), with the
        version and model folders on sys.path as Triton's stub has them."""
        path = self.runtime_model or self.model_path
        if not path.endswith(".py"):
            raise ImportError(f"Model name must end with '.py'. Model name is \"{path}\".")
        if self.runtime_model:  # a Python-based backend: its folder on the path
            self._paths = _paths.add(str(Path(path).parent))
        else:
            self._paths = _paths.add(self.version_dir, str(Path(self.version_dir).parent))
        safe = re.sub(r"\W", "_", f"{self.model_name}_{self.version}_{self.instance_name}")
        name = f"_pyserver_model_{safe}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        self._module_name = name
        return module.TritonPythonModel

    # -- execution (the instance thread) ---------------------------------------------

    def execute(self, inputs: dict) -> dict:
        raise ServerError(Code.INTERNAL, "the python backend takes requests, not batches")

    def execute_requests(self, pending: list) -> list:
        """One batch: ``pending`` are ModelVersion's PendingRequests; returns
        per request its outputs (with the response's parameters) or error."""
        decoupled = self.decoupled
        requests = self._requests(pending)
        if decoupled:
            self._open_requests(pending, now_ns())
        previous = _router.enter(self)
        try:
            result = self.model.execute(requests)
            if decoupled:
                runner.decoupled_result(result, self.runner, self.instance_name)
                results = [RESCHEDULED if runner.rescheduled(q) else None for q in requests]
                # A rescheduled request opens again when it runs again.
                self._close_open([p for p, r in zip(pending, results) if r is RESCHEDULED])
                return results
            if type(result) is not list and runner.awaitable(result):
                result = self.runner.run(result)
            runner.check_responses(result, requests)
            return [RESCHEDULED if runner.rescheduled(q) else self._result(r, q)
                    for r, q in zip(result, requests)]
        except Exception as err:
            error = ServerError(Code.INTERNAL, runner.execute_failure(self.instance_name, err))
            if decoupled:
                # Each open request ends with this error; nothing more may
                # be sent for them.
                for request in requests:
                    request.get_response_sender()._close()
                self._close_open(pending)
                for p in pending:
                    p.future.push(None, error, True)
            raise error from None
        finally:
            _router.leave(previous)
            if not decoupled:
                for request in requests:
                    if request._sender is not None:
                        request._sender._close()

    def _requests(self, pending: list) -> list:
        Tensor, Request = pb.Tensor, pb.InferenceRequest
        codes = self.input_codes
        requests = []
        for index, p in enumerate(pending):
            tensors = [Tensor._wrap(name, array, codes.get(name) or code_of(array))
                       for name, array in p.arrays.items()]
            rid, corr, flags, timeout, params, wanted, _, _, trace = request_item(
                p, self.output_names, None, None, self.state_outputs)
            requests.append(Request._incoming(index, rid, corr, flags, timeout, params, wanted,
                                              tensors, self.model_name, self.version, (self, p),
                                              trace))
        return requests

    @staticmethod
    def _result(response, request):
        if response is None and request._sender is not None:
            response = request._sender._response  # sent through the sender instead
        if response is None:
            return ServerError(Code.INTERNAL, runner.MISSING_RESPONSE)
        error = response._error
        if error is not None:
            return worker_error(error.code().name, error.message())
        outputs = {name: array if code == BYTES_CODE or array.flags.c_contiguous
                   else np.ascontiguousarray(array)
                   for name, code, array in runner.response_tensors(
                       response, request._requested_output_names)}
        params = response._parameters_dict
        return (outputs, params) if params else outputs

    # -- what pb_utils asks (any thread) --------------------------------------------------

    def send_response(self, request, response, flags) -> None:
        """A decoupled model's response, into its request's stream."""
        outputs = params = error = None
        if response is not None:
            if response._error is not None:
                error = worker_error(response._error.code().name, response._error.message())
            else:
                # A copy, as Triton's stub copies a sent response into shared
                # memory: the model runs on and may refill the same array.
                outputs = {name: np.array(array, order="C") for name, _code, array in
                           runner.response_tensors(response, request._requested_output_names)}
                params = response._parameters_dict
        problem = self.deliver(request._key[1].id, outputs, params, error,
                               flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL, now_ns())
        if problem:  # its request ended meanwhile (the server gave up on it)
            log.warning("python model '%s': response for request '%s' not delivered: %s",
                        self.model_name, request._request_id, problem)

    def bls_send(self, request, decoupled, on_reply):
        """Submits a BLS request (runner.bls_exec's ``send``); returns the
        function that cancels it."""
        services = self.services()
        desc = runner.bls_description(request)
        inputs = []
        for name, code, array in runner.bls_inputs(request):
            datatype = CODE_TO_WIRE.get(code)
            if datatype is None:
                raise pb.TritonModelException(f"BLS input '{name}' has an unknown data type {code}")
            inputs.append(InferTensor(name, datatype, array.shape, array))

        def handler(payload, final):
            on_reply(_bls_response(payload), final)

        seq = self._peer.register(handler)
        try:
            context = self.server_context()
            infer_request = bls_request(desc, inputs)
        except ServerError as err:
            self._peer.reply(seq, ("error", err.code.name, err.message))
            return lambda: None
        server = context.requests
        loop = context.loop
        loop.call_soon_threadsafe(services._bls_submit, server, self._peer, seq, infer_request,
                                  decoupled)
        return lambda: loop.call_soon_threadsafe(services._bls_cancel, server, self._peer, seq)

    def ask(self, msg):
        """A metric or model-control call (services.py), answered once."""
        peer = self._peer
        return runner.one_reply(lambda on_reply: self.services().handle(
            peer, (msg[0], peer.register(on_reply)) + tuple(msg[1:])))

    # -- health and lifecycle ---------------------------------------------------------

    def healthy(self) -> bool:
        return not self._closed


    def is_ready(self, timeout: float = 5.0) -> bool:
        """The model's own is_ready(), when it defines one."""
        check = getattr(self.model, "is_ready", None)
        if self._closed or check is None:
            return not self._closed
        previous = _router.enter(self)
        try:
            result = check()
            if runner.awaitable(result):
                result = self.runner.run(result, timeout=timeout)
            if not isinstance(result, (bool, np.bool_)):
                raise TypeError(f"is_ready() must return a boolean, got {type(result).__name__}")
            return bool(result)
        except Exception as err:
            log.warning("python model '%s' instance '%s': is_ready: %s", self.model_name,
                        self.instance_name, runner.describe(err))
            return False
        finally:
            _router.leave(previous)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.release_services()
        fin = getattr(self.model, "finalize", None)
        previous = _router.enter(self)
        try:
            if fin is not None:
                result = fin()
                if runner.awaitable(result):
                    self.runner.run(result)
        except Exception as err:
            log.error("python model '%s' instance '%s': finalize failed: %s", self.model_name,
                      self.instance_name, runner.describe(err))
        finally:
            _router.leave(previous)
            self.runner.stop()
            _router.remove(self)
            sys.modules.pop(self._module_name, None)
            _paths.drop(self._paths)
        self._fail_open(ServerError(
            Code.UNAVAILABLE,
            f"python model '{self.model_name}' instance '{self.instance_name}' was unloaded "
            "before sending the final response"))


def _bls_response(payload):
    """A BLS reply (services.py) as a pb_utils.InferenceResponse (None: the
    final flag alone)."""
    failed = runner.bls_failure(payload)
    if failed is not None:
        return failed
    _, _size, tensors, params, _error = payload
    if tensors is None:
        return None
    return pb.InferenceResponse(
        output_tensors=[pb.Tensor._wrap(name, _as_numpy(array, code), code)
                        for name, code, array in tensors],
        parameters=params)


def _as_numpy(array, code):
    """A BLS output as pb_utils holds it (BF16 as raw 16-bit words)."""
    dtype = CODE_TO_NUMPY.get(code)
    if dtype is not None and array.dtype != dtype and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array
