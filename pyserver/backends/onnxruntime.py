"""ONNX Runtime backend, configured as Triton's onnxruntime backend reads a
model config:

- session options from `parameters` (intra_op_thread_count,
  inter_op_thread_count, execution_mode, enable_mem_arena,
  enable_mem_pattern, session.use_device_allocator_for_initializers and
  any other "session.*" config entry, memory.enable_memory_arena_shrinkage)
  and `optimization.graph.level`; intra-op threads default to the
  instance's share of the cores, and do not spin between ops;
- execution providers: CPU everywhere; on a KIND_GPU instance (as in
  Triton, the only kind that reads
  `optimization.execution_accelerators.gpu_execution_accelerator`),
  CUDA (with "cuda" accelerator parameters and the deprecated top-level
  cudnn_conv_algo_search / gpu_mem_limit / arena_extend_strategy /
  do_copy_in_default_stream), and TensorRT in front of it for a "tensorrt"
  accelerator (precision_mode, max_workspace_size_bytes, trt_* keys). These
  need onnxruntime-gpu; without it such a model fails to load and says so;
- every datatype ORT has, BF16 included (numpy has no bfloat16: it travels
  as uint16 words through OrtValues), BYTES as string tensors, optional
  inputs (graph inputs with an initializer), output `reshape`.
"""

from __future__ import annotations

import ctypes
import functools
import logging

import numpy as np
import onnxruntime as ort

from pyserver.backends import _cuda
from pyserver.backends._common import (
    data_type_name,
    instance_placement,
    parse_bool,
    parse_int,
    prefer_gpu,
    string_param,
)
from pyserver.backends.base import Capability
from pyserver.engine.batch_execution import NamedRun
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")

# ONNX Runtime type strings -> config data types.
_ORT_TO_CONFIG = {
    "tensor(bool)": "TYPE_BOOL", "tensor(uint8)": "TYPE_UINT8", "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32", "tensor(uint64)": "TYPE_UINT64", "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16", "tensor(int32)": "TYPE_INT32", "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16", "tensor(float)": "TYPE_FP32", "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING", "tensor(bfloat16)": "TYPE_BF16",
}
_BF16 = "tensor(bfloat16)"
_ONNX_BFLOAT16 = 16  # TensorProto.BFLOAT16

_TRT_EP = "TensorrtExecutionProvider"
_CUDA_EP = "CUDAExecutionProvider"
_CPU_EP = "CPUExecutionProvider"

# "tensorrt" accelerator parameters (Triton's key -> (TensorRT EP option, kind)).
_TRT_PARAMS = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", "uint"),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", "int"),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", "int"),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", "str"),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", "bool"),
    "trt_dla_enable": ("trt_dla_enable", "bool"),
    "trt_dla_core": ("trt_dla_core", "int"),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", "bool"),
    "trt_engine_cache_path": ("trt_engine_cache_path", "str"),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", "str"),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", "bool"),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", "bool"),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", "bool"),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", "bool"),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", "bool"),
    "trt_timing_cache_path": ("trt_timing_cache_path", "str"),
    "trt_force_timing_cache": ("trt_force_timing_cache", "bool"),
    "trt_detailed_build_log": ("trt_detailed_build_log", "bool"),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", "bool"),
    "trt_sparsity_enable": ("trt_sparsity_enable", "bool"),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", "int"),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", "int"),
    "trt_tactic_sources": ("trt_tactic_sources", "str"),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", "str"),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", "str"),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", "str"),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", "str"),
    "trt_cuda_graph_enable": ("trt_cuda_graph_enable", "bool"),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", "bool"),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", "str"),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", "int"),
}
_PRECISION_FLAGS = {"FP16": "trt_fp16_enable", "BF16": "trt_bf16_enable",
                    "INT8": "trt_int8_enable", "FP32": None}


# inference.ModelSequenceBatching.Control.Kind: START, READY, END, CORRID,
# each one tensor the sequence batcher feeds
_SEQUENCE_CONTROL_KINDS = frozenset((0, 1, 2, 3))


def _check_input_count(config, graph_inputs: int) -> None:
    """Triton's load-time count of the model's inputs (graph inputs, not
    initializers) against what the config feeds: its inputs less the
    optional ones (initializers a request may override), its batch inputs,
    the sequence batcher's control tensors and implicit states. A config that
    leaves inputs out (strict model config, no auto-complete) fails here
    with Triton's text, as it does in Triton."""
    expected = sum(1 for t in config.input if not t.optional) + len(config.batch_input)
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        expected += len({c.kind for tensor in sequence.control_input for c in tensor.control}
                        & _SEQUENCE_CONTROL_KINDS)
        expected += len(sequence.state)
    if graph_inputs != expected:
        raise ServerError(Code.INVALID_ARG,
                          f"unable to load model '{config.name}', configuration expects "
                          f"{expected} inputs, model provides {graph_inputs}")


def _check_value(value: str, kind: str) -> None:
    if kind == "bool":
        parse_bool(value)
    elif kind in ("int", "uint"):
        number = parse_int(value)
        if kind == "uint" and number < 0:
            raise ServerError(Code.INVALID_ARG,
                              f"failed to convert '{value}' to unsigned integral number")


def _accelerators(config, which: str) -> list:
    if not config.HasField("optimization"):
        return []
    return list(getattr(config.optimization.execution_accelerators, which))


def _tensorrt_options(accelerator, device_id: int) -> dict:
    options = {}
    for key, value in accelerator.parameters.items():
        if key == "precision_mode":
            if value not in _PRECISION_FLAGS:
                raise ServerError(Code.INVALID_ARG,
                                  f"unsupported precision mode '{value}' is requested")
            if _PRECISION_FLAGS[value]:
                options[_PRECISION_FLAGS[value]] = "1"
            continue
        if key not in _TRT_PARAMS:
            raise ServerError(Code.INVALID_ARG, f"unknown parameter '{key}' is provided for "
                                                "TensorRT Execution Accelerator")
        option, kind = _TRT_PARAMS[key]
        _check_value(value, kind)
        if value:
            options[option] = value
    options["device_id"] = str(device_id)
    return options


def _cuda_options(config, cuda_params: dict, device_id: int) -> dict:
    options = dict(cuda_params)
    options["device_id"] = str(device_id)
    if config.parameters:
        # Deprecated top-level keys, still honoured by Triton.
        algo = string_param(config, "cudnn_conv_algo_search")
        names = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
        if algo is not None and parse_int(algo) not in names:
            raise ServerError(Code.INVALID_ARG,
                              f"unsupported cudnn_conv_algo_search value '{parse_int(algo)}' "
                              "is requested")
        options["cudnn_conv_algo_search"] = names[parse_int(algo)] if algo is not None \
            else "EXHAUSTIVE"
        limit = string_param(config, "gpu_mem_limit")
        options["gpu_mem_limit"] = limit if limit is not None else str(2 ** 64 - 1)
        strategy = string_param(config, "arena_extend_strategy")
        strategies = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}
        if strategy is not None and parse_int(strategy) not in strategies:
            raise ServerError(Code.INVALID_ARG,
                              f"unsupported arena_extend_strategy value '{parse_int(strategy)}' "
                              "is requested")
        options["arena_extend_strategy"] = strategies[parse_int(strategy)] \
            if strategy is not None else "kNextPowerOfTwo"
        copy = string_param(config, "do_copy_in_default_stream")
        options["do_copy_in_default_stream"] = copy if copy is not None else "1"
    return options


def execution_providers(config, kind: str, device_id: int, available) -> list:
    """The providers (name, options) a session of this instance gets, in
    ONNX Runtime's priority order, from the config as Triton's onnxruntime
    backend reads it. ``available`` is what this onnxruntime build offers
    (ort.get_available_providers()); a provider the config needs and the
    build lacks is a load error that says what to install. As in Triton, only
    a GPU instance reads ``gpu_execution_accelerator``: a KIND_CPU instance
    of a config that lists one runs on the CPU."""
    providers = []
    if kind == "KIND_GPU":
        gpu_accelerators = _accelerators(config, "gpu_execution_accelerator")
        trt_options = None
        cuda_params: dict = {}
        for accelerator in gpu_accelerators:
            if accelerator.name == "tensorrt":
                trt_options = _tensorrt_options(accelerator, device_id)
            elif accelerator.name == "cuda":
                for key, value in accelerator.parameters.items():
                    if key in ("do_copy_in_default_stream", "use_ep_level_unified_stream"):
                        parse_bool(value)
                    if value:
                        cuda_params[key] = value
            else:
                raise ServerError(Code.INVALID_ARG, f"unknown Execution Accelerator "
                                                    f"'{accelerator.name}' is requested")
        wanted = ([_TRT_EP] if trt_options is not None else []) + [_CUDA_EP]
        missing = [p for p in wanted if p not in available]
        if missing:
            raise ServerError(
                Code.UNAVAILABLE,
                f"unable to load model '{config.name}': it runs on GPU (KIND_GPU instance) "
                f"and needs {', '.join(missing)}, which this onnxruntime does not offer "
                f"(available: {', '.join(available)}); install onnxruntime-gpu in place of "
                "onnxruntime")
        if trt_options is not None:
            providers.append((_TRT_EP, trt_options))
        providers.append((_CUDA_EP, _cuda_options(config, cuda_params, device_id)))
    for accelerator in _accelerators(config, "cpu_execution_accelerator"):
        if accelerator.name == "openvino" and "OpenVINOExecutionProvider" in available:
            providers.append(("OpenVINOExecutionProvider", {"device_type": "CPU"}))
        else:
            raise ServerError(Code.INVALID_ARG, f"unknown Execution Accelerator "
                                                f"'{accelerator.name}' is requested")
    providers.append((_CPU_EP, {}))
    return providers


def check_providers(config, requested: list, created: list) -> None:
    """ONNX Runtime drops an execution provider it cannot create (CUDA or
    cuDNN libraries not found, a TensorRT runtime missing) with a warning
    and runs on the ones left: a model asked to run on GPU would then run
    on the CPU unnoticed. That is a load error here, as the provider's
    failure is in Triton's onnxruntime backend. ``requested``: what
    execution_providers() gave; ``created``: the session's get_providers()."""
    dropped = [name for name, _ in requested if name not in created]
    if dropped:
        raise ServerError(
            Code.UNAVAILABLE,
            f"unable to load model '{config.name}': onnxruntime could not create "
            f"{', '.join(dropped)} (the session has {', '.join(created)}); check that the CUDA, "
            "cuDNN and TensorRT libraries onnxruntime-gpu needs can be found")


def session_options(config, threads: int):
    """SessionOptions and RunOptions from the config; `threads` is this
    instance's share of the cores (the default intra-op count, so that N
    instances do not oversubscribe them)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors; load failures are reported by us
    run_options = ort.RunOptions()
    level = config.optimization.graph.level if config.HasField("optimization") else 0
    options.graph_optimization_level = {
        -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    mode = string_param(config, "execution_mode")
    mode = parse_int(mode) if mode is not None else 0
    if mode not in (0, 1):
        raise ServerError(Code.INVALID_ARG,
                          "Invalid configuration value provided. Expected values for  "
                          f"execution_mode are 0 or 1 but got {mode} .")
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if mode == 1 \
        else ort.ExecutionMode.ORT_SEQUENTIAL
    intra = string_param(config, "intra_op_thread_count")
    intra = parse_int(intra) if intra is not None else max(1, threads)
    if intra > 0:  # 0: ONNX Runtime's own default (one per core)
        options.intra_op_num_threads = intra
    inter = string_param(config, "inter_op_thread_count")
    inter = parse_int(inter) if inter is not None else (1 if mode == 0 else 0)
    if inter > 0:
        options.inter_op_num_threads = inter
    # Session config entries ("session.*" keys, as ONNX Runtime names them;
    # Triton passes session.use_device_allocator_for_initializers). Ours by
    # default: intra-op workers sleep instead of spinning between ops, so a
    # multi-threaded session leaves the cores to the event loop and the
    # other instances between batches (bench/backend_overhead.py).
    entries = {"session.intra_op.allow_spinning": "0"}
    entries.update({k: v.string_value for k, v in config.parameters.items()
                    if k.startswith("session.")})
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    arena = string_param(config, "enable_mem_arena")
    if arena is not None:
        options.enable_cpu_mem_arena = parse_bool(arena)
    pattern = string_param(config, "enable_mem_pattern")
    if pattern is not None:
        options.enable_mem_pattern = parse_bool(pattern)
    shrinkage = string_param(config, "memory.enable_memory_arena_shrinkage")
    if shrinkage is not None:
        run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", shrinkage)
    return options, run_options


@functools.cache
def _preload_cuda_libraries() -> None:
    """onnxruntime-gpu's CUDA provider does not by itself find the CUDA and
    cuDNN libraries that NVIDIA's pip packages install (its docs:
    "Compatibility with PyTorch and Preload DLLs"); ``preload_dlls`` (1.21
    and later) loads them, from torch's where torch has them. A build
    without it, or libraries it cannot find, leave the provider to the
    system's search path, and check_providers then says what failed."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        try:
            preload()
        except Exception as err:  # never fatal: the session load reports what is missing
            log.warning("onnxruntime.preload_dlls() failed: %s", err)


def _ortvalue_to_uint16(value) -> np.ndarray:
    """A bfloat16 OrtValue (host memory) as a uint16 array, copied."""
    shape = tuple(value.shape())
    count = int(np.prod(shape, dtype=np.int64))
    out = np.empty(shape, dtype=np.uint16)
    if count:
        ctypes.memmove(out.ctypes.data, value.data_ptr(), count * 2)
    return out


class OnnxRuntimeBackend:
    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int):
        self.name = config.name
        self.instance_name = instance_name
        kind, device_id = instance_placement(config, instance_name)
        options, self.run_options = session_options(config, threads)
        providers = execution_providers(config, kind, device_id, ort.get_available_providers())
        if any(name == _CUDA_EP for name, _ in providers):
            _preload_cuda_libraries()
        try:
            self.session = ort.InferenceSession(model_path, options, providers=providers)
        except Exception as err:
            raise ServerError(Code.INVALID_ARG,
                              f"onnxruntime could not load '{model_path}': {err}") from None
        self.providers = self.session.get_providers()
        check_providers(config, providers, self.providers)
        # A cheap CPU model may run on the event loop (model/inline.py).
        cpu_only = self.providers == ["CPUExecutionProvider"]
        self.capabilities = Capability.RUNS_INLINE if cpu_only else Capability.NONE
        # The pybind session's own run, for a CPU-only session: the Python
        # wrapper's checks (feed names, graph capture, provider fallback)
        # cost ~4 µs a call, and the server has checked the feed already. A
        # failure runs again through the wrapper, so errors read as its own.
        native = getattr(self.session, "_sess", None)
        self._native_run = native.run if cpu_only and hasattr(native, "run") else None
        outputs = self.session.get_outputs()
        # Graph inputs with an initializer may be fed or left out (optional).
        inputs = self.session.get_inputs() + self.session.get_overridable_initializers()
        self.output_names = [o.name for o in outputs]
        self.input_names = {i.name for i in inputs}
        _check_input_count(config, len(self.session.get_inputs()))
        declared = {t.name for t in config.output}
        missing = declared - set(self.output_names)
        if missing:
            raise ServerError(
                Code.INVALID_ARG,
                f"model '{config.name}' config declares output(s) {sorted(missing)} that "
                f"{model_path} does not produce (it has {self.output_names})")
        unknown = {t.name for t in config.input} - self.input_names
        if unknown:
            raise ServerError(
                Code.INVALID_ARG,
                f"model '{config.name}' config declares input(s) {sorted(unknown)} that "
                f"{model_path} does not take (it has {sorted(self.input_names)})")
        for kind, declared_io, model_io in (("input", config.input, inputs),
                                            ("output", config.output, outputs)):
            by_name = {t.name: t for t in declared_io}
            for i in model_io:
                t = by_name.get(i.name)
                if t is None:
                    continue
                provided = _ORT_TO_CONFIG.get(i.type)
                if provided != data_type_name(t.data_type):
                    raise ServerError(
                        Code.INVALID_ARG,
                        f"unable to load model '{config.name}', configuration expects datatype "
                        f"{data_type_name(t.data_type)} for {kind} '{i.name}', model provides "
                        f"{provided or i.type}")
        self.string_inputs = {i.name for i in inputs if i.type == "tensor(string)"}
        self.bf16_inputs = {i.name for i in inputs if i.type == _BF16}
        self.bf16_outputs = {o.name for o in outputs if o.type == _BF16}
        self.string_outputs = {o.name for o in outputs if o.type == "tensor(string)"}
        if self.string_inputs and self.bf16_outputs:
            raise ServerError(
                Code.UNSUPPORTED,
                f"unable to load model '{config.name}': onnxruntime's Python API cannot take "
                "string inputs and return bfloat16 outputs in one run")
        batching = config.max_batch_size > 0
        self.output_reshape = {t.name: tuple(t.dims) for t in config.output
                               if t.HasField("reshape")}
        self.batching = batching
        # numeric tensors in and out, none reshaped: the inputs are the feed
        self._plain = not (self.string_inputs or self.bf16_inputs or self.bf16_outputs
                           or self.string_outputs or self.output_reshape)
        if self._plain and self._native_run is not None:
            # execute() below, compiled: no Python frame per batch
            self.execute = NamedRun(self._native_run, self.output_names, self.run_options,
                                    self.session.run)

    @staticmethod
    def auto_complete_config(config, model_path: str, default_max_batch_size: int) -> None:
        """Fills inputs, outputs, max_batch_size and dynamic batching from the
        model file, as Triton's onnxruntime backend does: a model whose every
        input and output has a variable first dimension can batch, and gets
        max_batch_size = default_max_batch_size (with dynamic batching when
        that is > 1 and no scheduler is configured)."""
        try:
            session = ort.InferenceSession(model_path, providers=[_CPU_EP])
        except Exception as err:
            raise ServerError(Code.INVALID_ARG,
                              f"onnxruntime could not load '{model_path}': {err}") from None
        ins, outs = session.get_inputs(), session.get_outputs()

        def variable_first(t):
            return bool(t.shape) and not (isinstance(t.shape[0], int) and t.shape[0] > 0)

        can_batch = all(variable_first(t) for t in ins + outs)
        if config.max_batch_size == 0 and can_batch and not config.input and not config.output:
            config.max_batch_size = max(0, default_max_batch_size)
            if (config.max_batch_size > 1 and not config.HasField("dynamic_batching")
                    and not config.HasField("sequence_batching")):
                config.dynamic_batching.SetInParent()
        skip = 1 if config.max_batch_size > 0 else 0
        from pyserver._proto import enum_descriptor
        data_types = enum_descriptor("inference.DataType").values_by_name

        def fill(target, tensors, kind):
            for t in tensors:
                if t.type not in _ORT_TO_CONFIG:
                    raise ServerError(Code.UNSUPPORTED,
                                      f"model '{config.name}': {kind} '{t.name}' has type {t.type}, "
                                      "which this backend does not support")
                entry = target.add()
                entry.name = t.name
                entry.data_type = data_types[_ORT_TO_CONFIG[t.type]].number
                dims = [d if isinstance(d, int) and d > 0 else -1 for d in t.shape[skip:]]
                entry.dims.extend(dims)

        if not config.input:
            fill(config.input, ins, "input")
        if not config.output:
            fill(config.output, outs, "output")
        if not config.platform and not config.backend:
            config.backend = "onnxruntime"
        prefer_gpu(config, _CUDA_EP in ort.get_available_providers() and _cuda.visible_gpus() > 0)

    def execute(self, inputs: dict) -> dict:
        if self._plain:
            return dict(zip(self.output_names, self._run(inputs)))
        feed = {}
        for name, value in inputs.items():
            if name in self.string_inputs:
                # ORT takes string tensors as str objects.
                value = np.array([v.decode("utf-8") if isinstance(v, bytes) else v
                                  for v in value.reshape(-1)], dtype=object).reshape(value.shape)
            feed[name] = value
        # InferenceSession.run releases the GIL while the graph executes.
        if self.bf16_outputs:
            results = self._run_bf16(feed)
        else:
            for name in self.bf16_inputs:
                feed[name] = self._bf16_value(feed[name])
            results = self._run(feed)
        outputs = dict(zip(self.output_names, results))
        for name in self.string_outputs:
            value = outputs[name]
            encoded = np.empty(value.shape, dtype=np.object_)
            encoded.reshape(-1)[:] = [v.encode("utf-8") if isinstance(v, str) else v
                                      for v in value.reshape(-1)]
            outputs[name] = encoded
        for name, dims in self.output_reshape.items():
            value = outputs[name]
            outputs[name] = value.reshape(((value.shape[0],) if self.batching else ()) + dims)
        return outputs

    def _run(self, feed: dict) -> list:
        native = self._native_run
        if native is not None:
            try:
                return native(self.output_names, feed, self.run_options)
            except Exception:
                pass  # the wrapper's own error (or its provider fallback) below
        return self.session.run(self.output_names, feed, self.run_options)

    @staticmethod
    def _bf16_value(value: np.ndarray):
        """bfloat16 has no numpy dtype: such an input goes in as an OrtValue
        over its uint16 words (no copy when already contiguous)."""
        value = np.ascontiguousarray(value, dtype=np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(value, _ONNX_BFLOAT16)

    def _run_bf16(self, feed: dict) -> list:
        """A model with bfloat16 outputs runs on OrtValues throughout; those
        outputs come back as uint16 copies."""
        values = {}
        for name, value in feed.items():
            if name in self.bf16_inputs:
                values[name] = self._bf16_value(value)
            else:
                values[name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))
        results = self.session.run_with_ort_values(self.output_names, values, self.run_options)
        return [_ortvalue_to_uint16(r) if name in self.bf16_outputs else r.numpy()
                for name, r in zip(self.output_names, results)]
