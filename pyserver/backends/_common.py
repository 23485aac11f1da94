"""What the framework backends share: reading config `parameters` the way
Triton's backends parse them, where an instance runs (its group's kind and
GPU), and the config data type names."""

from __future__ import annotations

import os

from pyserver._proto import ModelConfig
from pyserver.config import instance_count
from pyserver.kernel.dtypes import config_type_name
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.flags import PARAMETER_WORDS, bool_word
from pyserver.runtime.host_policy import Placement, placement_for

_KINDS = ModelConfig.DESCRIPTOR.fields_by_name["instance_group"].message_type \
    .enum_types_by_name["Kind"]


data_type_name = config_type_name  # config enum number -> 'TYPE_FP32'


def string_param(config, key: str) -> str | None:
    """A model config `parameters` entry, or None when absent."""
    if key in config.parameters:
        return config.parameters[key].string_value
    return None


def parse_bool(value: str) -> bool:
    """Triton's ParseBoolValue: true/on/1 and false/off/0, any case."""
    word = bool_word(value, PARAMETER_WORDS)
    if word is None:
        raise ServerError(Code.INVALID_ARG, f"failed to convert '{value}' to boolean")
    return word


def parse_int(value: str) -> int:
    """Triton's ParseIntValue (std::stoi: leading integer, rest ignored)."""
    text = value.strip()
    end = 1 if text[:1] in ("+", "-") else 0
    while end < len(text) and text[end].isdigit():
        end += 1
    try:
        return int(text[:end])
    except ValueError:
        raise ServerError(Code.INVALID_ARG,
                          f"failed to convert '{value}' to integral number") from None


def bool_param(config, key: str, default: bool) -> bool:
    value = string_param(config, key)
    return default if value is None else parse_bool(value)


def int_param(config, key: str, default: int) -> int:
    value = string_param(config, key)
    return default if value is None else parse_int(value)


def file_identity(path: str) -> tuple:
    """What tells the file at ``path`` from another put there later (a
    model file replaced and reloaded while the old version still serves):
    the path, its device and inode, size and modification time. Just the
    path where it cannot be read (loading it then says why)."""
    try:
        st = os.stat(path)
    except OSError:
        return (path,)
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def instance_group(config, instance_name: str):
    """The instance_group of the instance named ``<group name>_<index>``
    (the whole suffix a number within the group's count: groups "a" and
    "a_b" do not claim each other's instances), or None."""
    for group in config.instance_group:
        prefix = group.name + "_"
        if not instance_name.startswith(prefix):
            continue
        suffix = instance_name[len(prefix):]
        if suffix.isdigit() and int(suffix) < max(1, instance_count(group)):
            return group
    return None


def instance_host_placement(config, instance_name: str, policies) -> Placement:
    """The host policy (--host-policy's ``policies``) the instance named
    ``instance_name`` takes: its group's ``host_policy``, else the default
    for its kind and device (runtime/host_policy.py)."""
    kind, device = instance_placement(config, instance_name)
    group = instance_group(config, instance_name)
    return placement_for(policies, kind, device, group.host_policy if group is not None else "")


def instance_placement(config, instance_name: str) -> tuple[str, int]:
    """(kind, device id) of the instance named ``<group name>_<index>``:
    kind is 'KIND_GPU', 'KIND_CPU' or 'KIND_MODEL'; a KIND_GPU group's
    first ``count`` instances run on its first GPU, the next ``count`` on
    its second, and so on (config.instance_count; GPU 0 when the group
    lists none)."""
    group = instance_group(config, instance_name)
    if group is None:
        return "KIND_CPU", 0
    kind = _KINDS.values_by_number[group.kind].name
    index = int(instance_name[len(group.name) + 1:])
    gpus = list(group.gpus)
    device = gpus[(index // max(1, group.count)) % len(gpus)] if gpus else 0
    return kind, (device if kind == "KIND_GPU" else 0)


def instance_device(config, instance_name: str) -> str:
    """The ``device`` a backend is built with: ``"cuda:N"`` for an instance
    on GPU N, ``"cpu"`` for any other (instance_placement)."""
    kind, device = instance_placement(config, instance_name)
    return f"cuda:{device}" if kind == "KIND_GPU" else "cpu"


def prefer_gpu(config, usable: bool) -> None:
    """Where a GPU is present and the runtime can use it, instance groups
    left to KIND_AUTO run on it (Triton's core decides the same before the
    backend sees the config); elsewhere they stay for normalization to
    place on the CPU."""
    if not usable:
        return
    if not config.instance_group:
        config.instance_group.add()
    gpu = _KINDS.values_by_name["KIND_GPU"].number
    auto = _KINDS.values_by_name["KIND_AUTO"].number
    for group in config.instance_group:
        if group.kind == auto:
            group.kind = gpu


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def compute_cores() -> int:
    """The cores model execution may take by default: all but one, which
    the event loop (every frontend and request) needs under load; the only
    one on a single core. bench/backend_overhead.py, 2 cores, the ONNX MLP
    at c16: 1 intra-op thread serves ~1.35x the requests that 2 do."""
    n = cpu_count()
    return n - 1 if n > 1 else 1


def profile_distance(ranges: dict, shapes: dict) -> int | None:
    """How far input shapes are from an optimization profile's opt shapes
    (Manhattan distance, as Triton's tensorrt backend measures it), or None
    when a shape is outside the profile's [min, max]. ``ranges`` maps each
    input to its (min, opt, max) shapes."""
    total = 0
    for name, shape in shapes.items():
        low, opt, high = ranges[name]
        if len(shape) != len(low):
            return None
        for s, lo, o, hi in zip(shape, low, opt, high):
            if s < lo or s > hi:
                return None
            total += abs(o - s)
    return total


def pick_profile(profiles: list, shapes: dict) -> int:
    """Position in ``profiles`` ((label, index, ranges) each) of the nearest
    profile that holds the shapes; Triton's error when none does."""
    best, best_distance = None, None
    for position, (_, _, ranges) in enumerate(profiles):
        distance = profile_distance(ranges, shapes)
        if distance is not None and (best_distance is None or distance < best_distance):
            best, best_distance = position, distance
    if best is None:
        listed = "".join(f" {label}[{index}]" for label, index, _ in profiles)
        raise ServerError(
            Code.INVALID_ARG,
            f"failed to find any Optimization Profile among [{listed}] to support the "
            "requested dimensions (or shape values), proceeding with first profile.")
    return best
