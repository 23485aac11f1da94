"""Triton's host policies: where a model instance runs and takes its memory.

``--host-policy=<policy name>,<setting>=<value>`` (repeatable) names a
policy and gives it settings, as tritonserver's flag does:

- ``cpu-cores``: the CPUs the instance may run on, as Triton writes them:
  comma-separated ``<lower>-<upper>`` ranges (``0-3,8-11``; one core is
  ``2-2``);
- ``numa-node``: the NUMA node its memory comes from (a bound memory
  policy).

An instance takes the policy its ``instance_group`` names in ``host_policy``,
or by default the one named for where it runs: ``cpu`` (KIND_CPU),
``gpu_<device id>`` (KIND_GPU), ``model`` (KIND_MODEL). A name no flag
defined is an empty policy: the instance runs anywhere, as before.

Applied as Triton applies it: on the thread that creates the instance, for
the time it does (what the backend starts then inherits it: a Python
model's worker process, ONNX Runtime's thread pools), and for good on the
instance's own thread. Both are per-thread settings of the kernel
(``sched_setaffinity`` and ``set_mempolicy`` on the calling thread), which a
new thread or process inherits from the one that made it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform

SETTINGS = ("numa-node", "cpu-cores")

# set_mempolicy(2) and get_mempolicy(2) have no glibc wrapper; their numbers
_MEMPOLICY_SYSCALLS = {"x86_64": (238, 239), "aarch64": (237, 236), "ppc64le": (261, 260)}
_MPOL_BIND = 2
_MASK_BITS = 1024  # nodes a mask covers (the kernel's MAX_NUMNODES is at most 1024)


class HostPolicyError(ValueError):
    """A policy that cannot be given or applied; the text is Triton's."""


def parse_host_policy_flags(values: list[str]) -> dict[str, dict[str, str]]:
    """``--host-policy`` values into {policy name: {setting: value}}, later
    values of a setting replacing earlier ones as in Triton. Only the flag's
    shape is checked here (HostPolicyError with Triton's text); the server
    checks each setting and value, for the in-process API too."""
    policies: dict[str, dict[str, str]] = {}
    for arg in values:
        name, comma, rest = arg.partition(",")
        setting, equals, value = rest.partition("=")
        if not (comma and equals and name and setting and value):
            raise HostPolicyError("--host-policy option format is "
                                  f"'<policy name>,<setting>=<value>'. Got {arg}")
        policies.setdefault(name, {})[setting] = value
    return policies


def check_setting(setting: str, value: str) -> None:
    """HostPolicyError when ``setting`` is not one Triton knows or its value
    does not parse (Server checks every policy it is given with this)."""
    if setting not in SETTINGS:
        raise HostPolicyError(f"Unsupported host policy setting '{setting}' is specified, "
                              "supported settings are 'numa-node', 'cpu-cores'")
    if setting == "cpu-cores":
        parse_cpu_cores(value)
    else:
        parse_numa_node(value)


def parse_cpu_cores(text: str) -> frozenset[int]:
    """Triton's ``cpu-cores`` value: comma-separated ``<lower>-<upper>``."""
    cpus = set()
    for part in text.split(","):
        lower, dash, upper = part.partition("-")
        if not dash:
            raise HostPolicyError("host policy setting 'cpu-cores' format is "
                                  f"'<lower_cpu_core_id>-<upper_cpu_core_id>'. Got {part}")
        cpus.update(range(_parse_int("Parsing 'cpu-cores' value", lower),
                          _parse_int("Parsing 'cpu-cores' value", upper) + 1))
    return frozenset(cpus)


def parse_numa_node(text: str) -> int:
    """Triton's ``numa-node`` value: one node number."""
    return _parse_int("Parsing 'numa-node' value", text)


def _parse_int(what: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HostPolicyError(f"{what}: Can't parse '{text}' to integer") from None


def policy_name(kind: str, device_id: int, group_policy: str = "") -> str:
    """The policy an instance takes: its group's ``host_policy``, or the
    default name for ``kind`` (``KIND_CPU``, ``KIND_GPU``, ``KIND_MODEL``)."""
    if group_policy:
        return group_policy
    if kind == "KIND_GPU":
        return f"gpu_{device_id}"
    return "model" if kind == "KIND_MODEL" else "cpu"


class Placement:
    """One instance's policy, resolved: ``name``, ``settings`` (as given),
    ``cpus`` (a frozenset, or None: any) and ``numa_node`` (or None).
    False when it changes nothing."""

    __slots__ = ("name", "settings", "cpus", "numa_node")

    def __init__(self, name: str, settings: dict[str, str] | None = None):
        self.name = name
        self.settings = dict(settings or {})
        cores = self.settings.get("cpu-cores")
        self.cpus = parse_cpu_cores(cores) if cores is not None else None
        node = self.settings.get("numa-node")
        self.numa_node = parse_numa_node(node) if node is not None else None

    def __bool__(self) -> bool:
        return self.cpus is not None or self.numa_node is not None

    def apply_to_thread(self) -> None:
        """The calling thread (and what it starts from now on) runs on
        ``cpus`` and takes its memory from ``numa_node``. HostPolicyError
        with Triton's text when the kernel refuses."""
        if self.cpus is not None:
            try:
                os.sched_setaffinity(0, self.cpus)
            except OSError as err:
                raise HostPolicyError(
                    f"Unable to set NUMA thread affinity: {os.strerror(err.errno)}") from None
        if self.numa_node is not None:
            _set_mempolicy(_MPOL_BIND, self.numa_node)

    @contextlib.contextmanager
    def applied(self):
        """The calling thread under this policy for the ``with`` block, then
        as it was: for the thread that creates an instance."""
        if not self:
            yield
            return
        cpus = os.sched_getaffinity(0)
        memory = _get_mempolicy() if self.numa_node is not None else None
        try:
            self.apply_to_thread()
            yield
        finally:
            os.sched_setaffinity(0, cpus)
            if memory is not None:
                _restore_mempolicy(*memory)

    def message(self) -> dict:
        """{name: settings}: what TRITONBACKEND_ModelInstanceHostPolicy gives."""
        return {self.name: dict(self.settings)}


def placement_for(policies: dict[str, dict[str, str]] | None, kind: str, device_id: int,
                  group_policy: str = "") -> Placement:
    """The placement of an instance of ``kind`` on ``device_id`` whose group
    names ``group_policy`` (or none), from the server's ``policies``."""
    name = policy_name(kind, device_id, group_policy)
    return Placement(name, (policies or {}).get(name))


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _syscall_numbers() -> tuple[int, int]:
    numbers = _MEMPOLICY_SYSCALLS.get(platform.machine())
    if numbers is None:
        raise HostPolicyError(f"Unable to set NUMA memory policy: 'numa-node' is not supported "
                              f"on {platform.machine()}")
    return numbers


_Mask = ctypes.c_ulong * (_MASK_BITS // (8 * ctypes.sizeof(ctypes.c_ulong)))


def _set_mempolicy(mode: int, node: int | None) -> None:
    mask = _Mask()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    if node is not None:
        if not 0 <= node < _MASK_BITS:
            raise HostPolicyError("Unable to set NUMA memory policy: Invalid argument")
        mask[node // bits] = 1 << (node % bits)
    set_number, _ = _syscall_numbers()
    if _libc().syscall(set_number, mode, ctypes.byref(mask) if node is not None else None,
                       _MASK_BITS + 1 if node is not None else 0) != 0:
        raise HostPolicyError("Unable to set NUMA memory policy: "
                              + os.strerror(ctypes.get_errno()))


def _get_mempolicy() -> tuple[int, _Mask]:
    mode = ctypes.c_int()
    mask = _Mask()
    _, get_number = _syscall_numbers()
    if _libc().syscall(get_number, ctypes.byref(mode), ctypes.byref(mask), _MASK_BITS + 1,
                       None, 0) != 0:
        raise HostPolicyError("Unable to get NUMA node for current thread: "
                              + os.strerror(ctypes.get_errno()))
    return mode.value, mask


def _restore_mempolicy(mode: int, mask) -> None:
    set_number, _ = _syscall_numbers()
    empty = not any(mask)
    _libc().syscall(set_number, mode, None if empty else ctypes.byref(mask),
                    0 if empty else _MASK_BITS + 1)
