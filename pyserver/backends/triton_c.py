"""Backends built for Triton's C API: a ``libtriton_NAME.so`` that exports
``TRITONBACKEND_*`` entry points, driven through pyserver's own
libtritonserver.so (csrc/src/triton_*.cc, engine/triton_c.pyx).

``library_backend(path, name, backend_config)`` returns the backend class for
one library (the same class for the same path: one TRITONBACKEND_Initialize
per library, as Triton shares a backend object). Its instances share one
TRITONBACKEND_Model per model version; each instance is a
TRITONBACKEND_ModelInstance whose ModelInstanceExecute runs a batch of
requests with the GIL released."""

import json
import logging
import threading
from pathlib import Path

from google.protobuf import json_format

from pyserver._proto import ModelConfig
from pyserver.backends._common import data_type_name, instance_host_placement, instance_placement
from pyserver.backends.base import ANSWERED_LATER, Capability, TimedResults
from pyserver.backends.triton_bls import server_handle
from pyserver.config import config_to_json
from pyserver.engine import triton_c
from pyserver.kernel.errors import Code, ServerError
from pyserver.runtime.settings import escape_log_messages, follow_log_settings

log = logging.getLogger("pyserver")

_lock = threading.Lock()
# TRITONSERVER_InstanceGroupKind of each placement (instance_placement's kinds)
_KIND_CODES = {"KIND_CPU": 1, "KIND_GPU": 2, "KIND_MODEL": 3}
_classes: dict[str, type] = {}


def _log_settings(values: dict) -> None:
    """Backends log what the server's logging settings let through
    (TRITONSERVER_LogIsEnabled: --log-verbose turns their verbose logs on),
    to the --log-file when there is one, in the --log-format layout."""
    triton_c.set_log_levels(values["log_info"], values["log_warning"], values["log_error"],
                            values["log_verbose_level"] > 0)
    try:
        triton_c.set_log_output(values["log_file"], values["log_format"] == "ISO8601",
                                escape_log_messages())
    except ServerError as err:  # the settings refuse the file too, with the reason
        log.debug("backends' log output unchanged: %s", err.message)


follow_log_settings(_log_settings)


def library_backend(library_path: str, backend_name: str,
                    backend_config: dict[str, str]) -> type:
    """The backend class over one Triton backend library."""
    key = str(Path(library_path).resolve())
    with _lock:
        cls = _classes.get(key)
        if cls is None:
            config_json = json.dumps({"cmdline": {k: str(v) for k, v in backend_config.items()}})
            library = triton_c.BackendLibrary(key, backend_name, config_json)
            cls = type(f"TritonCBackend_{backend_name}", (TritonCBackend,),
                       {"library": library, "backend_name": backend_name, "_models": {}})
            _classes[key] = cls
        return cls


def _share_memory_pools(context, gpu: int | None) -> None:
    """The backend memory manager draws on the server's pools, as Triton's
    does: its pinned pool, and the pool of the GPU an instance runs on."""
    host = getattr(context, "host_memory", None)
    if host is not None and host.pinned:
        triton_c.use_pinned_pool(host.pool)
    devices = getattr(context, "device_memory", None)
    if gpu is not None and devices is not None:
        try:
            triton_c.use_device_pool(gpu, devices.pool(gpu))
        except ServerError as err:  # no CUDA, no such GPU: the instance's own load says so
            log.debug("no CUDA memory pool for GPU %d: %s", gpu, err)


def complete_from_backend(config, completed_json: str) -> None:
    """Takes into ``config`` what a backend's ModelSetConfig may change, as
    Triton's core does: max_batch_size, inputs and outputs, a scheduler when
    the config chose none (another than the config's is refused), and
    whether the model is decoupled."""
    completed = ModelConfig()
    try:
        json_format.Parse(completed_json, completed)
    except json_format.ParseError as err:
        raise ServerError(Code.INVALID_ARG, f"model '{config.name}': the configuration its "
                          f"backend set is not a model configuration: {err}") from None
    config.max_batch_size = completed.max_batch_size
    del config.input[:]
    config.input.extend(completed.input)
    del config.output[:]
    config.output.extend(completed.output)
    chosen, offered = config.WhichOneof("scheduling_choice"), \
        completed.WhichOneof("scheduling_choice")
    if chosen is None:
        if offered is not None:
            getattr(config, offered).CopyFrom(getattr(completed, offered))
    elif offered is not None and offered != chosen:
        raise ServerError(Code.INTERNAL, f"model '{config.name}': its backend's auto-complete "
                          f"changed the scheduler from {chosen} to {offered}, which it may not")
    if completed.HasField("model_transaction_policy"):
        config.model_transaction_policy.decoupled = \
            completed.model_transaction_policy.decoupled


def _version_of(version_dir: Path) -> int:
    try:
        return int(version_dir.name)
    except ValueError:
        return 1


class TritonCBackend:
    """One instance of a model served by a Triton C backend library."""

    model_file_required = False
    capabilities = Capability.TAKES_REQUESTS | Capability.SERVER_CONTEXT  # BLS
    library: "triton_c.BackendLibrary"
    backend_name: str
    _models: dict  # version folder -> [triton_c.Model, instances using it]

    def __init__(self, model_path: str, config, instance_name: str, device: str,
                 threads: int, context=None):
        version_dir = Path(model_path).parent
        self.model_name = config.name
        self.decoupled = config.model_transaction_policy.decoupled
        self._mv = None
        # a request the backend still holds when Execute returns is answered
        # through the server when it sends its response, and the instance
        # takes its next batch meanwhile (as Triton's does); without a server
        # (tools, warmup) the instance waits for it
        self._answer_late = getattr(context, "answer_late", None)
        self._on_late = self._late if self._answer_late is not None else None
        self._wait_for_held = True  # close() waits for them until kill()
        self._outputs = [o.name.encode() for o in config.output]
        self._states = [(st.input_name, st.output_name) for st in config.sequence_batching.state]
        self._key = str(version_dir)
        with _lock:
            entry = self._models.get(self._key)
            if entry is None:
                model = triton_c.Model(self.library, config.name, _version_of(version_dir),
                                       str(version_dir.parent),
                                       json.dumps(config_to_json(config)), False,
                                       server_handle(context))
                entry = self._models[self._key] = [model, 0]
            entry[1] += 1
        metrics = getattr(context, "custom_metrics", None)
        if metrics is not None:  # the families backends make, on /metrics
            metrics.add_source(triton_c.metrics_snapshot)
        kind, device_id = instance_placement(config, instance_name)
        gpu = kind == "KIND_GPU"
        _share_memory_pools(context, device_id if gpu else None)
        try:
            placement = instance_host_placement(config, instance_name,
                                                getattr(context, "host_policies", None))
            self.instance = triton_c.Instance(entry[0], instance_name, _KIND_CODES[kind],
                                              device_id,
                                              # Triton's layout: compact, settings by name
                                              json.dumps(placement.message(), sort_keys=True,
                                                         separators=(",", ":")),
                                              [out for _, out in self._states], config.name)
        except BaseException:
            self._release_model()
            raise
        self.instance.set_output_rules(config.name, config.max_batch_size > 0, [
            (t.name, list(t.reshape.shape) if t.HasField("reshape") else None, list(t.dims))
            for t in config.output])
        self.instance.set_bf16_inputs(
            [t.name for t in config.input if data_type_name(t.data_type) == "TYPE_BF16"])
        if self.instance.has_ready_check:  # asked on each model-ready request
            self.capabilities = type(self).capabilities | Capability.READINESS

    @classmethod
    def auto_complete_config(cls, config, model_path: str, default_max_batch_size: int) -> None:
        """Triton's auto-completion by a backend library: the model is
        initialized once told auto-complete is on (TRITONBACKEND_ModelAutoCompleteConfig),
        and what it set with TRITONBACKEND_ModelSetConfig is read back, under
        Triton's rules (complete_from_backend). That model is finalized again:
        its instances are built on a model initialized with the completed
        config, so a backend that loads in ModelInitialize loads twice.
        (``default_max_batch_size`` reaches the library as its
        default-max-batch-size backend setting.)"""
        version_dir = Path(model_path).parent
        if not config.name:
            config.name = version_dir.parent.name
        before = json.dumps(config_to_json(config))
        model = triton_c.Model(cls.library, config.name, _version_of(version_dir),
                               str(version_dir.parent), before, True)
        try:
            after = model.config_json
        finally:
            model.close()
        if after != before:
            complete_from_backend(config, after)

    def is_ready(self, timeout: float = 0.0) -> bool:
        """TRITONBACKEND_ModelInstanceReady, as Triton asks it for each
        model-ready request: ready unless the backend returns an error."""
        instance = getattr(self, "instance", None)
        why = instance.ready() if instance is not None else "the instance is closed"
        if why is not None:
            log.debug("model '%s' instance is not ready: %s", self.model_name, why)
        return why is None

    def attach(self, mv) -> None:
        """Called by the ModelVersion this instance serves (decoupled
        answers, per-response statistics)."""
        self._mv = mv
        self.instance.set_stats(mv.stats)
        if mv.scheduler is not None:
            self.instance.set_scheduler(mv.scheduler)
        self.instance.set_tracer(getattr(mv.context, "tracer", None))

    def execute_requests(self, pending: list) -> list:
        """One result per request: its outputs, an error, or None for a
        decoupled request (its responses go through its stream as the
        backend sends them, also after Execute returned). The results carry
        the times the backend reported for the batch, if it did."""
        if self.decoupled:
            sent, times, states = self.instance.execute(pending, self._outputs, self._respond)
            results = TimedResults(sent)
            if states is not None:  # kept by the server, as a non-decoupled model's outputs
                results.states = [self._states_of(p, updated)
                                  for p, updated in zip(pending, states)]
        else:
            sent, times, states = self.instance.execute(pending, self._outputs, None,
                                                        self._on_late)
            results = TimedResults(ANSWERED_LATER if responses is None else self._single(responses)
                                   for responses in sent)
            if states is not None:
                self._add_states(pending, results, states)
        if times is not None:
            results.times = times
        return results

    def _add_states(self, pending: list, results: list, states: list) -> None:
        """Each answered request's implicit states beside its outputs (the
        server keeps them for its sequence): what the backend updated, else
        what it was given (Triton: a state not updated stays as it was)."""
        for i, (p, updated) in enumerate(zip(pending, states)):
            outputs = results[i][0] if type(results[i]) is tuple else results[i]
            if type(outputs) is not dict:
                continue  # failed: its sequence keeps its states
            outputs.update(self._states_of(p, updated))

    def _states_of(self, p, updated: dict) -> dict:
        """A request's implicit states after its run: what the backend
        updated, else what it was given."""
        states = {}
        for input_name, output_name in self._states:
            value = updated.get(output_name)
            states[output_name] = p.arrays[input_name] if value is None else value
        return states

    def _single(self, responses: list):
        for outputs, error, _final, parameters in responses:
            if error is not None:
                return ServerError(Code(error[0]), error[1])
            if outputs is not None:
                return outputs if parameters is None else (outputs, parameters)
        return ServerError(Code.INTERNAL, f"model '{self.model_name}' sent no response")

    def _late(self, p, sent: list) -> None:
        """A request answered after its batch's Execute returned, on the
        thread that sent its final response (or released it)."""
        result = self._single(sent)
        if type(result) is not ServerError:
            outputs, parameters = result if type(result) is tuple else (result, None)
            try:
                result = self._mv._request_response(p, outputs, parameters)
            except ServerError as err:
                result = err
            except Exception as err:  # answered all the same: a request never hangs
                result = ServerError(Code.INTERNAL, f"{type(err).__name__}: {err}")
        self._answer_late(p, result)

    def _respond(self, p, sent) -> None:
        """A decoupled request's response, on the thread that sent it."""
        if sent is None:
            p.future.push(None, ServerError(
                Code.INTERNAL, f"model '{self.model_name}' released a request without "
                "sending the final response flag"), True)
            return
        outputs, error, final, parameters = sent
        response = None if outputs is None else self._mv._request_response(p, outputs, parameters)
        err = None if error is None else ServerError(Code(error[0]), error[1])
        p.future.push(response, err, final)

    def kill(self) -> None:
        """The server's exit timeout passed: close() no longer waits for the
        requests the backend still holds (their instance and model are then
        left unfinalized, as Triton exits then without unloading)."""
        self._wait_for_held = False

    def close(self) -> None:
        """Finalizes the instance once its backend released the requests it
        still holds (an unload waits for them, as Triton's does), then the
        model with its last instance."""
        instance, self.instance = getattr(self, "instance", None), None
        if instance is not None and instance.close(self._wait_for_held):
            self._release_model()

    def memory_usage(self) -> list:
        """What the backend reported this instance and its model hold, as
        (who reported, [(memory type name, id, bytes)]) parts: the model is shared
        by its instances, so the caller counts each reporter once."""
        parts = []
        instance = getattr(self, "instance", None)
        if instance is not None:
            parts.append((id(instance), instance.memory_usage()))
        with _lock:
            entry = self._models.get(self._key)
        if entry is not None:
            parts.append((id(entry[0]), entry[0].memory_usage()))
        return parts

    def _release_model(self) -> None:
        with _lock:
            entry = self._models.get(self._key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._models[self._key]
                    entry[0].close()
