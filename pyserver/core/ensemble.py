"""Ensembles (``platform: "ensemble"``): a pipeline of other models wired by
``ensemble_scheduling.step`` input and output maps.

The plan is checked when the ensemble loads: every step input is an ensemble
input or another step's output, no tensor is produced twice, every ensemble
output is produced, every ensemble input is used, and there is no cycle.
A request runs on the event loop with no thread of its own: each step is
submitted through ``Server.submit`` (so it is batched, cached and counted by
its own model) as soon as every tensor it consumes exists, steps without a
dependency between them run concurrently, and the ensemble answers with its
outputs. A failing step fails the request with its code and the message
prefixed ``in ensemble '<name>', ``, as Triton words it. Composing models are
looked up per request, so a reloaded step model is used at once.
"""

from __future__ import annotations

import asyncio

from pyserver.core.config import ConfigError
from pyserver.core.errors import Code, ServerError
from pyserver.core.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from pyserver.engine import now_ns

__all__ = ["EnsemblePlan", "run_ensemble"]


class EnsembleStep:
    __slots__ = ("index", "model_name", "model_version", "inputs", "outputs")

    def __init__(self, index: int, step):
        self.index = index
        self.model_name = step.model_name
        self.model_version = "" if step.model_version < 0 else str(step.model_version)
        self.inputs = dict(step.input_map)    # model input -> ensemble tensor
        self.outputs = dict(step.output_map)  # model output -> ensemble tensor


class EnsemblePlan:
    """The steps of an ensemble config, in waves: every step of a wave
    consumes only ensemble inputs and outputs of earlier waves."""

    def __init__(self, config):
        name = config.name
        where = f"ensemble '{name}'"
        scheduling = config.ensemble_scheduling
        if not scheduling.step:
            raise ConfigError(f"{where} must have at least one step in ensemble_scheduling")
        self.steps = [EnsembleStep(i, s) for i, s in enumerate(scheduling.step)]
        inputs = {t.name for t in config.input}
        produced: dict[str, int] = {}
        for step in self.steps:
            if not step.model_name:
                raise ConfigError(f"{where}: step {step.index} names no model_name")
            for tensor in step.outputs.values():
                if tensor in produced or tensor in inputs:
                    raise ConfigError(
                        f"{where}: ensemble tensor '{tensor}' can appear in an output map only "
                        f"once (step {step.index}, model '{step.model_name}')")
                produced[tensor] = step.index
        for step in self.steps:
            for model_input, tensor in step.inputs.items():
                if tensor not in inputs and tensor not in produced:
                    raise ConfigError(
                        f"{where}: step {step.index} (model '{step.model_name}') maps input "
                        f"'{model_input}' from '{tensor}', which is neither an ensemble input "
                        "nor an output of any step")
        for t in config.output:
            if t.name not in produced:
                raise ConfigError(f"{where}: ensemble output '{t.name}' is not produced by any step")
        used = {tensor for step in self.steps for tensor in step.inputs.values()}
        for t in config.input:
            if t.name not in used:
                raise ConfigError(f"{where}: ensemble input '{t.name}' is not used by any step")
        self.waves: list[list[EnsembleStep]] = []
        available = set(inputs)
        remaining = list(self.steps)
        while remaining:
            wave = [s for s in remaining if all(t in available for t in s.inputs.values())]
            if not wave:
                names = ", ".join(f"'{s.model_name}'" for s in remaining)
                raise ConfigError(f"{where}: steps {names} depend on each other in a cycle")
            self.waves.append(wave)
            for s in wave:
                available.update(s.outputs.values())
            remaining = [s for s in remaining if s not in wave]
        self.output_names = [t.name for t in config.output]
        # max_inflight_requests: requests in flight at each step, across all
        # of this ensemble's requests (0: no limit); upstream steps wait
        self.max_inflight = int(scheduling.max_inflight_requests)
        self._step_limits: list | None = None

    def step_limit(self, step: "EnsembleStep"):
        """The step's semaphore under max_inflight_requests, else None."""
        if not self.max_inflight:
            return None
        if self._step_limits is None:  # made on the event loop that runs the steps
            self._step_limits = [asyncio.Semaphore(self.max_inflight) for _ in self.steps]
        return self._step_limits[step.index]

    def model_names(self) -> set[str]:
        return {s.model_name for s in self.steps}


def _step_error(ensemble: str, err: BaseException) -> ServerError:
    if isinstance(err, ServerError):
        return ServerError(err.code, f"in ensemble '{ensemble}', {err}")
    return ServerError(Code.INTERNAL, f"in ensemble '{ensemble}', {type(err).__name__}: {err}")


async def _run_step(server, plan: EnsemblePlan, step: EnsembleStep, request: InferRequest,
                    tensors: dict) -> None:
    inputs = []
    for model_input, tensor_name in step.inputs.items():
        t = tensors[tensor_name]
        inputs.append(InferTensor(model_input, t.datatype, t.shape, t.data))
    sub = InferRequest(step.model_name, step.model_version, request.id, inputs,
                       [RequestedOutput(name) for name in step.outputs],
                       priority=request.priority, timeout_us=request.timeout_us)
    limit = plan.step_limit(step)
    if limit is None:
        response = await server.submit(sub)
    else:
        async with limit:
            response = await server.submit(sub)
    for out in response.outputs:
        tensor_name = step.outputs.get(out.name)
        if tensor_name is not None:
            tensors[tensor_name] = out


async def run_ensemble(server, mv, request: InferRequest) -> InferResponse:
    """Runs one (validated) request through the ensemble ``mv``."""
    start = now_ns()
    plan: EnsemblePlan = mv.ensemble
    tensors = {t.name: t for t in request.inputs}
    try:
        for wave in plan.waves:
            if len(wave) == 1:
                await _run_step(server, plan, wave[0], request, tensors)
            else:
                await asyncio.gather(*(_run_step(server, plan, s, request, tensors)
                                       for s in wave))
        wanted = [o.name for o in request.outputs] or plan.output_names
        outputs = []
        for name in wanted:
            t = tensors[name]
            outputs.append(InferTensor(name, t.datatype, t.shape, t.data))
    except asyncio.CancelledError:
        mv.stats.record_failure(now_ns() - start, "CANCELED")
        raise
    except BaseException as err:
        mv.stats.record_failure(now_ns() - start, "BACKEND")
        raise _step_error(mv.name, err) from None
    mv.stats.record_success(now_ns() - start)
    return InferResponse(mv.name, mv.version_str, request.id, outputs)
