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

An ensemble with a decoupled step is decoupled itself (as Triton marks it):
it answers through ``Server.submit_stream`` (gRPC streaming), and every
response of the decoupled step runs the steps that depend on it with that
response's tensors, each complete set of ensemble outputs going to the client
as one response; steps that do not depend on it run once. A step may not
consume tensors that come from two different decoupled steps.
"""

from __future__ import annotations

import asyncio

from pyserver.config import ConfigError
from pyserver.engine import now_ns
from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferResponse, InferTensor, RequestedOutput

__all__ = ["EnsemblePlan", "decoupled_steps", "run_ensemble", "run_ensemble_stream",
           "step_versions"]


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


def _step_request(step: EnsembleStep, request: InferRequest, tensors: dict,
                  parent: int) -> InferRequest:
    """The request of one step; ``parent``: the ensemble request's trace id
    (0: not traced), under which the step is traced."""
    inputs = []
    for model_input, tensor_name in step.inputs.items():
        t = tensors[tensor_name]
        inputs.append(InferTensor(model_input, t.datatype, t.shape, t.data))
    return InferRequest(step.model_name, step.model_version, request.id, inputs,
                        [RequestedOutput(name) for name in step.outputs],
                        priority=request.priority, timeout_us=request.timeout_us,
                        parent_trace=parent)


def _take_outputs(step: EnsembleStep, response, tensors: dict) -> None:
    for out in response.outputs:
        tensor_name = step.outputs.get(out.name)
        if tensor_name is not None:
            tensors[tensor_name] = out


async def _run_step(server, plan: EnsemblePlan, step: EnsembleStep, request: InferRequest,
                    tensors: dict, parent: int) -> None:
    sub = _step_request(step, request, tensors, parent)
    limit = plan.step_limit(step)
    if limit is None:
        response = await server.submit(sub)
    else:
        async with limit:
            response = await server.submit(sub)
    _take_outputs(step, response, tensors)


async def run_ensemble(server, mv, request: InferRequest, trace=None) -> InferResponse:
    """Runs one (validated) request through the ensemble ``mv``; ``trace``:
    its trace record, finished here, its steps traced under it."""
    start = now_ns()
    plan: EnsemblePlan = mv.ensemble
    tensors = {t.name: t for t in request.inputs}
    parent = trace["id"] if trace is not None else 0
    response = None
    try:
        for wave in plan.waves:
            if len(wave) == 1:
                await _run_step(server, plan, wave[0], request, tensors, parent)
            else:
                await asyncio.gather(*(_run_step(server, plan, s, request, tensors, parent)
                                       for s in wave))
        wanted = [o.name for o in request.outputs] or plan.output_names
        outputs = []
        for name in wanted:
            t = tensors[name]
            outputs.append(InferTensor(name, t.datatype, t.shape, t.data))
        response = InferResponse(mv.name, mv.version_str, request.id, outputs)
    except asyncio.CancelledError:
        mv.stats.record_failure(now_ns() - start, "CANCELED")
        raise
    except BaseException as err:
        mv.stats.record_failure(now_ns() - start, "BACKEND")
        raise _step_error(mv.name, err) from None
    finally:
        if trace is not None:
            server.tracer.finish(trace, now_ns(), response)
    mv.stats.record_success(now_ns() - start)
    return response


def step_versions(server, plan: EnsemblePlan) -> list:
    """The model version each step would run on now (None: not loaded; the
    request then fails at that step, as any other)."""
    found = []
    for step in plan.steps:
        try:
            found.append(server._resolve(step.model_name, step.model_version))
        except ServerError:
            found.append(None)
    return found


def decoupled_steps(server, mv) -> set[int]:
    """The indices of the ensemble's steps whose (loaded) models are
    decoupled; ServerError with Triton's text when a step would consume
    tensors that come from two different decoupled steps."""
    plan: EnsemblePlan = mv.ensemble
    versions = step_versions(server, plan)
    decoupled = {i for i, v in enumerate(versions) if v is not None and v.decoupled}
    if not decoupled:
        return decoupled
    lineage: dict[str, int | None] = {}  # ensemble tensor -> the decoupled step it comes from
    for wave in plan.waves:
        for step in wave:
            origins = {lineage.get(t) for t in step.inputs.values()} - {None}
            if len(origins) > 1:
                raise ServerError(Code.INVALID_ARG,
                                  f"in ensemble {mv.name}, step of model '{step.model_name}' "
                                  "receives inputs originated from different decoupled models")
            origin = step.index if step.index in decoupled else next(iter(origins), None)
            for tensor in step.outputs.values():
                lineage[tensor] = origin
    return decoupled


async def _step_responses(server, step: EnsembleStep, sub: InferRequest):
    """The responses of a decoupled step model, as they come."""
    queue: asyncio.Queue = asyncio.Queue()
    server.submit_stream(sub, lambda response, error, final: queue.put_nowait(
        (response, error, final)))
    while True:
        response, error, final = await queue.get()
        if error is not None:
            raise error
        if response is not None and response.outputs:
            yield response
        if final:
            return


async def run_ensemble_stream(server, mv, request: InferRequest, stream,
                              decoupled: set[int], trace=None) -> None:
    """Runs one (validated) request through a decoupled ensemble (``decoupled``:
    its decoupled steps, from decoupled_steps): each set of its outputs goes
    to ``stream.push`` as a response, then the final flag (or the error of a
    failing step). ``trace`` as for run_ensemble."""
    start = now_ns()
    plan: EnsemblePlan = mv.ensemble
    wanted = [o.name for o in request.outputs] or plan.output_names
    parent = trace["id"] if trace is not None else 0

    async def run(tensors: dict, done: set) -> None:
        while True:
            ready = [s for s in plan.steps if s.index not in done
                     and all(t in tensors for t in s.inputs.values())]
            plain = [s for s in ready if s.index not in decoupled]
            if plain:  # what needs no decoupled output runs once, here
                await asyncio.gather(*(_run_step(server, plan, s, request, tensors, parent)
                                       for s in plain))
                done.update(s.index for s in plain)
                continue
            if not ready:
                break
            step = ready[0]  # each response runs what depends on it
            forks = []
            sub = _step_request(step, request, tensors, parent)
            limit = plan.step_limit(step)
            if limit is not None:
                await limit.acquire()
            try:
                async for response in _step_responses(server, step, sub):
                    branch = dict(tensors)
                    _take_outputs(step, response, branch)
                    forks.append(asyncio.ensure_future(run(branch, done | {step.index})))
            finally:
                if limit is not None:
                    limit.release()
            await asyncio.gather(*forks)
            return
        if all(name in tensors for name in wanted):
            outputs = [InferTensor(n, tensors[n].datatype, tensors[n].shape, tensors[n].data)
                       for n in wanted]
            stream.push(InferResponse(mv.name, mv.version_str, request.id, outputs))

    try:
        await run({t.name: t for t in request.inputs}, set())
    except asyncio.CancelledError:
        mv.stats.record_failure(now_ns() - start, "CANCELED")
        raise
    except BaseException as err:
        mv.stats.record_failure(now_ns() - start, "BACKEND")
        stream.push(None, _step_error(mv.name, err), True)
        return
    finally:
        if trace is not None:
            server.tracer.finish(trace, now_ns())
    mv.stats.record_success(now_ns() - start)
    stream.push(None, None, True)

