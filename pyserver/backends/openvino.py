"""OpenVINO backend, configured as Triton's openvino backend reads a model
config:

- the model is an IR pair (model.xml beside model.bin, the default file) or
  any file OpenVINO reads itself (model.onnx through
  `default_model_filename`);
- `parameters`: NUM_STREAMS (AUTO, NUMA or a count), PERFORMANCE_HINT
  (LATENCY, THROUGHPUT, CUMULATIVE_THROUGHPUT), INFERENCE_NUM_THREADS,
  COMPILATION_NUM_THREADS, HINT_BF16 (YES), CPU_EXTENSION_PATH,
  SKIP_OV_DYNAMIC_BATCHSIZE, RESHAPE_IO_LAYERS, TARGET_DEVICE (CPU by
  default); and, ours, COMPILED_MODEL_CACHE (a folder where OpenVINO keeps
  compiled blobs, its CACHE_DIR, so a restart skips compilation) and
  ENABLE_CPU_PINNING (YES/NO; OpenVINO's default when absent). Bad values
  are load errors worded as Triton's;
- with max_batch_size > 0 the first dimension of every input becomes
  dynamic (unless SKIP_OV_DYNAMIC_BATCHSIZE), so any batch up to the
  maximum runs; other dynamic dimensions stay dynamic (OpenVINO's CPU
  plugin runs them as given);
- every element type OpenVINO and the config both have (not BF16, which
  numpy lacks, nor strings);
- one compiled model per model version, shared by its instances as
  Triton's backend shares it (one copy of the weights), each instance with
  its own infer request; infer releases the GIL. Unlike Triton, where an
  unset NUM_STREAMS leaves OpenVINO's single latency stream (and the
  instances take turns on it), the model gets a stream per instance unless
  the config sets NUM_STREAMS or PERFORMANCE_HINT (see device_properties).
"""

from __future__ import annotations

import threading
from pathlib import Path

try:
    import openvino as ov
except ImportError as err:  # the backend's loader reports this as the reason
    raise ImportError(
        f"the OpenVINO backend needs openvino, which is not installed ({err}); "
        "install it with: pip install 'pyserver[openvino]'") from err

from pyserver.backends._common import data_type_name, string_param
from pyserver.backends.base import Capability
from pyserver.config import active_instance_count
from pyserver.kernel.errors import Code, ServerError

# OpenVINO element type names -> config data types.
_OV_TO_CONFIG = {
    "boolean": "TYPE_BOOL", "u8": "TYPE_UINT8", "u16": "TYPE_UINT16", "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64", "i8": "TYPE_INT8", "i16": "TYPE_INT16", "i32": "TYPE_INT32",
    "i64": "TYPE_INT64", "f16": "TYPE_FP16", "f32": "TYPE_FP32", "f64": "TYPE_FP64",
}
_DEVICE_PARAMS = ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS", "HINT_BF16",
                  "NUM_STREAMS", "PERFORMANCE_HINT")
_HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT",
          "cumulative_throughput": "CUMULATIVE_THROUGHPUT"}


def _type_name(port) -> str:
    return port.get_element_type().get_type_name()


def _yes(config, key: str) -> bool:
    value = string_param(config, key)
    return value is not None and value.strip().lower() == "yes"


def device_properties(config, threads: int, instances: int = 1) -> dict:
    """The properties the model compiles with, from the config's
    parameters as Triton's openvino backend parses them. ``threads`` is an
    instance's share of the cores and ``instances`` how many share the
    compiled model: INFERENCE_NUM_THREADS defaults to their shares together
    (Triton's default is every core, whatever else the server runs), and
    NUM_STREAMS to one stream per instance unless the config sets it or a
    PERFORMANCE_HINT, so that the instances run side by side, each stream
    on cores of its own. bench/openvino_instances.py (2 instances, 2
    cores, MLP batches of 8): 34.4k infer/s, against 33.5k for a compiled
    model per instance with only the first pinned and 17.2k with each
    pinned by OpenVINO (its pinning puts every compiled model on the same
    first cores)."""
    instances = max(1, instances)
    properties = {"INFERENCE_NUM_THREADS": max(1, threads) * instances}
    for key in _DEVICE_PARAMS:
        raw = string_param(config, key)
        if raw is None or raw == "":
            continue
        value = raw.strip().lower()
        if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if not value.isdigit():
                raise ServerError(Code.INVALID_ARG, f"expected the parameter '{key}' to be a "
                                                    f"non-negative number, got {value}")
            properties[key] = int(value)
        elif key == "HINT_BF16":
            if value != "yes":
                raise ServerError(Code.INVALID_ARG,
                                  f"expected the parameter '{key}' to be YES, got {value}")
            properties["INFERENCE_PRECISION_HINT"] = "bf16"
        elif key == "NUM_STREAMS":
            if value in ("auto", "numa"):
                properties[key] = value.upper()
            elif value.isdigit():
                properties[key] = int(value)
            else:
                raise ServerError(Code.INVALID_ARG, f"expected the parameter '{key}' to be "
                                                    f"either AUTO/NUMA/<int_value>, got {value}")
        else:  # PERFORMANCE_HINT
            if value not in _HINTS:
                raise ServerError(Code.INVALID_ARG, f"expected the parameter '{key}' to be "
                                                    "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, "
                                                    f"got {value}")
            properties[key] = _HINTS[value]
    if properties["INFERENCE_NUM_THREADS"] == 0:  # 0: OpenVINO's own default
        del properties["INFERENCE_NUM_THREADS"]
    pinning = string_param(config, "ENABLE_CPU_PINNING")
    if pinning:  # ours: OpenVINO's CPU pinning (its default: pinned)
        # Pinned, OpenVINO runs the graph on a stream thread of its own;
        # unpinned, on the instance's thread (that thread's CPU/wall 0.47 vs
        # 0.99, one inference thread). bench/backend_overhead.py --backend
        # openvino [--cpu-pinning], 2 busy cores, two A/B pairs: median ratio
        # 0.788/0.748 unpinned vs 0.833/0.769 pinned, within the noise, so
        # OpenVINO's default stays.
        value = pinning.strip().lower()
        if value not in ("yes", "no"):
            raise ServerError(Code.INVALID_ARG, "expected the parameter 'ENABLE_CPU_PINNING' to "
                                                f"be YES or NO, got {value}")
        properties["ENABLE_CPU_PINNING"] = value == "yes"
    cache = string_param(config, "COMPILED_MODEL_CACHE")
    if cache:
        properties["CACHE_DIR"] = cache
    if instances > 1 and "NUM_STREAMS" not in properties \
            and "PERFORMANCE_HINT" not in properties:
        properties["NUM_STREAMS"] = instances
    return properties


class _SharedModels:
    """The compiled models the instances of a model version share: one per
    model file (as it is on disk) and config, compiled by the first
    instance that needs it and dropped with the last one's close."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries: dict = {}  # key -> _Shared

    def acquire(self, key, build):
        """The entry for ``key``, its ``value`` made by ``build()`` now if
        no one made it yet; every acquire is matched by a release(key, entry)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Shared()
            entry.users += 1
        try:
            with entry.building:  # one compiles; the others wait for it
                if entry.value is None:
                    entry.value = build()
        except BaseException:
            self.release(key, entry)
            raise
        return entry

    def release(self, key, entry) -> None:
        with self._lock:
            entry.users -= 1
            if entry.users == 0 and self._entries.get(key) is entry:
                del self._entries[key]


class _Shared:
    __slots__ = ("users", "building", "value")

    def __init__(self):
        self.users = 0
        self.building = threading.Lock()
        self.value = None


_SHARED = _SharedModels()


def _core(config) -> ov.Core:
    core = ov.Core()
    extension = string_param(config, "CPU_EXTENSION_PATH")
    if extension:
        try:
            core.add_extension(extension)
        except Exception as err:
            raise ServerError(Code.INVALID_ARG, f"openvino error in loading custom CPU "
                                                f"extensions: {err}") from None
    return core


def _read(core: ov.Core, model_path: str):
    try:
        return core.read_model(model_path)
    except Exception as err:
        raise ServerError(Code.INVALID_ARG,
                          f"openvino could not read '{model_path}': {err}") from None


def _partial_dims(port) -> list:
    return [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]


def _shape_text(dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _dim_fits(dim, wanted: int) -> bool:
    """Whether a config dimension fits the model's: a static one exactly,
    a dynamic one within its bounds (-1 fits any)."""
    if dim.is_static:
        return dim.get_length() == wanted
    if wanted == -1:
        return True
    return dim.get_min_length() <= wanted and (dim.get_max_length() < 0
                                               or wanted <= dim.get_max_length())


def _check_dims(config, name: str, port, dims: list) -> None:
    """Triton's rule (its openvino backend's CompareDimsSupported): the
    config's dims, after a batch dimension when max_batch_size > 0, match
    the model's tensor in rank and in every dimension the config fixes."""
    shape = port.get_partial_shape()
    model_dims = _partial_dims(port)
    where = f"model '{config.name}', tensor '{name}'"
    if config.max_batch_size > 0:
        if shape.rank.get_length() == 0:
            raise ServerError(Code.INVALID_ARG, f"{where}: for the model to support batching "
                                                "the shape should have at least 1 dimension")
        full = [config.max_batch_size] + dims
        fits = len(shape) == len(full) and all(
            _dim_fits(shape[i], full[i]) for i in range(1, len(full)))
        if not fits:
            raise ServerError(
                Code.INVALID_ARG,
                f"{where}: the model expects {len(shape)} dimensions (shape "
                f"{_shape_text(model_dims)}) but the model configuration specifies {len(full)} "
                "dimensions (an initial batch dimension because max_batch_size > 0 followed by "
                f"the explicit tensor shape, making complete shape {_shape_text(full)})")
    elif len(shape) != len(dims) or not all(_dim_fits(shape[i], dims[i])
                                            for i in range(len(dims))):
        raise ServerError(
            Code.INVALID_ARG,
            f"{where}: the model expects {len(shape)} dimensions (shape "
            f"{_shape_text(model_dims)}) but the model configuration specifies {len(dims)} "
            f"dimensions (shape {_shape_text(dims)})")


def _config_dims(t) -> list:
    return list(t.reshape.shape) if t.HasField("reshape") else list(t.dims)


_CONFIG_TO_OV = {config: name for name, config in _OV_TO_CONFIG.items()}


class OpenVINOBackend:
    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int):
        self.name = config.name
        self.instance_name = instance_name
        if device != "cpu":
            raise ServerError(Code.INVALID_ARG, f"unable to load model '{config.name}', Triton "
                                                "OpenVINO backend supports only Kind CPU and AUTO")
        self.batching = config.max_batch_size > 0
        instances = active_instance_count(config)
        # The files as they are now (an IR's weights are its .bin): a version
        # reloaded after they changed compiles anew, also while the old
        # instances still serve.
        path = Path(model_path)
        files = tuple((f.stat().st_mtime_ns, f.stat().st_size)
                      for f in (path, path.with_suffix(".bin")) if f.exists())
        key = (str(path.resolve()), files, config.SerializeToString(deterministic=True))
        self._key = key
        self._shared = _SHARED.acquire(
            key, lambda: self._compile(config, model_path, threads, instances))
        self.compiled, self.properties = self._shared.value
        self.input_names = {p.get_any_name() for p in self.compiled.inputs}
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]
        try:
            self.request = self.compiled.create_infer_request()
        except BaseException:  # never served: its hold on the compiled model goes
            self.close()
            raise
        # Outputs whose shape depends on more than the batch size: emptied
        # before each run. With inputs whose dynamic dims disagree,
        # OpenVINO's CPU plugin runs nothing and raises nothing, and the
        # request's output tensors would still hold the last batch's answers
        # (another client's); emptied, they answer empty. (A legitimately
        # empty output looks the same, so that is not raised as an error.)
        skip = 1 if self.batching else 0
        self._emptied = [(i, port.get_element_type(), len(port.get_partial_shape()))
                         for i, port in enumerate(self.compiled.outputs)
                         if any(d.is_dynamic for d in list(port.get_partial_shape())[skip:])]
        # Not RUNS_INLINE: on bench/backend_overhead.py --backend openvino
        # (2 busy cores, runs back to back) the inline-capable backend served
        # less every time (median ratio 0.754 vs 1.010, 0.447 vs 0.582), why
        # is not established; instance threads it is until a run says
        # otherwise.
        self.capabilities = Capability.NONE

    @classmethod
    def _compile(cls, config, model_path: str, threads: int, instances: int) -> tuple:
        """The compiled model the version's instances share, and the
        properties it was compiled with."""
        target = (string_param(config, "TARGET_DEVICE") or "CPU").strip().upper()
        properties = device_properties(config, threads, instances)
        core = _core(config)
        model = cls._check_io(config, _read(core, model_path))
        shapes = cls._shapes(config, model, {p.get_any_name(): p for p in model.inputs})
        if shapes:
            try:
                model.reshape(shapes)
            except Exception as err:
                raise ServerError(Code.INVALID_ARG, f"unable to load model '{config.name}': "
                                                    f"openvino could not reshape it: {err}") \
                    from None
        try:
            return core.compile_model(model, target, properties), properties
        except Exception as err:
            raise ServerError(Code.INVALID_ARG, f"unable to load model '{config.name}': openvino "
                                                f"could not compile it for {target}: {err}") \
                from None

    @staticmethod
    def _check_io(config, model):
        """Triton's load-time checks of the config against the model, with
        its texts: as many inputs, known names, dims that fit (inputs
        unless RESHAPE_IO_LAYERS, which sets them); a config type unlike
        the model's converts at the model's edge, as Triton's backend does
        (OpenVINO's PrePostProcessor). Returns the model to compile."""
        ins = {p.get_any_name(): p for p in model.inputs}
        outs = {p.get_any_name(): p for p in model.outputs}
        if len(config.input) != len(ins):
            raise ServerError(Code.INVALID_ARG, f"unable to load model '{config.name}', "
                                                f"configuration expects {len(config.input)} "
                                                f"inputs, model provides {len(ins)}")
        reshape = _yes(config, "RESHAPE_IO_LAYERS")
        converts = []
        for kind, declared, ports in (("input", config.input, ins),
                                      ("output", config.output, outs)):
            for t in declared:
                port = ports.get(t.name)
                if port is None:
                    raise ServerError(Code.INVALID_ARG,
                                      f"unexpected inference {kind} '{t.name}', allowed "
                                      f"{kind}s are: {', '.join(sorted(ports))}")
                wanted = data_type_name(t.data_type)
                if wanted not in _CONFIG_TO_OV:
                    raise ServerError(Code.INTERNAL, f"unsupported datatype {wanted} for {kind} "
                                                     f"'{t.name}' for model '{config.name}'")
                if not (kind == "input" and reshape):
                    _check_dims(config, t.name, port, _config_dims(t))
                if _OV_TO_CONFIG.get(_type_name(port)) != wanted:
                    converts.append((kind, t.name, getattr(ov.Type, _CONFIG_TO_OV[wanted])))
        if not converts:
            return model
        ppp = ov.preprocess.PrePostProcessor(model)
        try:
            for kind, name, element in converts:
                (ppp.input(name) if kind == "input" else ppp.output(name)) \
                    .tensor().set_element_type(element)
            return ppp.build()
        except Exception as err:
            raise ServerError(Code.INTERNAL, f"openvino error in setting precision for "
                                             f"{converts[0][1]} : {err}") from None

    @staticmethod
    def _shapes(config, model, inputs: dict) -> dict:
        """New input shapes: the config's dims (RESHAPE_IO_LAYERS), and a
        dynamic batch dimension for a batching model."""
        batch = config.max_batch_size > 0 and not _yes(config, "SKIP_OV_DYNAMIC_BATCHSIZE")
        reshape = _yes(config, "RESHAPE_IO_LAYERS")
        if not batch and not reshape:
            return {}
        declared = {t.name: t for t in config.input}
        shapes = {}
        for name, port in inputs.items():
            dims = _partial_dims(port)
            skip = 1 if config.max_batch_size > 0 else 0
            t = declared.get(name)
            if reshape and t is not None:
                given = _config_dims(t)
                if any(d < -1 or d == 0 for d in given):
                    raise ServerError(Code.INTERNAL, "openvino backend does not support "
                                                     "dimensions values other than `-1` or "
                                                     "positive integers")
                dims = dims[:skip] + given
            if batch and dims:
                dims[0] = -1
            shapes[name] = ov.PartialShape([ov.Dimension() if d < 0 else ov.Dimension(d)
                                            for d in dims])
        return shapes

    @staticmethod
    def auto_complete_config(config, model_path: str, default_max_batch_size: int) -> None:
        """Fills max_batch_size, dynamic batching, inputs and outputs from
        the model, as Triton's openvino backend does: a model whose every
        input and output has a layout with a batch dimension ("N") can
        batch, and gets max_batch_size = default_max_batch_size (at least
        1), with dynamic batching when that is > 1 and no scheduler is set."""
        model = _read(_core(config), model_path)
        ports = list(model.inputs) + list(model.outputs)

        def has_batch(port):
            try:
                return ov.layout_helpers.get_layout(port).has_name("N")
            except Exception:
                return False

        if all(has_batch(p) for p in ports):
            if config.max_batch_size == 0:
                config.max_batch_size = max(1, default_max_batch_size)
            if (config.max_batch_size > 1 and not config.HasField("dynamic_batching")
                    and not config.HasField("sequence_batching")):
                config.dynamic_batching.SetInParent()
        skip = 1 if config.max_batch_size > 0 else 0
        from pyserver._proto import enum_descriptor
        data_types = enum_descriptor("inference.DataType").values_by_name

        def fill(target, tensors, kind):
            for port in tensors:
                name = port.get_any_name()
                type_name = _type_name(port)
                if type_name not in _OV_TO_CONFIG:
                    raise ServerError(Code.UNSUPPORTED,
                                      f"model '{config.name}': {kind} '{name}' has type "
                                      f"{type_name}, which this backend does not support")
                entry = target.add()
                entry.name = name
                entry.data_type = data_types[_OV_TO_CONFIG[type_name]].number
                entry.dims.extend(_partial_dims(port)[skip:])

        if not config.input:
            fill(config.input, model.inputs, "input")
        if not config.output:
            fill(config.output, model.outputs, "output")
        if not config.platform and not config.backend:
            config.backend = "openvino"

    def execute(self, inputs: dict) -> dict:
        # Tensors set by name and a bare infer(), not infer(dict): the
        # dict's dispatch and result wrapping cost 40 µs a batch on the MLP of
        # bench/backend_overhead.py (606 vs 567 µs p50, batches of 1-16).
        # A tensor wraps the batch's buffer without a copy where OpenVINO
        # may (a writable, contiguous array: a gathered batch); a request's
        # own read-only buffer (a batch of one) is copied. infer releases the
        # GIL while the graph runs; the outputs are copied out of the
        # request's tensors, which the next batch reuses.
        request = self.request
        if len(inputs) != len(self.input_names):  # an optional input left out
            missing = sorted(self.input_names - inputs.keys())
            raise ServerError(Code.INVALID_ARG, f"model '{self.name}' needs input(s) "
                                                f"{', '.join(missing)}: OpenVINO runs a model "
                                                "with every input it declares")
        try:
            for name, value in inputs.items():
                shared = value.flags.writeable and value.flags.c_contiguous
                request.set_tensor(name, ov.Tensor(value, shared_memory=shared))
            for index, element, rank in self._emptied:
                request.set_output_tensor(index, ov.Tensor(element, ov.Shape([0] * rank)))
        except Exception as err:
            raise ServerError(Code.INTERNAL, f"openvino error in setting tensor data : {err}") \
                from None
        try:
            request.infer()
        except Exception as err:
            raise ServerError(Code.INTERNAL, f"openvino error in running inference : {err}") \
                from None
        return {name: request.get_tensor(name).data.copy() for name in self.output_names}

    def close(self) -> None:
        shared, self._shared = self._shared, None
        self.request = None
        self.compiled = None
        if shared is not None:
            _SHARED.release(self._key, shared)
