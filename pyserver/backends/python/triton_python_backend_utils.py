"""pyserver's ``triton_python_backend_utils``: the module Triton Python models
import as ``pb_utils``.

It offers the names Triton's stub offers (its pure-Python helpers and the
classes its C++ stub binds: Tensor, InferenceRequest, InferenceResponse,
TritonError, TritonModelException, Logger, ...) with the same signatures and
behaviour. What a model handles per request is compiled, as Triton binds it
from C++: Tensor, InferenceResponse, the errors and get_input_tensor_by_name
are engine/pb_objects.pyx's, and InferenceRequest subclasses its core there
(fields and plain accessors) with what needs the server.

Inside a pyserver worker process the worker installs a runtime hook
(``_runtime``) that connects the few calls that need the server (request
cancellation, logging); outside a worker the module still imports and works
for building and inspecting objects (unit tests).

Calls that need the server (response senders of decoupled models, BLS
``exec``/``async_exec``, custom metrics, model control) go through the
runtime; outside a worker they raise TritonModelException. This module holds
Triton's API only: what runs a model (its asyncio loop, the checks of what
execute() returns, the BLS plumbing) is runner.py's.
"""

from __future__ import annotations

import enum
import importlib
import json
import os
import struct
import sys
import time

import numpy as np

# The compiled objects (engine/pb_objects.pyx). A worker has loaded the
# extension by its file before this module (stub.py, channel.engine_module:
# the worker loads no pyserver package); in the server's process it is the
# engine's module.
_objects = sys.modules.get("pyserver.engine.pb_objects") \
    or importlib.import_module("pyserver.engine.pb_objects")

# -- constants ----------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType numbers (what Tensor.triton_dtype() returns).
TYPE_INVALID, TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64 = 0, 1, 2, 3, 4, 5
TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64 = 6, 7, 8, 9
TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_BYTES, TYPE_BF16 = 10, 11, 12, 13, 14

_CODE_TO_NUMPY = {
    TYPE_BOOL: np.bool_, TYPE_UINT8: np.uint8, TYPE_UINT16: np.uint16, TYPE_UINT32: np.uint32,
    TYPE_UINT64: np.uint64, TYPE_INT8: np.int8, TYPE_INT16: np.int16, TYPE_INT32: np.int32,
    TYPE_INT64: np.int64, TYPE_FP16: np.float16, TYPE_FP32: np.float32, TYPE_FP64: np.float64,
    TYPE_BYTES: np.object_,
}

# Wire datatype names (KServe v2) <-> TRITONSERVER_DataType numbers.
CODE_TO_WIRE = _objects.CODE_TO_WIRE
WIRE_TO_CODE = {v: k for k, v in CODE_TO_WIRE.items()}


# -- errors ---------------------------------------------------------------------

# The core raises and checks these: they are its classes.
TritonModelException = _objects.TritonModelException
TritonError = _objects.TritonError


# -- helpers (the pure-Python part of Triton's module) ----------------------------

def serialize_byte_tensor(input_tensor):
    """A BYTES (object or bytes_) array as one bytes object: each element
    a 4-byte little-endian length followed by its bytes, in C order.
    Returns () for an empty array and None for other dtypes."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    pieces = []
    for item in _bytes_items(input_tensor):
        pieces.append(struct.pack("<I", len(item)))
        pieces.append(item)
    return b"".join(pieces)


def deserialize_bytes_tensor(encoded_tensor):
    """The inverse of serialize_byte_tensor: a 1-D object array of bytes."""
    buf = memoryview(encoded_tensor).cast("B")
    items = []
    pos, end = 0, len(buf)
    while pos < end:
        (length,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        items.append(bytes(buf[pos:pos + length]))
        pos += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def _bytes_items(array):
    """The elements of a BYTES array as bytes objects (str as UTF-8, other
    objects through str()), in C order."""
    flat = array.reshape(-1) if array.flags.c_contiguous else np.ascontiguousarray(array).reshape(-1)
    if array.dtype.type == np.bytes_:
        return [bytes(x) for x in flat]
    out = []
    for x in flat:
        if type(x) is bytes:
            out.append(x)
        elif isinstance(x, (bytes, bytearray, memoryview)):
            out.append(bytes(x))
        else:
            out.append(str(x).encode("utf-8"))
    return out


get_input_tensor_by_name = _objects.get_input_tensor_by_name


def get_output_tensor_by_name(inference_response, name):
    """The output Tensor called ``name`` of a response, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    """The config entry (a dict) of input ``name`` in a parsed model config, or None."""
    for entry in model_config.get("input", ()):
        if entry["name"] == name:
            return entry
    return None


def get_output_config_by_name(model_config, name):
    """The config entry (a dict) of output ``name`` in a parsed model config, or None."""
    for entry in model_config.get("output", ()):
        if entry["name"] == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether a parsed model config declares the decoupled transaction policy."""
    policy = model_config.get("model_transaction_policy")
    if policy:
        return bool(policy.get("decoupled", False))
    return False


def triton_to_numpy_type(data_type):
    """TRITONSERVER_DataType number -> numpy type (None when it has none)."""
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    """numpy dtype -> TRITONSERVER_DataType number (None when unsupported)."""
    try:
        return _objects.dtype_code(data_type) or None
    except TypeError:
        return None


def triton_string_to_numpy(triton_type_string):
    """'TYPE_FP32' -> numpy.float32 (KeyError for an unknown name)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def get_model_dir():
    """The folder of the model's version (where model.py is), in a worker."""
    runtime = _runtime
    return runtime.model_dir if runtime is not None else ""


# -- tensors ------------------------------------------------------------------------

Tensor = _objects.Tensor


# -- requests and responses -------------------------------------------------------------

class PreferredMemory:
    """Where a BLS response's tensors should be placed (accepted, CPU only here)."""

    def __init__(self, preferred_memory_type, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class MemoryType(enum.IntEnum):
    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class InferenceTrace:
    """The trace of a request (``request.trace()``): passed as a BLS
    request's ``trace``, it traces that call as a child of the request.
    There is no OpenTelemetry context (Triton's trace mode only)."""

    __slots__ = ("_id",)

    def __init__(self, trace_id=0):
        self._id = trace_id  # the server's trace id; 0: not traced

    def get_context(self):
        return None


class InferenceRequest(_objects.RequestBase):
    """A request: the ones ``execute`` receives, or (BLS) one a model builds
    with ``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])``.
    Its fields and plain accessors are the compiled base's."""

    __slots__ = ()

    def __init__(self, request_id="", correlation_id=0, inputs=None, requested_output_names=None,
                 model_name=None, model_version=-1, flags=0, timeout=0,
                 preferred_memory=None, trace=None, parameters=None):
        if inputs is None or requested_output_names is None or model_name is None:
            raise TypeError("InferenceRequest(): 'inputs', 'requested_output_names' and "
                            "'model_name' are required")
        if not isinstance(correlation_id, (int, str)) or isinstance(correlation_id, bool):
            raise TritonModelException("Correlation ID must be integer or string")
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested_output_names = list(dict.fromkeys(requested_output_names))
        # bytes are taken as the name they spell (Triton's pybind11 binding
        # converts them; python_backend's BLS example passes b"add_sub")
        self._model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or PreferredMemory(TRITONSERVER_MEMORY_CPU, 0)
        self._trace = trace or InferenceTrace()
        self._parameters = _objects.parameters_json(parameters)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._index = -1
        self._key = None
        self._sender = None

    @classmethod
    def _incoming(cls, index, request_id, correlation_id, flags, timeout, parameters_json,
                  requested_output_names, inputs, model_name, model_version, key=None,
                  trace_id=0):
        # A request handed to execute(): built by the server's side, no checks.
        return _objects.new_request(cls, index, request_id, correlation_id, flags, timeout,
                                    parameters_json, requested_output_names, inputs,
                                    model_name, model_version, key,
                                    InferenceTrace(trace_id) if trace_id else None)

    def trace(self):
        return self._trace if self._trace is not None else InferenceTrace()

    def is_cancelled(self):
        runtime = _runtime
        if runtime is None or self._index < 0:
            return False
        return runtime.is_cancelled(self._index, self._key)

    def get_response_sender(self):
        """The sender of this request's responses (one per request)."""
        if self._index < 0:
            raise TritonModelException(
                "Unable to get the response sender: only the requests execute() receives "
                "have one.")
        if self._sender is None:
            self._sender = InferenceResponseSender(self)
        return self._sender

    def exec(self, decoupled=False):
        """Runs this request on ``model_name`` (BLS) and waits: the
        InferenceResponse (errors inside it, not raised), or with
        ``decoupled=True`` an iterator over the model's responses."""
        if decoupled is None:
            raise TypeError("exec(): 'decoupled' must be a bool")
        return _need_runtime("InferenceRequest.exec").bls_exec(self, bool(decoupled))

    def async_exec(self, decoupled=False):
        """``exec`` as an awaitable, for ``async def execute``: several may be
        in flight at once (``asyncio.gather``)."""
        if decoupled is None:
            raise TypeError("async_exec(): 'decoupled' must be a bool")
        return _need_runtime("InferenceRequest.async_exec").bls_async_exec(self, bool(decoupled))

    def __repr__(self):
        return (f"InferenceRequest(id={self._request_id!r}, "
                f"inputs={[t.name() for t in self._inputs]})")


InferenceResponse = _objects.InferenceResponse


def _need_runtime(what):
    runtime = _runtime
    if runtime is None:
        raise TritonModelException(f"{what}: only available inside a model served by pyserver")
    return runtime


class InferenceResponseSender:
    """Sends the responses of one request: ``sender.send(response, flags)``,
    ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` with (or instead of) the
    last one. Decoupled models may send any number, from any thread, during
    or after ``execute``; other models exactly one, with the final flag,
    during ``execute`` (which then returns None for that request)."""

    def __init__(self, request):
        import threading

        self._request = request
        self._lock = threading.Lock()
        self._closed = False
        self._count = 0
        self._response = None  # a non-decoupled model's one response

    def send(self, response=None, flags=0):
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(f"send(): response must be a pb_utils.InferenceResponse or None, "
                            f"got {type(response)}")
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set "
                "to zero.")
        runtime = _need_runtime("InferenceResponseSender.send").for_request(self._request)
        decoupled = runtime.decoupled
        with self._lock:
            if not decoupled:
                if response is not None and self._count > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response.")
                if response is None and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL \
                        and self._count == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response.")
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed.")
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            self._count += 1
            if not decoupled:
                if response is not None:
                    self._response = response
                return
        runtime.send_response(self._request, response, flags)

    def is_cancelled(self):
        return self._request.is_cancelled()

    def _close(self):
        with self._lock:
            self._closed = True


class ResponseIterator:
    """The responses of a BLS request with ``decoupled=True``, in order; the
    final flag sent alone arrives as a last empty response."""

    def __init__(self, call):
        self._call = call

    def __iter__(self):
        return self

    def __next__(self):
        item = self._call.next()
        if item is None:
            raise StopIteration
        return item

    def cancel(self):
        self._call.cancel()


# -- logging ------------------------------------------------------------------------------

class Logger:
    """``pb_utils.Logger.log_info("...")``: messages go to the server's log."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        frame = sys._getframe(1)
        # Skip our own log_* wrappers so the location is the caller's.
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        filename = os.path.basename(frame.f_code.co_filename) if frame is not None else "?"
        line = frame.f_lineno if frame is not None else 0
        runtime = _runtime
        if runtime is not None:
            runtime.log(int(level), str(message), filename, line)
        else:
            _stderr_log(int(level), str(message), filename, line)

    @staticmethod
    def log_info(message):
        Logger.log(message, Logger.LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, Logger.LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, Logger.LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, Logger.LogLevel.VERBOSE)


def _stderr_log(level, message, filename, line):
    letter = "IWEV"[level] if 0 <= level < 4 else "I"
    if letter == "V":
        letter = "I"
    now = time.time()
    stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e6):06d}"
    sys.stderr.write(f"{letter}{stamp} {os.getpid()} {filename}:{line}] {message}\n")
    sys.stderr.flush()


# -- custom metrics ---------------------------------------------------------------------------

class MetricFamily:
    """A family of custom metrics shown on the server's /metrics endpoint:
    ``MetricFamily(name, description, kind=MetricFamily.COUNTER)``; its
    ``Metric(labels={...})`` (histograms also take ``buckets=[...]``) are the
    labelled series that ``increment``/``set``/``observe``."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException("Error when creating MetricFamily: Unknown metric kind")
        self._name = name
        self._kind = kind
        self._id = _metric_call("family", (name, description, int(kind)),
                                "Error when creating MetricFamily: ")

    def Metric(self, labels=None, buckets=None):  # noqa: N802 - Triton's name
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        return Metric(self, labels or {}, buckets)


class Metric:
    """One labelled series of a MetricFamily (make it with ``family.Metric``)."""

    def __init__(self, family, labels, buckets):
        if not isinstance(family, MetricFamily):
            raise TritonModelException("Error when creating Metric: use MetricFamily.Metric()")
        self._family = family  # the family lives as long as its metrics
        self._id = _metric_call("metric", (family._id, dict(labels), buckets),
                                "Error when creating Metric: ")

    def increment(self, value):
        _metric_call("increment", (self._id, float(value)), "Failed to increment metric value: ")

    def set(self, value):
        _metric_call("set", (self._id, float(value)), "Failed to set metric value: ")

    def observe(self, value):
        _metric_call("observe", (self._id, float(value)), "Failed to observe metric value: ")

    def value(self):
        return _metric_call("value", (self._id,), "Failed to get metric value: ")


def _metric_call(op, args, prefix):
    runtime = _need_runtime("pb_utils.MetricFamily")
    reply = runtime.ask(("metric", op, args))
    if reply[0] == "error":
        raise TritonModelException(prefix + reply[2])
    return reply[1]


# -- model control ------------------------------------------------------------------------------

def load_model(model_name, config="", files=None):
    """Loads (or reloads) ``model_name`` on the server, optionally with a
    config (JSON text) and files ``{"file:<version>/<name>": bytes}``, as
    the repository API's load does. The server must run with
    ``--model-control-mode=explicit``."""
    if model_name is None or config is None:
        raise TypeError("load_model(): model_name and config must not be None")
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"Failed to load model: failed to load model '{model_name}', files should be "
                "a dictionary of file paths and file contents")
        stripped = {}
        for key, content in files.items():
            if not isinstance(key, str) or not isinstance(content, (bytes, bytearray)):
                raise TritonModelException(
                    f"Failed to load model: failed to load model '{model_name}', files should "
                    "be a dictionary of file paths and file contents")
            stripped[key[5:] if key.startswith("file:") else key] = bytes(content)
        files = stripped
    _model_call("load", (model_name, config, files), "Failed to load model: ")


def unload_model(model_name, unload_dependents=False):
    """Unloads ``model_name`` (explicit model control)."""
    if model_name is None or unload_dependents is None:
        raise TypeError("unload_model(): arguments must not be None")
    _model_call("unload", (model_name, bool(unload_dependents)), "Failed to unload model: ")


def is_model_ready(model_name, model_version=""):
    """Whether ``model_name`` (a given version, or the one the version
    policy picks) is loaded and ready."""
    if model_name is None or model_version is None:
        raise TypeError("is_model_ready(): arguments must not be None")
    version = str(model_version)
    if version:
        try:
            number = int(version)
        except ValueError as err:
            raise TritonModelException(
                f"Failed to check model readiness: failed to get model version from specified "
                f"version string '{version}' (details: {err}), version should be an integral "
                "value > 0") from None
        if number <= 0:
            raise TritonModelException(
                f"Failed to check model readiness: failed to get model version from specified "
                f"version string '{version}', version should be an integral value > 0")
    return bool(_model_call("ready", (model_name, version), "Failed to check model readiness: "))


def _model_call(op, args, prefix):
    runtime = _need_runtime("pb_utils model control")
    reply = runtime.ask(("model", op, args))
    if reply[0] == "error":
        raise TritonModelException(prefix + reply[2])
    return reply[1]


# -- auto-complete ----------------------------------------------------------------------------

class ModelConfig:
    """The model configuration handed to ``auto_complete_config``: read it
    with ``as_dict()``, extend it with ``set_max_batch_size``, ``add_input``,
    ``add_output``, ``set_dynamic_batching`` and
    ``set_model_transaction_policy``, and return it."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config) if isinstance(model_config, str) \
            else dict(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self):
        return self._model_config

    def _name(self):
        return self._model_config.get("name", "")

    def set_max_batch_size(self, max_batch_size):
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for other in ("sequence_batching", "ensemble_scheduling"):
            if self._model_config.get(other):
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'")
        if not self._model_config.get("dynamic_batching"):
            self._model_config["dynamic_batching"] = {}

    def _add_tensor(self, kind, tensor, allowed):
        name = tensor.get("name")
        for key in tensor:
            if key not in allowed:
                listed = ", ".join(f"'{k}'" for k in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than {listed}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} in auto-complete-config function for model "
                             f"'{self._name()}' is missing 'name' property.")
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{kind} '{name}' in auto-complete-config function for model "
                                 f"'{self._name()}' is missing '{key}' property.")
        for existing in self._model_config[kind]:
            if existing.get("name") != name:
                continue
            have_type = existing.get("data_type", "TYPE_INVALID")
            if have_type != "TYPE_INVALID" and have_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name()}', configuration expects datatype "
                    f"{have_type} for {kind} '{name}', model provides {tensor['data_type']}")
            have_dims = existing.get("dims")
            if have_dims and list(have_dims) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{self._name()}', tensor '{name}': the model expects dims "
                    f"{list(tensor['dims'])} but the model configuration specifies dims "
                    f"{list(have_dims)}")
            if ("optional" in existing and "optional" in tensor
                    and existing["optional"] != tensor["optional"]):
                raise ValueError(
                    f"model '{self._name()}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{existing['optional']}")
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(tensor)

    def add_input(self, input):
        self._add_tensor("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output):
        self._add_tensor("output", output, ["name", "data_type", "dims"])

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than 'decoupled'.")
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            new = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != new:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name()}', which is already set to '{policy['decoupled']}'.")
            policy["decoupled"] = new


# Set where the model runs: the link to the server (the worker's, or the
# in-process runner's).
_runtime = None
