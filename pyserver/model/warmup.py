"""Model warmup (`model_warmup` in config.pbtxt): synthetic requests run on
every instance of a version while it loads, before it is READY.

As Triton does it: a sample of ``batch_size`` requests (each of batch 1 when
the model batches) is handed to the instance's backend in one execution,
``count`` times (at least once); samples with ``batch_size: 0`` are skipped.
The requests go straight to the backend, not through the scheduler, so every
instance runs them and no statistics count them. Input data is zeros,
random values, or the bytes of ``<model>/warmup/<input_data_file>``. A
sample may give a sequence model's control inputs (their dims as they are,
no batch dimension); implicit states start at their initial values.

Any failure is a load failure: generation errors (a variable dimension, a
short data file) with Triton's texts, execution errors as
"failed to run warmup sample '<name>': <error>; ".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pyserver.backends.base import Capability
from pyserver.kernel import dtypes
from pyserver.kernel.errors import Code, ServerError, invalid_arg
from pyserver.kernel.types import InferRequest, InferTensor, PendingRequest

log = logging.getLogger("pyserver")

WARMUP_FOLDER = "warmup"


@dataclass
class WarmupSample:
    name: str
    count: int
    # One entry per request of the sample: (input name -> (wire datatype, shape, array)).
    requests: list[dict[str, tuple[str, list[int], np.ndarray]]]


def build_samples(config, model_dir: Path, batching: bool | None = None) -> list[WarmupSample]:
    """The warmup samples of a config, with their data (no execution).
    Raises ServerError (INVALID_ARG) with Triton's texts."""
    if batching is None:
        batching = config.max_batch_size > 0
    rng = np.random.default_rng()
    originals = {t.name for t in config.input}
    samples = []
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            log.debug("skipping batch 0 warmup sample '%s'", setting.name)
            continue
        inputs = {}
        for name in sorted(setting.inputs):
            meta = setting.inputs[name]
            dims = [int(d) for d in meta.dims]
            if any(d < 0 for d in dims):
                raise invalid_arg("warmup setting expects all variable-size dimensions are "
                                  f"specified for input '{name}'")
            type_name = dtypes.config_type_name(meta.data_type)
            if meta.data_type == 0 or type_name == "TYPE_INVALID":
                raise invalid_arg(f"warmup setting expects input '{name}' to have a data_type")
            wire = dtypes.config_to_wire(type_name)
            # A sequence control or state input (not one of the model's
            # declared inputs) has exactly its dims, as in Triton.
            shape = ([1] if batching and name in originals else []) + dims
            count = int(np.prod(dims, dtype=np.int64)) if dims else 1
            which = meta.WhichOneof("input_data_type")
            if which is None:
                raise invalid_arg(
                    f"warmup setting expects input '{name}' to have input_data_type set")
            if wire == "BYTES":
                array = _bytes_data(which, meta, model_dir, name, count)
            else:
                dtype = dtypes.WIRE_TO_NUMPY[wire]
                if which == "zero_data":
                    array = np.zeros(count, dtype)
                elif which == "random_data":
                    array = _random(rng, dtype, count)
                else:
                    data = _read_data_file(model_dir, meta.input_data_file)
                    need = count * dtype.itemsize
                    if len(data) < need:
                        raise invalid_arg(
                            f"warmup setting expects {need} bytes, but the data provided from "
                            f"{meta.input_data_file} only has {len(data)} bytes")
                    array = np.frombuffer(data, dtype=dtype, count=count).copy()
            inputs[name] = (wire, shape, array.reshape(shape))
        samples.append(WarmupSample(setting.name, max(1, setting.count),
                                    [inputs] * setting.batch_size))
    return samples


def _random(rng, dtype: np.dtype, count: int) -> np.ndarray:
    if dtype.kind == "f":
        return rng.random(count).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    return np.frombuffer(rng.bytes(count * dtype.itemsize), dtype=dtype).copy()


def _read_data_file(model_dir: Path, filename: str) -> bytes:
    path = Path(model_dir) / WARMUP_FOLDER / filename
    try:
        return path.read_bytes()
    except OSError as err:
        raise invalid_arg(f"failed to open text file for read {path}: {err.strerror}") from None


def _bytes_data(which: str, meta, model_dir: Path, name: str, count: int) -> np.ndarray:
    """BYTES inputs: zero and random data are empty strings (as Triton: a
    zero buffer read as length-prefixed strings); a data file holds the
    length-prefixed elements."""
    if which != "input_data_file":
        out = np.empty(count, dtype=np.object_)
        out[:] = [b""] * count
        return out
    data = _read_data_file(model_dir, meta.input_data_file)
    try:
        return dtypes.deserialize_bytes_tensor(data, count)
    except ValueError as err:
        raise invalid_arg(
            f"warmup input '{name}': {meta.input_data_file} does not hold {count} "
            f"length-prefixed BYTES elements ({err})") from None


def run(mv, samples: list[WarmupSample]) -> None:
    """Runs every sample on every instance (passive ones too) of a loaded
    (not yet started) ModelVersion; raises ServerError on the first failure."""
    for instance in mv.instances + mv.passive_instances:
        takes_requests = Capability.TAKES_REQUESTS in instance.capabilities
        for sample in samples:
            for iteration in range(1, sample.count + 1):
                log.debug("model '%s' instance %s is running warmup sample '%s' for iteration %d",
                          mv.name, instance.name, sample.name, iteration)
                pending = []
                for i, inputs in enumerate(sample.requests):
                    request = InferRequest(
                        mv.name, mv.version_str, f"warmup_{sample.name}_{i}",
                        [InferTensor(n, wire, shape, a) for n, (wire, shape, a) in inputs.items()
                         if n in mv.inputs])
                    arrays, batch_size, _ = mv.validate(request)
                    arrays = dict(arrays)
                    # Sequence control inputs the sample gives go to the
                    # model as they are; implicit states start at their
                    # initial values unless it gives them.
                    for name, (_, _, array) in inputs.items():
                        if name not in mv.inputs:
                            arrays[name] = array
                    for state in mv.sequence.states if mv.sequence is not None else ():
                        arrays.setdefault(state.input_name, state.initial)
                    pending.append(PendingRequest(request, None, arrays, batch_size))
                try:
                    _execute(mv, instance, pending, takes_requests)
                except Exception as err:
                    message = err.message if isinstance(err, ServerError) else \
                        f"{type(err).__name__}: {err}"
                    raise ServerError(
                        Code.INVALID_ARG,
                        f"failed to run warmup sample '{sample.name}': {message}; ") from None
    if samples:
        log.info("model '%s' version %d: warmup done on %d instance(s)", mv.name, mv.version,
                 len(mv.instances))


def _execute(mv, instance, pending, takes_requests: bool) -> None:
    if takes_requests:
        results = instance.backend.execute_requests(pending)
        if len(results) != len(pending):
            raise ServerError(Code.INTERNAL,
                              f"{len(results)} results for {len(pending)} warmup requests")
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        for p, result in zip(pending, results):
            outputs, params = result if type(result) is tuple else (result, None)
            mv._request_response(p, outputs, params)  # output checks, as for a real request
        return
    inputs = mv._gather_inputs(pending)
    outputs = instance.backend.execute(inputs)
    total = sum(p.batch_size for p in pending)
    mv._scatter_outputs(pending, outputs, total)
