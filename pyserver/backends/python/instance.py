"""What an instance of a Python model is to the server, wherever the model
runs: in a worker process (backend.py) or on the server's own threads
(in_process.py). The base class both build on, and the helpers both use to
describe requests to a model and to read its answers."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from pyserver.backends._common import instance_placement
from pyserver.backends.python.services import Services
from pyserver.engine import now_ns
from pyserver.kernel.dtypes import WIRE_TO_CODE, config_type_name, numpy_to_wire
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")

# A worker that has not finished a batch this many seconds after it got it
# (or after its previous answer) is hung: it is stopped, with its stacks, and
# restarted. Off unless the config sets it: a long execute() may be legitimate.
EXECUTE_TIMEOUT_PARAMETER = "pyserver_execute_timeout_seconds"
class ServedInstance:
    """What an instance of a Python model is to the server, wherever the
    model runs (a worker process: PythonBackend; this process:
    in_process.ThreadPythonBackend): its initialize() arguments, the server
    it serves, what it asks of it (services.py), and the decoupled requests
    it has yet to finish."""

    # A Python-based backend's model.py (BACKEND_DIR/NAME/model.py), which
    # runs in place of a model.py of the model's own; "" for the latter.
    runtime_model = ""

    def __init__(self, model_path: str, config, instance_name: str, context=None):
        self.model_path = str(model_path)
        self.model_name = config.name
        self.instance_name = instance_name
        self.version = Path(self.model_path).parent.name
        self.config = config
        self.output_names = [o.name for o in config.output]
        # Implicit state outputs (sequence_batching.state): always wanted
        # back from the model, whatever the request asks for.
        self.state_outputs = [st.output_name for st in config.sequence_batching.state]
        self.input_codes = {}
        for spec in config.input:
            name = config_type_name(spec.data_type)
            wire = "BYTES" if name == "TYPE_STRING" else name[5:]
            self.input_codes[spec.name] = WIRE_TO_CODE.get(wire, 0)
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        self._mv = None  # the ModelVersion (attach)
        # The server's services (kernel/context.py): what the model's BLS
        # calls, metrics and model control go to; None outside a server.
        self.context = context
        self._open: dict[int, object] = {}  # decoupled requests not answered in full, by id
        # ... and for each: [responses so far, when the last one (or the
        # execution) was], for Triton's per-response statistics.
        self._marks: dict[int, list] = {}
        self._open_lock = threading.Lock()
        self._services = None

    def _init_args(self, instance_name: str) -> dict:
        from pyserver.config import config_to_json

        config = self.config
        kind, device_id = instance_placement(config, instance_name)
        return {
            "model_config": json.dumps(config_to_json(config)),
            "model_instance_kind": kind.removeprefix("KIND_"),
            "model_instance_name": instance_name,
            "model_instance_device_id": str(device_id),
            "model_repository": str(Path(self.model_path).parent.parent),
            "model_version": self.version,
            "model_name": self.model_name,
        }

    def attach(self, mv) -> None:
        """Called by the ModelVersion this instance serves."""
        self._mv = mv

    def server_context(self):
        """The context of the server this instance serves; ServerError when
        it runs outside one (a tool, or a test without a server)."""
        context = self.context
        if context is None or context.requests is None:
            raise ServerError(Code.UNAVAILABLE,
                              f"python model '{self.model_name}' is not served by a running server")
        return context

    def services(self):
        if self._services is None:
            self._services = Services(self)
        return self._services

    def release_services(self) -> None:
        if self._services is not None:
            self._services.release()

    # -- decoupled requests ------------------------------------------------------------

    def _open_requests(self, pending, started: int) -> None:
        """Open until their final response: the model may answer after the
        batch is done, from any of its threads."""
        with self._open_lock:
            for p in pending:
                self._open[p.id] = p
                self._marks[p.id] = [0, started]

    def deliver(self, key: int, outputs, params, error, final: bool, arrived: int) -> str | None:
        """A response (or the final flag) a decoupled model sent for request
        ``key``: into the request's stream, counted in the statistics.
        Returns why it could not go, or None."""
        with self._open_lock:
            p = self._open.pop(key, None) if final else self._open.get(key)
            marks = self._marks.pop(key, None) if final else self._marks.get(key)
        if p is None:
            return "Unable to send response. Response sender has been closed."
        response = None
        if outputs is not None:
            response = self._mv._request_response(p, outputs, params or None)
        if marks is not None:
            done = now_ns()
            outcome = "fail" if error is not None else "success" if response is not None \
                else "empty"
            self._mv.stats.record_response(marks[0], outcome, max(0, arrived - marks[1]),
                                           done - arrived)
            marks[0] += 1
            marks[1] = done
        # Queued on the loop before the sender hears back, so it is ahead of
        # whatever the model does next (another response, a failed batch).
        p.future.push(response, error, final)
        return None

    def _close_open(self, pending) -> None:
        with self._open_lock:
            for p in pending:
                self._open.pop(p.id, None)
                self._marks.pop(p.id, None)

    def _fail_open(self, error: ServerError) -> None:
        with self._open_lock:
            open_requests, self._open = list(self._open.values()), {}
            self._marks = {}
        for p in open_requests:
            p.future.push(None, error, True)


def word_parameter(config, key: str, words: tuple, default: str) -> str:
    """The config's parameter ``key``: one of ``words`` (case and spaces
    aside), or ``default`` where the config has none."""
    params = config.parameters
    if key not in params:
        return default
    given = params[key].string_value
    value = given.strip().lower()
    if value not in words:
        choices = " or ".join(filter(None, (", ".join(f'"{w}"' for w in words[:-1]),
                                            f'"{words[-1]}"')))
        raise ServerError(Code.INVALID_ARG, f"model '{config.name}': parameter '{key}' must be "
                                            f"{choices}, got \"{given}\"")
    return value


def execute_timeout(config) -> float:
    """The config's pyserver_execute_timeout_seconds (0: none)."""
    params = config.parameters
    if EXECUTE_TIMEOUT_PARAMETER not in params:
        return 0.0
    text = params[EXECUTE_TIMEOUT_PARAMETER].string_value
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ServerError(Code.INVALID_ARG,
                          f"model '{config.name}': parameter '{EXECUTE_TIMEOUT_PARAMETER}' must be "
                          f"a number of seconds (0: no limit), got \"{text}\"")
    return value


def log_from_model(instance_name, level, message, filename, line):
    """A pb_utils.Logger record from a worker, into the server's log: from
    the model's file and line, as Triton's Python backend logs it (the
    instance travels as the record's ``instance`` attribute)."""
    py_level = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR,
                3: logging.DEBUG}.get(level, logging.INFO)
    if not log.isEnabledFor(py_level):
        return
    record = log.makeRecord(log.name, py_level, filename, line, "%s", (message,), None,
                            extra={"instance": instance_name})
    log.handle(record)


def worker_error(code_name: str, message: str) -> ServerError:
    """A request's error response from its worker (TritonError's code name)."""
    return ServerError(Code.__members__.get(code_name, Code.INTERNAL), message)


def code_of(array) -> int:
    """The type code of an input the config does not declare (a sequence
    control input): from its array."""
    return WIRE_TO_CODE.get(numpy_to_wire(array.dtype), 0)
