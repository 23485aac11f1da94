"""PyTorch backend: TorchScript models (`model.pt`) loaded with
torch.jit.load and run under torch.inference_mode(), on the CPU or on the
instance's GPU, as Triton's pytorch backend (platform "pytorch_libtorch")
runs them.

Naming, as Triton decides it from the config and forward()'s schema:
- inputs: names of forward() arguments; else `<name>__<index>` (the index
  is the argument position); else the config's order. A forward() taking one
  Dict[str, Tensor] gets the inputs keyed by their config names.
- outputs: `<name>__<index>` (index into the returned tuple); else the
  config's order. forward() may return a Tensor, a List[str] (a BYTES
  output) or a tuple of those; a dict or a list of tensors is an error.

torch is optional (`pip install pyserver[torch]`): without it this module
fails to import, and a model that needs it fails to load with that reason.
"""

from __future__ import annotations

import logging
import threading
import warnings

import numpy as np

try:
    import torch
except ImportError as err:  # the backend's loader reports this as the reason
    raise ImportError(
        f"the PyTorch backend needs torch, which is not installed ({err}); "
        "install it with: pip install 'pyserver[torch]'") from err

from pyserver.backends._common import (
    bool_param,
    data_type_name,
    file_identity,
    instance_placement,
    int_param,
    prefer_gpu,
    string_param,
)
from pyserver.backends.base import Capability
from pyserver.kernel.errors import Code, ServerError

log = logging.getLogger("pyserver")

# Request tensors are read-only views of the received bytes; the model gets
# them without a copy, and torch's warning about that is noise here.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

# Config types TorchScript tensors carry (Triton's ModelConfigDataTypeToTorchType).
_CONFIG_TO_TORCH = {
    "TYPE_BOOL": torch.bool, "TYPE_UINT8": torch.uint8, "TYPE_INT8": torch.int8,
    "TYPE_INT16": torch.int16, "TYPE_INT32": torch.int32, "TYPE_INT64": torch.int64,
    "TYPE_FP16": torch.float16, "TYPE_FP32": torch.float32, "TYPE_FP64": torch.float64,
}
_TORCH_TO_CONFIG = {v: k for k, v in _CONFIG_TO_TORCH.items()}

_DELIMITER = "__"

# Thread pools are process-wide in torch; the inter-op size can be set once.
_threads_lock = threading.Lock()
_interop_set = False

# ENABLE_WEIGHT_SHARING: (model file, device) -> [loaded module, users].
_shared_modules: dict = {}


def _index_suffix(name: str) -> int | None:
    """The index of a `<name>__<index>` name, or None when it has none."""
    pos = name.find(_DELIMITER)
    if pos < 0:
        return None
    digits = name[pos + 2:]
    return int(digits) if digits.isdigit() else None


def _set_threads(intra: int, inter: int) -> None:
    global _interop_set
    with _threads_lock:
        if intra > 0 and torch.get_num_threads() != intra:
            torch.set_num_threads(intra)
        if inter > 0 and not _interop_set:
            try:
                torch.set_num_interop_threads(inter)
            except RuntimeError as err:  # torch allows this once, before any parallel work
                log.warning("INTER_OP_THREAD_COUNT %d not applied: %s", inter, err)
            _interop_set = True


class PyTorchBackend:
    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int):
        self.name = config.name
        self.instance_name = instance_name
        kind, device_id = instance_placement(config, instance_name)
        if kind == "KIND_GPU":
            if not torch.cuda.is_available():
                raise ServerError(
                    Code.INVALID_ARG,
                    f"unable to load model '{self.name}': instance '{instance_name}' is KIND_GPU "
                    "but torch sees no CUDA device (this torch build or machine has none)")
            if device_id >= torch.cuda.device_count():
                raise ServerError(
                    Code.INVALID_ARG,
                    f"unable to load model '{self.name}': instance '{instance_name}' is on GPU "
                    f"{device_id}, but torch sees {torch.cuda.device_count()} GPU(s)")
            self.device = torch.device("cuda", device_id)
        else:
            self.device = torch.device("cpu")
        # Each GPU instance computes on its own stream, as Triton's do, so
        # instances on one GPU overlap.
        self.stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None
        self.kind = kind
        # A cheap CPU model may run on the event loop (model/inline.py).
        self.capabilities = Capability.RUNS_INLINE if kind == "KIND_CPU" else Capability.NONE

        # Parameters Triton's pytorch backend reads.
        self.inference_mode = bool_param(config, "INFERENCE_MODE", True)
        self.optimized_execution = not bool_param(config, "DISABLE_OPTIMIZED_EXECUTION", False)
        self.cache_cleaning = bool_param(config, "ENABLE_CACHE_CLEANING", False)
        weight_sharing = bool_param(config, "ENABLE_WEIGHT_SHARING", False)
        if string_param(config, "DISABLE_CUDNN") is not None:
            torch.backends.cudnn.enabled = not bool_param(config, "DISABLE_CUDNN", False)
        if string_param(config, "ENABLE_JIT_PROFILING") is not None:
            torch._C._jit_set_profiling_mode(bool_param(config, "ENABLE_JIT_PROFILING", True))
        if string_param(config, "ENABLE_JIT_EXECUTOR") is not None:
            torch._C._jit_set_profiling_executor(bool_param(config, "ENABLE_JIT_EXECUTOR", True))
        if string_param(config, "ENABLE_TENSOR_FUSER") is not None:
            torch._C._jit_set_texpr_fuser_enabled(bool_param(config, "ENABLE_TENSOR_FUSER", True))
        # Instances x intra-op threads should not exceed the cores: the
        # default gives each instance its share; the config can say otherwise.
        self.intra_threads = int_param(config, "INTRA_OP_THREAD_COUNT", 0) or max(1, threads)
        _set_threads(self.intra_threads, int_param(config, "INTER_OP_THREAD_COUNT", 0))

        self.module = self._load(model_path, weight_sharing)
        try:
            self._validate_inputs(config)
            self._validate_outputs(config)
        except BaseException:
            self.close()  # gives back a shared module
            raise
        self._thread_ready = threading.local()

    @staticmethod
    def auto_complete_config(config, model_path: str, default_max_batch_size: int) -> None:
        """TorchScript files do not describe their I/O, so only the
        placement is completed: KIND_AUTO instances use the GPU when torch
        has CUDA and one is present."""
        prefer_gpu(config, torch.cuda.is_available())

    # -- loading -------------------------------------------------------------

    def _load(self, model_path: str, weight_sharing: bool):
        key = (*file_identity(model_path), str(self.device))
        self._shared_key = key if weight_sharing else None
        with _threads_lock:
            if weight_sharing and key in _shared_modules:
                entry = _shared_modules[key]
                entry[1] += 1
                return entry[0]
        try:
            with self._grad_mode():
                map_location = None if self.kind == "KIND_MODEL" else self.device
                module = torch.jit.load(model_path, map_location=map_location)
            module.eval()
        except Exception as err:
            raise ServerError(Code.INTERNAL,
                              f"failed to load model '{self.name}': {err}") from None
        if weight_sharing:
            with _threads_lock:
                entry = _shared_modules.setdefault(key, [module, 0])
                entry[1] += 1
                module = entry[0]
        return module

    def _grad_mode(self):
        return torch.inference_mode() if self.inference_mode else torch.no_grad()

    def _validate_inputs(self, config) -> None:
        try:
            arguments = list(self.module.forward.schema.arguments)
        except (AttributeError, RuntimeError) as err:
            raise ServerError(Code.INTERNAL,
                              f"unable to load model '{self.name}': no TorchScript forward() "
                              f"({err})") from None
        if arguments and arguments[0].type.kind() == "ClassType":
            arguments = arguments[1:]
        self.dict_input = len(arguments) == 1 and arguments[0].type.kind() == "DictType"
        allowed = []
        if not self.dict_input:
            for arg in arguments[1:]:
                if arg.type.kind() == "DictType":
                    raise ServerError(
                        Code.INTERNAL,
                        "Multiple inputs of kind DictType were detected. Only a single input "
                        "of type Dict(str, Tensor) is supported.")
            for arg in arguments:
                if arg.type.kind() not in ("TensorType", "ListType"):
                    raise ServerError(
                        Code.INTERNAL,
                        f"An input of type '{arg.type}' was detected in the model. Only a single "
                        "input of type Dict(str, Tensor) or input(s) of type Tensor are supported.")
                allowed.append(arg.name)
            # batch_input tensors are forward() arguments after the inputs
            expected = len(config.input) + len(config.batch_input)
            if len(arguments) != expected:
                raise ServerError(
                    Code.INVALID_ARG,
                    f"unable to load model '{self.name}', configuration expects "
                    f"{expected} inputs, model provides {len(arguments)}")
        if not config.input:
            raise ServerError(Code.INTERNAL, "model configuration must contain at least one "
                                             "input, none were specified.")
        names = [t.name for t in config.input]
        if self.dict_input:
            convention = "dict"
        elif all(n in allowed for n in names):
            convention = "forward"
        elif all(_index_suffix(n) is not None for n in names):
            convention = "index"
        else:
            convention = "order"
            log.warning("input names of model '%s' are neither forward() arguments nor "
                        "<name>__<index>: using the configuration's order", self.name)
        self.input_index = {}
        self.input_kinds = {}
        self.n_args = len(names) if self.dict_input else len(arguments)
        batching = config.max_batch_size > 0
        # The configured inputs, then the batch inputs the server makes
        # (model/ragged.py), placed as Triton's backend places them: by name,
        # by __<index>, or in order after the configured ones.
        placed = [(t.name, self._tensor_type(t, "input", batching), "input")
                  for t in config.input]
        placed += [(name, data_type_name(bi.data_type), "batch input")
                   for bi in config.batch_input for name in bi.target_name]
        for position, (name, type_name, what) in enumerate(placed):
            if convention == "forward" and name in allowed:
                index = allowed.index(name)
            elif convention == "index" and _index_suffix(name) is not None:
                index = _index_suffix(name)
            else:
                index = position
            if not self.dict_input and not 0 <= index < self.n_args:
                raise ServerError(
                    Code.INVALID_ARG,
                    f"{what} '{name}' of model '{self.name}' refers to argument {index} but "
                    f"forward() takes {self.n_args}")
            self.input_index[name] = index
            self.input_kinds[name] = type_name

    def _tensor_type(self, t, kind: str, batching: bool) -> str:
        """A config tensor's type name, checked as Triton's backend checks it:
        a torch dtype, or strings as a 1-dimensional list."""
        type_name = data_type_name(t.data_type)
        if type_name not in _CONFIG_TO_TORCH and type_name != "TYPE_STRING":
            raise ServerError(Code.INTERNAL, f"unsupported datatype {type_name} for {kind} "
                                             f"'{t.name}' for model '{self.name}'")
        if type_name == "TYPE_STRING":
            dims = t.reshape.shape if t.HasField("reshape") else t.dims
            if len(dims) + (1 if batching else 0) > 1:
                raise ServerError(
                    Code.INTERNAL,
                    f"Triton only supports 1 dimensional List of String as {kind} for "
                    f"'{t.name}' for model '{self.name}'")
        return type_name

    def _validate_outputs(self, config) -> None:
        if not config.output:
            raise ServerError(Code.INTERNAL, "model configuration must contain at least one "
                                             "output, none were specified.")
        names = [t.name for t in config.output]
        by_index = all(_index_suffix(n) is not None for n in names)
        if not by_index:
            log.warning("outputs of model '%s' do not follow the <name>__<index> naming "
                        "convention: using the configuration's order", self.name)
        self.output_index = {}
        self.output_types = {}
        batching = config.max_batch_size > 0
        for position, t in enumerate(config.output):
            type_name = self._tensor_type(t, "output", batching)
            self.output_index[t.name] = _index_suffix(t.name) if by_index else position
            self.output_types[t.name] = type_name
        # Outputs whose config shape differs from what the model produces.
        skip = (-1,) if batching else ()
        self.output_reshape = {t.name: skip + tuple(t.dims) for t in config.output
                               if t.HasField("reshape")}

    # -- execution (instance thread) -----------------------------------------

    def _to_model(self, name: str, value: np.ndarray):
        if self.input_kinds[name] == "TYPE_STRING":
            return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                    for v in value.reshape(-1)]
        if not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        if value.size == 0:
            tensor = torch.zeros(value.shape, dtype=_CONFIG_TO_TORCH[self.input_kinds[name]])
        else:
            tensor = torch.from_numpy(value)  # shares the request's memory
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                tensor = tensor.to(self.device)
        return tensor

    def _run(self, inputs: dict):
        if self.dict_input:
            args = [{name: self._to_model(name, value) for name, value in inputs.items()}]
        else:
            args = [None] * self.n_args
            for name, value in inputs.items():
                args[self.input_index[name]] = self._to_model(name, value)
            missing = [i for i, a in enumerate(args) if a is None]
            if missing:
                raise ServerError(Code.INVALID_ARG,
                                  f"model '{self.name}' needs an input for forward() argument "
                                  f"{missing[0]}, and the request has none")
        with self._grad_mode(), torch.jit.optimized_execution(self.optimized_execution):
            # The TorchScript interpreter runs without the GIL.
            if self.stream is None:
                return self.module(*args)
            with torch.cuda.stream(self.stream):
                return self.module(*args)

    def execute(self, inputs: dict) -> dict:
        if not getattr(self._thread_ready, "done", False):
            # torch's intra-op count is read per thread on first use.
            torch.set_num_threads(self.intra_threads)
            self._thread_ready.done = True
        try:
            result = self._run(inputs)
            outputs = self._flatten(result)
        except ServerError:
            raise
        except Exception as err:
            raise ServerError(Code.INTERNAL, f"PyTorch execute failure: {err}") from None
        produced = {}
        for name, index in self.output_index.items():
            if index < 0 or index >= len(outputs):
                raise ServerError(
                    Code.INVALID_ARG,
                    f"The output {name} in the model configuration refers to an output index "
                    f"which doesn't exist. This model has {len(outputs)} outputs")
            produced[name] = self._from_model(name, outputs[index])
        if self.cache_cleaning and self.device.type == "cuda":
            torch.cuda.empty_cache()
        return produced

    @staticmethod
    def _flatten(result) -> list:
        if isinstance(result, torch.Tensor):
            return [result]
        if isinstance(result, tuple):
            for index, item in enumerate(result):
                if isinstance(item, list) and not all(isinstance(v, str) for v in item):
                    kind = type(item[0]).__name__ if item else "?"
                    raise ValueError(f"output at index {index} must be of type Tensor or "
                                     f"List[str], received List[{kind}]")
                if not isinstance(item, (torch.Tensor, list)):
                    raise ValueError(f"output at index {index} must be of type Tensor or "
                                     f"List[str], received {type(item).__name__}")
            return list(result)
        if isinstance(result, list):
            if not all(isinstance(v, str) for v in result):
                kind = "Tensor" if result and isinstance(result[0], torch.Tensor) else \
                    (type(result[0]).__name__ if result else "?")
                raise ValueError(f"output must be of type Tensor or List[str], received "
                                 f"List[{kind}]")
            return [result]
        raise ValueError("output must be of type Tensor, List[str] or Tuple containing one of "
                         "these two types. It should not be a List / Dictionary of Tensors or "
                         "a Scalar")

    def _from_model(self, name: str, value) -> np.ndarray:
        if isinstance(value, list):
            out = np.empty(len(value), dtype=np.object_)
            out[:] = [s.encode("utf-8") for s in value]
            return out
        config_type = self.output_types[name]
        actual = _TORCH_TO_CONFIG.get(value.dtype)
        if actual != config_type:
            raise ServerError(
                Code.INVALID_ARG,
                f"configuration expects datatype {config_type} for output '{name}', model "
                f"provides {actual or 'TYPE_INVALID'}")
        if value.dim() == 0:
            raise ServerError(Code.INVALID_ARG,
                              f"output '{name}' is a scalar which is not supported.")
        if value.device.type == "cuda":
            with torch.cuda.stream(self.stream or torch.cuda.current_stream(value.device)):
                value = value.to("cpu")  # waits for the stream's work
        array = value.detach().contiguous().numpy()
        shape = self.output_reshape.get(name)
        if shape is not None:
            array = array.reshape((array.shape[0],) + shape[1:] if shape[:1] == (-1,) else shape)
        return array

    def close(self) -> None:
        self.module = None
        key, self._shared_key = getattr(self, "_shared_key", None), None
        if key is not None:
            with _threads_lock:
                entry = _shared_modules.get(key)
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:  # the last instance: a reload reads the file again
                        del _shared_modules[key]
