"""config.pbtxt: parsing (protobuf text format), normalization and the JSON
form served at /v2/models/<m>/config.

Parse errors name the file, line, column and the field, and say what was
expected; `${VAR}` placeholders left in a file get a hint of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor

from pyserver._proto import ModelConfig
from pyserver.kernel.errors import Code, ServerError

CONFIG_FILENAME = "config.pbtxt"
DEFAULT_MODEL_FILENAMES = {
    "onnxruntime": "model.onnx",
    "openvino": "model.xml",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}
PLATFORM_TO_BACKEND = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}

_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")

# The one latency metric a config's model_metrics may shape (its buckets).
FIRST_RESPONSE_FAMILY = "nv_inference_first_response_histogram_ms"
FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)  # Triton's defaults


class ConfigError(ServerError):
    """A config.pbtxt that cannot be used; the message says where and why."""

    def __init__(self, message: str):
        super().__init__(Code.INVALID_ARG, message)


def parse_config_text(text: str, path: str = CONFIG_FILENAME) -> ModelConfig:
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        line, column = err.GetLine(), err.GetColumn()
        detail = str(err)
        # protobuf prefixes "line:col : "; we put the location first ourselves.
        detail = re.sub(r"^\d+:\d+\s*:\s*", "", detail)
        where = f"{path}:{line}:{column}" if line else path
        unknown = re.search(r'has no field named "([^"]+)"', detail)
        if unknown:
            import difflib
            names = [f.name for f in ModelConfig.DESCRIPTOR.fields]
            for desc in ModelConfig.DESCRIPTOR.nested_types:
                names += [f.name for f in desc.fields]
            close = difflib.get_close_matches(unknown.group(1), set(names), n=1)
            if close:
                detail += f" Did you mean '{close[0]}'?"
        message = f"failed to parse model config {where}: {detail}"
        bad_line = text.splitlines()[line - 1] if line and line <= len(text.splitlines()) else ""
        if bad_line:
            message += f"\n    {bad_line.strip()}"
        if _PLACEHOLDER.search(bad_line or text):
            message += ("\n    hint: the file contains a ${VAR} placeholder; config.pbtxt is not "
                        "templated, substitute the value before loading")
        raise ConfigError(message) from None
    return config


def load_config_file(path: Path) -> ModelConfig:
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"failed to read model config {path}: {err.strerror}") from None
    return parse_config_text(text, str(path))


def backend_name(config: ModelConfig) -> str:
    if config.backend:
        return config.backend
    return PLATFORM_TO_BACKEND.get(config.platform, config.platform)


def decoupled_cache_error(model_name: str) -> str:
    return (f"Response Cache does not currently support model {model_name} with 'decoupled' "
            "transaction policy. Please disable the response cache.")


def normalize(config: ModelConfig, model_name: str, gpu_count: int = 0) -> ModelConfig:
    """Fills the defaults Triton fills, and checks what Triton checks, so that
    /config shows what Triton would show. ``gpu_count``: the GPUs visible; a
    KIND_GPU group that lists none is placed on all of them, as Triton
    places it. A group still KIND_AUTO here runs on the CPU (a backend that
    can use a GPU made it KIND_GPU as it completed the config)."""
    where = f"model '{model_name}'"
    if config.name and config.name != model_name:
        raise ConfigError(
            f"model configuration name '{config.name}' does not match the model directory "
            f"name '{model_name}' (in {CONFIG_FILENAME} of {where})")
    config.name = model_name
    if config.max_batch_size < 0:
        raise ConfigError(f"{where}: max_batch_size must be >= 0, got {config.max_batch_size}")
    if config.backend == "" and config.platform in PLATFORM_TO_BACKEND:
        config.backend = PLATFORM_TO_BACKEND[config.platform]
    if config.platform == "" and config.backend == "onnxruntime":
        config.platform = "onnxruntime_onnx"
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1

    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen = set()
        for t in tensors:
            if not t.name:
                raise ConfigError(f"{where}: every {kind} needs a name")
            if t.name in seen:
                raise ConfigError(f"{where}: {kind} '{t.name}' is declared twice")
            seen.add(t.name)
            if t.data_type == 0:
                raise ConfigError(f"{where}: {kind} '{t.name}' has no data_type (e.g. TYPE_FP32)")
            for d in t.dims:
                if d < -1 or d == 0 and not t.HasField("reshape"):
                    raise ConfigError(
                        f"{where}: {kind} '{t.name}' has invalid dims {list(t.dims)}: each "
                        "dimension must be positive or -1 (variable)")

    if config.HasField("dynamic_batching"):
        db = config.dynamic_batching
        if config.max_batch_size == 0:
            raise ConfigError(
                f"{where}: dynamic batching is enabled but max_batch_size is 0; set "
                "max_batch_size > 0 or remove dynamic_batching")
        if not db.preferred_batch_size:
            db.preferred_batch_size.append(config.max_batch_size)
        for size in db.preferred_batch_size:
            if size <= 0 or size > config.max_batch_size:
                raise ConfigError(
                    f"{where}: dynamic batching preferred size must be positive and <= "
                    f"max_batch_size {config.max_batch_size}, got {size}")
        if db.priority_levels > 0 and not (1 <= db.default_priority_level <= db.priority_levels):
            raise ConfigError(
                f"{where}: default priority level must be in range [1, {db.priority_levels}]")
        if db.preserve_ordering and db.priority_levels > 1:
            raise ConfigError(f"{where}: preserve_ordering cannot be used with priority_levels > 1")

    if config.response_cache.enable:  # Triton's texts (its cache keeps one response)
        if config.HasField("sequence_batching"):
            raise ConfigError(
                f"Response Cache does not currently support model {model_name} with sequence "
                "batching scheduler. Please disable the response cache.")
        if config.model_transaction_policy.decoupled:
            raise ConfigError(decoupled_cache_error(model_name))

    if config.platform != "ensemble":  # (an ensemble's steps run elsewhere)
        if not config.instance_group:  # named after the model, as Triton names it
            config.instance_group.add(name=model_name)
        # What Triton's normalized config says of pinned staging buffers
        # (used where there is a GPU to stage for).
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True
    for idx, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{model_name}_{idx}"
        if group.count == 0:
            group.count = 1
        if group.count < 0:
            raise ConfigError(f"{where}: instance group '{group.name}' count must be >= 1")
        kind = ModelConfig.DESCRIPTOR.fields_by_name["instance_group"].message_type
        kinds = kind.enum_types_by_name["Kind"].values_by_name
        if group.kind == kinds["KIND_AUTO"].number:
            group.kind = kinds["KIND_CPU"].number
        if group.kind == kinds["KIND_GPU"].number and not group.gpus:
            group.gpus.extend(range(gpu_count))

    return config


_KIND_GPU = ModelConfig.DESCRIPTOR.fields_by_name["instance_group"].message_type \
    .enum_types_by_name["Kind"].values_by_name["KIND_GPU"].number


def instance_count(group) -> int:
    """The instances a normalized instance group makes: ``count`` on each of
    its GPUs for KIND_GPU (Triton's rule), ``count`` otherwise."""
    if group.kind == _KIND_GPU and len(group.gpus) > 1:
        return group.count * len(group.gpus)
    return group.count


def active_instance_count(config) -> int:
    """The instances that take work: every group's (instance_count) but
    the passive ones'."""
    return sum(instance_count(g) for g in config.instance_group if not g.passive)


def config_to_json(config: ModelConfig) -> dict:
    """Triton's JSON shape: proto field names, every field present, enum names,
    and 64-bit integers as numbers (protobuf's JSON writes them as strings)."""
    data = json_format.MessageToDict(
        config, preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True)
    _int64_to_numbers(config.DESCRIPTOR, data)
    return data


_INT64_TYPES = {FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64}


def _int64_to_numbers(descriptor, data):
    if not isinstance(data, dict):
        return
    for field in descriptor.fields:
        value = data.get(field.name)
        if value is None:
            continue
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                key_field = field.message_type.fields_by_name["key"]
                for k in list(value):
                    if value_field.message_type is not None:
                        _int64_to_numbers(value_field.message_type, value[k])
                    elif value_field.cpp_type in _INT64_TYPES:
                        value[k] = int(value[k])
                del key_field  # map keys stay strings in JSON
            elif isinstance(value, list):
                for item in value:
                    _int64_to_numbers(field.message_type, item)
            else:
                _int64_to_numbers(field.message_type, value)
        elif field.cpp_type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
