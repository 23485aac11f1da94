"""Sequence batching, the Python half: what a stateful model's config asks
for (``sequence_batching``), the request's sequence parameters, and the
control tensors each request carries into the model.

Implicit state (``state [...]``): the server keeps each sequence's state
tensors, feeds them to the model as inputs and takes them back from its
outputs, as Triton does for the framework backends.

The scheduling itself (slots, backlog, idle timeout, one request per
sequence per batch, instance affinity) is csrc's SequenceBatchScheduler.
Requests name their sequence with the ``sequence_id`` parameter (a non-zero
integer or a non-empty string) and mark its ends with ``sequence_start`` /
``sequence_end``, as tritonclient sends them. Each request gets the control
inputs the config declares, as Triton fills them: START and END (1 on the
first / last request), READY (always 1: batches hold only ready requests)
and CORRID (the correlation ID, in the declared datatype).

Iterative sequences (``iterative_sequence: true``), as Triton runs them: a
request with no sequence ID gets one of its own and START; its model may
release it with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE (its backend returns
RESCHEDULED for it), and the request runs again in a later batch, on the same
sequence slot, without START. Released for good, it ends its sequence.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np

from pyserver.config import active_instance_count
from pyserver.kernel import dtypes
from pyserver.kernel.errors import Code, ServerError, request_prefix

__all__ = ["SequenceControls", "SEQUENCE_START", "SEQUENCE_END", "Reschedule",
           "NOT_ITERATIVE"]

SEQUENCE_START = 1
SEQUENCE_END = 2
_U64 = (1 << 64) - 1

# Triton's error for a request released with RESCHEDULE by a model that is
# not an iterative sequence model.
NOT_ITERATIVE = ("Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the "
                 "model is not configured to handle such a flag.")


class Reschedule:
    """The response of a request that runs again (an iterative sequence):
    the Server queues it into ``model`` once its batch is answered."""

    __slots__ = ("model",)

    def __init__(self, model):
        self.model = model

# inference.ModelSequenceBatching.Control.Kind
_START, _READY, _END, _CORRID = 0, 1, 2, 3
_KIND_NAMES = {_START: "CONTROL_SEQUENCE_START", _READY: "CONTROL_SEQUENCE_READY",
               _END: "CONTROL_SEQUENCE_END", _CORRID: "CONTROL_SEQUENCE_CORRID"}


def _unsupported(message: str) -> ServerError:
    return ServerError(Code.UNSUPPORTED, message)


def _bad_config(message: str) -> ServerError:
    return ServerError(Code.INVALID_ARG, message)


class _BoolControl:
    """START, END or READY: a [1] tensor holding the config's false/true value."""

    __slots__ = ("name", "kind", "values")

    def __init__(self, model: str, name: str, kind: int, control):
        self.name = name
        self.kind = kind
        if len(control.fp32_false_true) == 2:
            dtype, pair = np.float32, control.fp32_false_true
        elif len(control.int32_false_true) == 2:
            dtype, pair = np.int32, control.int32_false_true
        elif len(control.bool_false_true) == 2:
            dtype, pair = np.bool_, control.bool_false_true
        else:
            raise _bad_config(
                f"sequence batching control '{name}' of model '{model}' must specify exactly one "
                f"of int32_false_true, fp32_false_true or bool_false_true for "
                f"{_KIND_NAMES[kind]}")
        self.values = (np.array([pair[0]], dtype=dtype), np.array([pair[1]], dtype=dtype))


class _State:
    """One implicit state (``sequence_batching.state``): each request of a
    sequence gets it as input ``input_name``; the model's output
    ``output_name`` becomes the state the next request gets. A sequence's
    first request gets ``initial``: the config's initial_state, else zeros
    (variable dimensions 1), as Triton starts it."""

    __slots__ = ("input_name", "output_name", "initial")

    def __init__(self, model: str, model_dir: str | None, state, batching: bool):
        self.input_name = state.input_name
        self.output_name = state.output_name
        if not self.input_name or not self.output_name:
            raise _bad_config(f"model '{model}': a sequence_batching state needs both "
                              "input_name and output_name")
        wire = dtypes.config_to_wire(dtypes.config_type_name(state.data_type))
        dims = [1 if d == -1 else int(d) for d in state.dims]
        if len(state.initial_state) > 1:
            raise _unsupported(f"model '{model}': state '{self.input_name}' has "
                               f"{len(state.initial_state)} initial_state entries; one is supported")
        if state.initial_state:
            initial = state.initial_state[0]
            if initial.data_type != state.data_type:
                raise _bad_config(
                    f"model '{model}': the initial_state of state '{self.input_name}' must have "
                    "the state's data_type")
            dims = [int(d) for d in initial.dims]
            if any(d < 0 for d in dims):
                raise _bad_config(f"model '{model}': the initial_state of state "
                                  f"'{self.input_name}' must have fixed dims")
            if initial.WhichOneof("state_data") == "data_file":
                value = _read_initial_state(model, model_dir, initial.data_file, wire, dims)
            else:
                value = _zeros(wire, dims)
        else:
            value = _zeros(wire, dims)
        self.initial = value.reshape([1] + dims) if batching else value


def _zeros(wire: str, dims: list) -> np.ndarray:
    if wire == "BYTES":
        value = np.empty(dims, dtype=np.object_)
        value.fill(b"")
        return value
    return np.zeros(dims, dtype=dtypes.WIRE_TO_NUMPY[wire])


def _read_initial_state(model: str, model_dir: str | None, name: str, wire: str,
                        dims: list) -> np.ndarray:
    """An initial_state's data_file: raw little-endian elements (BYTES:
    each a 4-byte length and its bytes), in <model>/initial_state/."""
    path = Path(model_dir or ".") / "initial_state" / name
    try:
        data = path.read_bytes()
    except OSError as err:
        raise _bad_config(f"model '{model}': failed to read initial_state data_file "
                          f"'{path}': {err.strerror}") from None
    count = int(np.prod(dims, dtype=np.int64))
    try:
        if wire == "BYTES":
            return dtypes.deserialize_bytes_tensor(data, count).reshape(dims)
        value = np.frombuffer(data, dtype=dtypes.WIRE_TO_NUMPY[wire])
        if value.size != count:
            raise ValueError(f"{len(data)} bytes hold {value.size} elements, dims want {count}")
    except ValueError as err:
        raise _bad_config(f"model '{model}': initial_state data_file '{path}' does not fit "
                          f"the state: {err}") from None
    return value.reshape(dims).copy()


class SequenceControls:
    """A model's ``sequence_batching`` settings, control inputs and
    implicit states (``model_dir``: where initial_state data files are)."""

    def __init__(self, config, model_dir: str | None = None):
        sb = config.sequence_batching
        model = config.name
        self.name = model
        batching = config.max_batch_size > 0
        self.states = [_State(model, model_dir, state, batching) for state in sb.state]
        inputs = {t.name for t in config.input}
        for state in self.states:
            if state.input_name in inputs:
                raise _bad_config(f"model '{model}': state input '{state.input_name}' is also "
                                  "declared as an input")
        # Each sequence's current state values, and when it last ran (a
        # sequence that loses its slot while idle is forgotten later).
        self._values: dict[int, tuple[list, float]] = {}
        self._forget_after_s = 2 * (int(sb.max_sequence_idle_microseconds) or 1000000) / 1e6
        self.strategy = "oldest" if sb.HasField("oldest") else "direct"
        self.iterative = bool(sb.iterative_sequence)
        self._iterative_ids = itertools.count(1)  # as Triton numbers them
        self.max_sequence_idle_us = int(sb.max_sequence_idle_microseconds) or 1000000
        self.booleans: list[_BoolControl] = []
        self.corrid: tuple[str, np.dtype | None] | None = None
        for control_input in sb.control_input:
            for control in control_input.control:
                kind = int(control.kind)
                if kind == _CORRID:
                    wire = dtypes.config_to_wire(dtypes.config_type_name(control.data_type)) \
                        if control.data_type else ""
                    if wire not in ("UINT64", "INT64", "UINT32", "INT32", "BYTES"):
                        raise _bad_config(
                            f"sequence batching control '{control_input.name}' of model "
                            f"'{model}' must specify data_type TYPE_UINT64, TYPE_INT64, "
                            "TYPE_UINT32, TYPE_INT32 or TYPE_STRING for CONTROL_SEQUENCE_CORRID")
                    self.corrid = (control_input.name,
                                   None if wire == "BYTES" else dtypes.WIRE_TO_NUMPY[wire])
                else:
                    self.booleans.append(_BoolControl(model, control_input.name, kind, control))
        self.control_names = {c.name for c in self.booleans}
        if self.corrid is not None:
            self.control_names.add(self.corrid[0])

    def scheduler_config(self, config) -> dict:
        """Settings for ``Scheduler.sequence``."""
        sb = config.sequence_batching
        settings = {
            "model_name": config.name,
            "max_batch_size": int(config.max_batch_size),
            "instance_count": max(1, active_instance_count(config)),
            "max_sequence_idle_microseconds": self.max_sequence_idle_us,
            "strategy": self.strategy,
            "iterative": self.iterative,
        }
        if self.strategy == "direct" and sb.HasField("direct"):
            settings["max_queue_delay_microseconds"] = int(sb.direct.max_queue_delay_microseconds)
            settings["minimum_slot_utilization"] = float(sb.direct.minimum_slot_utilization)
        if self.strategy == "oldest":
            oldest = sb.oldest
            settings["max_candidate_sequences"] = int(oldest.max_candidate_sequences)
            settings["preferred_batch_size"] = list(oldest.preferred_batch_size)
            settings["max_queue_delay_microseconds"] = int(oldest.max_queue_delay_microseconds)
            settings["preserve_ordering"] = bool(oldest.preserve_ordering)
        return settings

    def prepare(self, request, arrays: dict, batching: bool) -> tuple[int, int, str | None]:
        """Adds the control tensors to ``arrays``; returns what the scheduler
        needs: (correlation ID as a non-zero uint64 or 0, flags, label for
        string IDs)."""
        params = request.parameters
        sequence_id = params.get("sequence_id", 0)
        if self.iterative and not sequence_id:
            # A sequence of its own, started by this request (a new dict:
            # the decoders may share an empty one between requests).
            sequence_id = next(self._iterative_ids)
            params = request.parameters = {**params, "sequence_id": sequence_id,
                                           "sequence_start": True}
        flags = 0
        if params.get("sequence_start") is True:
            flags |= SEQUENCE_START
        if params.get("sequence_end") is True:
            flags |= SEQUENCE_END
        corr, label = _correlation(sequence_id)
        if corr == 0:
            return 0, flags, label  # the scheduler refuses it with Triton's text
        for control in self.booleans:
            if control.kind == _START:
                on = flags & SEQUENCE_START
            elif control.kind == _END:
                on = flags & SEQUENCE_END
            else:  # READY: every request in a batch is ready
                on = True
            value = control.values[1 if on else 0]
            arrays[control.name] = value.reshape(1, 1) if batching else value
        if self.corrid is not None:
            name, dtype = self.corrid
            if (label is not None) != (dtype is None):  # a string ID for a number, or back
                raise ServerError(Code.INVALID_ARG, (
                    f"{request_prefix(request.id)}sequence batching control '{name}' data-type "
                    f"is '{'BYTES' if label is not None else 'UINT64'}', but model "
                    f"'{self.name}' expects '{'BYTES' if dtype is None else dtypes.numpy_to_wire(dtype)}'"))
            if dtype is None:
                value = np.array([str(sequence_id).encode()], dtype=object)
            else:
                value = np.array([int(sequence_id)], dtype=dtype)
            arrays[name] = value.reshape(1, 1) if batching else value
        return corr, flags, label

    # -- implicit state (the instance thread of the sequence's slot) ---------------

    def feed_states(self, requests: list) -> None:
        """Before a batch runs: each request gets its sequence's states as
        inputs (the initial ones on START)."""
        values = self._values
        for p in requests:
            params = p.request.parameters
            corr = self.correlation(p.request)
            if params.get("sequence_start") is True:
                self._forget_idle()
                current = None
            else:
                current = values.get(corr)
            arrays = p.arrays
            if current is None:
                for state in self.states:
                    arrays[state.input_name] = state.initial
            else:
                for state, value in zip(self.states, current[0]):
                    arrays[state.input_name] = value

    def keep_states(self, requests: list, outputs_of) -> None:
        """After a batch ran: each request's state outputs become its
        sequence's states; ``outputs_of(i)`` is request i's outputs (a
        dict, None when it failed). A sequence that ended forgets them."""
        values = self._values
        now = time.monotonic()
        for i, p in enumerate(requests):
            params = p.request.parameters
            corr = self.correlation(p.request)
            if params.get("sequence_end") is True:
                values.pop(corr, None)
                continue
            outputs = outputs_of(i)
            if outputs is None:  # it failed: its sequence keeps what it had
                continue
            kept = []
            for state in self.states:
                value = outputs.get(state.output_name)
                if value is None:
                    raise ServerError(Code.INTERNAL, f"model '{self.name}' did not produce the "
                                                     f"state output '{state.output_name}'")
                kept.append(np.array(value, copy=True))  # its batch's buffer may be reused
            values[corr] = (kept, now)

    def forget(self, corr: int) -> None:
        self._values.pop(corr, None)

    def _forget_idle(self) -> None:
        """Drops the states of sequences idle for long (their slot is gone)."""
        values = self._values
        if not values:
            return
        oldest = time.monotonic() - self._forget_after_s
        # A snapshot taken in one C call: other instances' threads add and
        # drop their sequences' states meanwhile.
        for corr, (_, used) in list(values.items()):
            if used < oldest:
                values.pop(corr, None)

    @staticmethod
    def correlation(request) -> int:
        """The scheduler's correlation ID of a request prepare() queued."""
        return _correlation(request.parameters.get("sequence_id", 0))[0]


def _correlation(sequence_id) -> tuple[int, str | None]:
    """(correlation ID as a uint64, 0 for none; label for a string ID)."""
    if type(sequence_id) is str:
        # Strings are tracked by a 64-bit digest (the top bit set keeps them
        # apart from small numeric IDs); "" means no ID.
        return (((hash(sequence_id) & _U64) | (1 << 63)) if sequence_id else 0), sequence_id
    return int(sequence_id) & _U64, None
