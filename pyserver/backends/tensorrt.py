"""TensorRT backend (`platform: "tensorrt_plan"`, `model.plan`) on the real
TensorRT runtime (Python bindings, TensorRT 10 tensor API), as Triton's
tensorrt backend runs a plan:

- the plan is deserialized once per GPU and shared by that GPU's
  instances; each instance has one execution context per optimization
  profile it may use (`instance_group.profile`, all of them by default);
- I/O tensors are bound by name; for each batch the profile whose
  [min, max] range holds every input shape and whose opt shape is nearest
  (Manhattan distance) is chosen, as Triton does;
- each instance runs on a stream of the engine's CUDA stream pool for its
  GPU (csrc); its I/O bindings are blocks of the GPU's CUDA memory pool
  (--cuda-memory-pool-byte-size), held and grown as batches need; inputs
  are staged in blocks of the server's pinned memory pool
  (--pinned-memory-pool-byte-size) and copied to the GPU asynchronously on
  that stream; outputs come back the same way, and are
  returned in their pinned blocks, which go back to the pool once sent.

Without the tensorrt package, a CUDA runtime or a GPU, a model fails to
load and says which is missing; a KIND_CPU instance is refused with
Triton's text.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

try:
    import tensorrt as trt
except ImportError as err:
    raise ImportError(
        f"the TensorRT backend needs the tensorrt package, which is not installed ({err}); "
        "install it on a machine with an NVIDIA GPU: pip install 'pyserver[tensorrt]'") from err

from pyserver.backends import _cuda
from pyserver.backends._common import (
    data_type_name,
    file_identity,
    instance_group,
    instance_placement,
    pick_profile,
    prefer_gpu,
)
from pyserver.backends.base import Capability
from pyserver.engine.memory import CudaStreamPool
from pyserver.kernel.dtypes import WIRE_TO_NUMPY, config_to_wire
from pyserver.kernel.errors import Code, ServerError
from pyserver.runtime.device_memory import DeviceMemory
from pyserver.runtime.host_memory import HostMemory

log = logging.getLogger("pyserver")

_TRT_TO_CONFIG = {
    trt.DataType.FLOAT: "TYPE_FP32", trt.DataType.HALF: "TYPE_FP16",
    trt.DataType.INT8: "TYPE_INT8", trt.DataType.INT32: "TYPE_INT32",
    trt.DataType.BOOL: "TYPE_BOOL", trt.DataType.UINT8: "TYPE_UINT8",
}
for _name, _config in (("INT64", "TYPE_INT64"), ("BF16", "TYPE_BF16")):
    if hasattr(trt.DataType, _name):  # TensorRT >= 9 / 10
        _TRT_TO_CONFIG[getattr(trt.DataType, _name)] = _config


def _numpy_of(config_type: str | None):
    """A config type's numpy dtype (the kernel's table: BF16 as uint16 words)."""
    return WIRE_TO_NUMPY.get(config_to_wire(config_type)) if config_type else None


_logger = trt.Logger(trt.Logger.WARNING)
_STREAMS_PER_GPU = 8
_stream_pools: dict = {}  # device -> CudaStreamPool
_fallback_memory: dict = {}  # attribute -> pool set, without a Server


def _stream_for(device: int) -> int:
    """A stream of the device's pool (round-robin: up to _STREAMS_PER_GPU
    instances on one GPU each get their own)."""
    with _engines_lock:
        pool = _stream_pools.get(device)
        if pool is None:
            pool = _stream_pools[device] = CudaStreamPool(device, _STREAMS_PER_GPU)
        return pool.next()


def _server_memory(context, attribute: str, make):
    """The server's ``host_memory`` (pinned pool) or ``device_memory`` (CUDA
    pools) from its context; a default-sized one when this backend runs
    without a Server (embedding, tools)."""
    memory = getattr(context, attribute, None) if context is not None else None
    if memory is not None:
        return memory
    with _engines_lock:
        if attribute not in _fallback_memory:
            _fallback_memory[attribute] = make()
        return _fallback_memory[attribute]


_engines_lock = threading.Lock()
_engines: dict = {}  # (file_identity..., device) -> [runtime, engine, users]


def _acquire_engine(key: tuple, name: str):
    model_path = key[0]
    with _engines_lock:
        entry = _engines.get(key)
        if entry is None:
            with open(model_path, "rb") as f:
                plan = f.read()
            runtime = trt.Runtime(_logger)
            engine = runtime.deserialize_cuda_engine(plan)
            if engine is None:
                raise ServerError(Code.INVALID_ARG,
                                  f"unable to load model '{name}': unable to create TensorRT "
                                  f"engine from {model_path} (built for another TensorRT "
                                  "version or GPU?)")
            entry = _engines[key] = [runtime, engine, 0]
        entry[2] += 1
        return entry[1]


def _release_engine(key: tuple) -> None:
    with _engines_lock:
        entry = _engines.get(key)
        if entry is not None:
            entry[2] -= 1
            if entry[2] <= 0:
                del _engines[key]


class _Profile:
    """An execution context bound to one optimization profile, with that
    profile's [min, opt, max] shape per input."""

    def __init__(self, engine, index: int, label: str, inputs: list, stream: int, name: str):
        self.index = index
        self.label = label
        self.context = engine.create_execution_context()
        if self.context is None:
            raise ServerError(Code.INTERNAL, "unable to create TensorRT execution context")
        if index != 0:
            # The binding raises where the C++ call returns false.
            try:
                chosen = self.context.set_optimization_profile_async(index, stream)
            except RuntimeError:
                chosen = False
            if not chosen:
                raise ServerError(
                    Code.INVALID_ARG,
                    f"Can not set the specified optimization profile {label}[{index}] for "
                    f"{name}. Expected optimization profile index range 0-"
                    f"{engine.num_optimization_profiles - 1}")
        self.ranges = {name: tuple(tuple(d) for d in engine.get_tensor_profile_shape(name, index))
                       for name in inputs}


class TensorRTBackend:
    # Its bindings come from the server's pinned and device memory pools.
    capabilities = Capability.SERVER_CONTEXT

    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int,
                 context=None):
        self.name = config.name
        kind, self.device = instance_placement(config, instance_name)
        if kind != "KIND_GPU":
            raise ServerError(Code.INVALID_ARG, f"unable to load model '{self.name}', TensorRT "
                                                "backend supports only GPU device")
        try:
            count = _cuda.device_count()
        except _cuda.CudaError as err:
            raise ServerError(Code.UNAVAILABLE, f"unable to load model '{self.name}': the "
                                                f"TensorRT backend needs a GPU: {err}") from None
        if self.device >= count:
            raise ServerError(
                Code.UNAVAILABLE,
                f"unable to load model '{self.name}': instance '{instance_name}' is on GPU "
                f"{self.device}, but {count} GPU(s) are visible" +
                (" (none: the TensorRT backend needs an NVIDIA GPU)" if count == 0 else ""))
        _cuda.set_device(self.device)
        # a deserialized engine per plan file as it is now, and GPU
        self._engine_key = (*file_identity(model_path), self.device)
        self.engine = _acquire_engine(self._engine_key, self.name)
        self._thread_device = threading.local()
        try:
            self._setup(config, instance_name, context)
        except BaseException:
            self.close()
            raise

    def _setup(self, config, instance_name: str, context) -> None:
        engine = self.engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        for name in names:
            # Shape tensors (an input whose values, not only its shape, size
            # the others) live in host memory; this backend binds device
            # memory only. Refused here rather than failing every request.
            if engine.get_tensor_location(name) == trt.TensorLocation.HOST:
                raise ServerError(Code.UNSUPPORTED,
                                  f"unable to load model '{self.name}': tensor '{name}' is a "
                                  "shape tensor in host memory, which the TensorRT backend "
                                  "does not support")
            # A vectorized layout (CHW32, HWC8, ...) pads a dimension: the
            # row-major buffers bound here would be read and written wrong.
            io_format = engine.get_tensor_format(name)
            if io_format != trt.TensorFormat.LINEAR:
                raise ServerError(Code.UNSUPPORTED,
                                  f"unable to load model '{self.name}': tensor '{name}' uses IO "
                                  f"format {io_format}; the TensorRT backend binds LINEAR "
                                  "(row-major) tensors only")
        self.types = {}
        for kind, tensors, available in (("input", config.input, self.inputs),
                                         ("output", config.output, self.outputs)):
            for t in tensors:
                if t.name not in available:
                    raise ServerError(
                        Code.INVALID_ARG,
                        f"unable to load model '{self.name}', configuration {kind} '{t.name}' "
                        f"is not an {kind} of the engine (it has {available})")
                model_type = _TRT_TO_CONFIG.get(engine.get_tensor_dtype(t.name))
                expected = data_type_name(t.data_type)
                if model_type != expected:
                    raise ServerError(
                        Code.INVALID_ARG,
                        f"unable to load model '{self.name}', {kind} '{t.name}' datatype is "
                        f"{expected} in model configuration, but the engine has "
                        f"{model_type or engine.get_tensor_dtype(t.name)}")
                self.types[t.name] = expected
        # The sequence batcher's control tensors and implicit states are the
        # engine's tensors too, the server's values cast to the engine's types.
        if config.HasField("sequence_batching"):
            sequence = config.sequence_batching
            for kind, name, available in (
                    [("control input", c.name, self.inputs) for c in sequence.control_input]
                    + [("state input", st.input_name, self.inputs) for st in sequence.state]
                    + [("state output", st.output_name, self.outputs) for st in sequence.state]):
                if name not in available:
                    raise ServerError(
                        Code.INVALID_ARG,
                        f"unable to load model '{self.name}', sequence batching {kind} "
                        f"'{name}' is not a tensor of the engine (it has {available})")
                engine_type = _TRT_TO_CONFIG.get(engine.get_tensor_dtype(name))
                if engine_type is None:
                    raise ServerError(
                        Code.UNSUPPORTED,
                        f"unable to load model '{self.name}': sequence batching {kind} '{name}' "
                        f"has type {engine.get_tensor_dtype(name)}, which this backend does not "
                        "support")
                self.types[name] = engine_type
        missing = [n for n in self.inputs if n not in self.types]
        if missing:
            raise ServerError(Code.INVALID_ARG, f"unable to load model '{self.name}', the engine "
                                                f"needs input(s) {missing} that the "
                                                "configuration does not declare")
        # bytes per element of each output's buffer (an output the config
        # leaves out is still bound, in TensorRT's own type)
        self.itemsize = {}
        for name in self.outputs:
            dtype = _numpy_of(self.types.get(name))
            if dtype is None:
                try:
                    dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
                except TypeError:  # a type numpy lacks (BF16, FP8, INT4, ...)
                    raise ServerError(
                        Code.UNSUPPORTED,
                        f"unable to load model '{self.name}': output '{name}' has type "
                        f"{engine.get_tensor_dtype(name)}; declare it in the configuration "
                        "to have it served") from None
            self.itemsize[name] = np.dtype(dtype).itemsize
        self.requested_outputs = [t.name for t in config.output]
        self.stream = _stream_for(self.device)
        self.host_memory = _server_memory(context, "host_memory", HostMemory)
        # As Triton's backend: the group's profiles, each index once (a
        # repeat reuses the first); none listed, profile 0 alone, "default".
        group = instance_group(config, instance_name)
        labels = {}
        for text in (group.profile if group is not None else ()):
            index = int(text)
            if not 0 <= index < engine.num_optimization_profiles:
                raise ServerError(
                    Code.INVALID_ARG,
                    f"Can not set the specified optimization profile {text}[{index}] for "
                    f"{self.name}. Expected optimization profile index range 0-"
                    f"{engine.num_optimization_profiles - 1}")
            if index in labels:
                log.warning("%s maps to profile index %d which has been mapped by %s, existing "
                            "optimization profile will be reused", text, index, labels[index])
                continue
            labels[index] = text
        if not labels:
            labels[0] = "default"
        self.profiles = [_Profile(engine, i, label, self.inputs, self.stream, self.name)
                         for i, label in labels.items()]
        _cuda.synchronize(self.stream)
        # --cuda-memory-pool-byte-size
        device_pool = _server_memory(context, "device_memory", DeviceMemory).pool(self.device)
        self.device_buffers = {n: _cuda.DeviceBuffer(device_pool) for n in self.inputs + self.outputs}
        self.output_reshape = {t.name: tuple(t.dims) for t in config.output if t.HasField("reshape")}
        self.batching = config.max_batch_size > 0

    def _pick_profile(self, shapes: dict) -> _Profile:
        return self.profiles[pick_profile([(p.label, p.index, p.ranges) for p in self.profiles],
                                          shapes)]

    def execute(self, inputs: dict) -> dict:
        if getattr(self._thread_device, "device", None) != self.device:
            _cuda.set_device(self.device)  # the current device is per host thread
            self._thread_device.device = self.device
        shapes = {name: tuple(int(d) for d in value.shape) for name, value in inputs.items()}
        profile = self._pick_profile(shapes)
        context = profile.context
        stream = self.stream
        staged_inputs = []  # kept alive until the copies are done
        for name, value in inputs.items():
            dtype = _numpy_of(self.types[name])
            staged = self.host_memory.empty(value.shape, dtype)
            np.copyto(staged, value, casting="no" if value.dtype == dtype else "unsafe")
            staged_inputs.append(staged)
            ptr = self.device_buffers[name].reserve(staged.nbytes)
            _cuda.copy_to_device(ptr, staged, stream)
            if not context.set_input_shape(name, shapes[name]):
                raise ServerError(Code.INVALID_ARG, f"TensorRT rejected shape {list(shapes[name])} "
                                                    f"for input '{name}' of model '{self.name}'")
            self._bind(context, name, ptr)
        staged_outputs = {}
        for name in self.outputs:
            shape = tuple(context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise ServerError(Code.UNSUPPORTED,
                                  f"output '{name}' of model '{self.name}' has a data-dependent "
                                  f"shape {list(shape)}, which this backend does not support")
            nbytes = int(np.prod(shape, dtype=np.int64)) * self.itemsize[name]
            ptr = self.device_buffers[name].reserve(nbytes)
            self._bind(context, name, ptr)
            if name in self.types:
                staged_outputs[name] = (self.host_memory.empty(shape, _numpy_of(self.types[name])),
                                        ptr)
        if not context.execute_async_v3(stream):
            raise ServerError(Code.INTERNAL,
                              f"unable to enqueue for inference of model '{self.name}'")
        for staged, ptr in staged_outputs.values():
            _cuda.copy_to_host(staged, ptr, stream)
        _cuda.synchronize(stream)  # waits with the GIL released
        results = {}
        for name, (staged, _) in staged_outputs.items():
            # Returned in its pinned block: the block goes back to the pool
            # when the response no longer refers to it.
            dims = self.output_reshape.get(name)
            if dims is not None:
                staged = staged.reshape(((staged.shape[0],) if self.batching else ()) + dims)
            results[name] = staged
        return results

    def _bind(self, context, name: str, ptr: int) -> None:
        if not context.set_tensor_address(name, ptr):
            raise ServerError(Code.INTERNAL, f"TensorRT refused the device address of tensor "
                                             f"'{name}' of model '{self.name}'")

    def close(self) -> None:
        stream = getattr(self, "stream", None)
        if stream is not None:
            _cuda.synchronize(stream)
            self.stream = None
        self.profiles = []
        for buffer in getattr(self, "device_buffers", {}).values():
            buffer.close()
        if getattr(self, "engine", None) is not None:
            self.engine = None
            _release_engine(self._engine_key)

    @staticmethod
    def auto_complete_config(config, model_path: str, default_max_batch_size: int) -> None:
        """TensorRT runs on GPUs only: instance groups left to KIND_AUTO
        become KIND_GPU (as Triton's core decides on a GPU machine)."""
        prefer_gpu(config, True)
