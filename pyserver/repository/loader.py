"""Model repository: finding models and version folders, and loading a model
(config, backend instances, scheduler) into a ModelVersion per version."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyserver._proto import ModelConfig
from pyserver.backends import DEFAULT_BACKEND_DIRECTORY, BackendSearch, find_backend, instance_class
from pyserver.backends._common import compute_cores, instance_device, instance_host_placement
from pyserver.backends._cuda import visible_gpus
from pyserver.backends.base import Capability, capabilities_of
from pyserver.config import (
    CONFIG_FILENAME,
    DEFAULT_MODEL_FILENAMES,
    FIRST_RESPONSE_BUCKETS_MS,
    FIRST_RESPONSE_FAMILY,
    ConfigError,
    active_instance_count,
    backend_name,
    instance_count,
    load_config_file,
    normalize,
)
from pyserver.kernel.context import ServerContext
from pyserver.kernel.errors import Code, ServerError, VersionLoadError
from pyserver.model import warmup
from pyserver.model.custom_batching import find_strategy
from pyserver.model.ensemble import EnsemblePlan
from pyserver.model.version import ModelVersion
from pyserver.runtime.host_policy import HostPolicyError

log = logging.getLogger("pyserver")


@dataclass
class ModelDir:
    name: str
    path: Path


def scan(repositories: list[str], listed: dict[str, dict[str, Path]] | None = None
         ) -> tuple[dict[str, ModelDir], dict[str, str]]:
    """Every model folder in every repository. Returns (models, errors); a name
    found in two repositories is an error for that name only. ``listed``: the
    models of some repositories as already known ({repository: {name: local
    folder}}: those in object storage, through their local copies)."""
    found: dict[str, list[Path]] = {}
    for repo in repositories:
        if listed is not None and repo in listed:
            for name, path in listed[repo].items():
                found.setdefault(name, []).append(path)
            continue
        root = Path(repo)
        if not root.exists():  # Triton's filesystem layer: a stat that fails
            raise ServerError(Code.INTERNAL, f"failed to stat file {repo}")
        if not root.is_dir():
            raise ServerError(Code.INVALID_ARG, f"model repository '{repo}' is not a directory")
        for entry in sorted(root.iterdir()):
            if entry.is_dir() and not entry.name.startswith("."):
                found.setdefault(entry.name, []).append(entry)
    models, errors = {}, {}
    for name, paths in found.items():
        if len(paths) > 1:
            errors[name] = "model appears in two or more repositories"
        else:
            models[name] = ModelDir(name, paths[0])
    return models, errors


def version_folders(model_path: Path) -> dict[int, Path]:
    """Numbered version folders; names that are not plain integers (or are
    zero-prefixed, or zero) are ignored, as Triton does."""
    out = {}
    for entry in model_path.iterdir():
        name = entry.name
        if entry.is_dir() and name.isdigit() and not name.startswith("0"):
            out[int(name)] = entry
    return out


def select_versions(config, available: dict[int, Path]) -> list[int]:
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    numbers = sorted(available)
    if which == "all":
        return numbers
    if which == "specific":
        return [v for v in policy.specific.versions if v in available]
    n = policy.latest.num_versions or 1
    return numbers[-n:] if numbers else []


@dataclass
class LoadOptions:
    """Server-wide choices that shape how a model's config is completed."""
    auto_complete: bool = True
    default_max_batch_size: int = 4
    summary_latencies: bool = False  # keep samples for Prometheus summaries
    config_name: str = ""  # --model-config-name: <model>/configs/<name>.pbtxt when present
    histogram_latencies: bool = False  # Triton's first-response histogram
    # --backend-directory: where Triton backend libraries and Python-based
    # backends are found (BACKEND_DIR/NAME/)
    backend_directory: str = DEFAULT_BACKEND_DIRECTORY
    # --backend-config, by backend name ("" for the global settings)
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


CONFIGS_FOLDER = "configs"


def config_path(model_path: Path, config_name: str = "") -> Path:
    """The config file a model loads from: ``configs/<config_name>.pbtxt``
    when --model-config-name is set and that file exists, else config.pbtxt."""
    if config_name:
        custom = model_path / CONFIGS_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_path / CONFIG_FILENAME


def _auto_complete_is_noop(backend: str, config) -> bool:
    """ONNX Runtime's auto-complete fills inputs, outputs and batching only
    when the config declares neither inputs nor outputs (and a missing
    backend name, already known here): with both declared it would only
    open the model file once more (a session per model, ~2 ms), which the
    instances do anyway."""
    return backend == "onnxruntime" and bool(config.input) and bool(config.output) \
        and bool(config.platform or config.backend)


def _guess_backend(model: ModelDir) -> str:
    """For a model folder without config.pbtxt: the backend whose default
    model file is in the highest version folder."""
    available = version_folders(model.path)
    if available:
        latest = available[max(available)]
        for backend, filename in DEFAULT_MODEL_FILENAMES.items():
            if (latest / filename).exists():
                return backend
    return ""


def load_model(model: ModelDir, context: ServerContext, config_override=None,
               options: LoadOptions | None = None, sharing: int = 1,
               keep: dict[int, ModelVersion] | None = None) -> list[ModelVersion]:
    """Loads every version the policy selects (from ``config_override``, a
    ModelConfig, instead of config.pbtxt when given). Raises ServerError
    with a message that says what is wrong and where. ``context``: the
    server's services, handed to each version and to the backends that
    declare Capability.SERVER_CONTEXT.

    ``sharing`` is how many models share the cores: a backend's default
    thread count per instance (e.g. ONNX Runtime's intra-op threads) is the
    instance's share of the cores left to model execution (compute_cores:
    all but the event loop's), so that many models and instances do not
    oversubscribe them (a config's own thread settings win).

    ``keep``: loaded versions whose files did not change; each is returned
    as it is (not rebuilt) when the new config equals its config, as Triton
    leaves an unmodified version serving when a model is polled again."""
    options = options or LoadOptions()
    config, backend, available, filename, found = prepare_config(model, config_override, options)
    if backend == "ensemble":
        return _load_ensemble(model, config, available, context, options)
    cls = instance_class(found, config)
    file_required = getattr(found, "model_file_required", True)
    versions = select_versions(config, available)
    if not versions:
        raise ServerError(Code.UNAVAILABLE,
                          f"model '{model.name}': no version folder to load in {model.path} "
                          "(expected e.g. 1/" + DEFAULT_MODEL_FILENAMES.get(backend, "model") + ")")
    samples = warmup.build_samples(config, model.path)
    started = time.monotonic()
    instance_total = active_instance_count(config)
    # Built-in backends take the server's context; a backend registered by
    # an application may not know of it.
    extra = {"context": context} if Capability.SERVER_CONTEXT in capabilities_of(cls) else {}
    threads = max(1, compute_cores() // max(1, instance_total * max(1, sharing)))
    loaded = []
    try:
        for number in versions:
            kept = (keep or {}).get(number)
            if kept is not None and kept.config == config:
                loaded.append(kept)
                continue
            try:
                version_dir = available[number]
                model_path = version_dir / filename
                if file_required and not model_path.exists():
                    raise ServerError(Code.UNAVAILABLE, f"model '{model.name}' version {number}: "
                                                        f"{model_path} not found")
                strategy = find_strategy(config, version_dir, model.path,
                                         Path(options.backend_directory) / backend)
                mv = ModelVersion(model.name, number, config, str(version_dir), context, strategy)
                _enable_latency_metrics(mv, config, options)
                loaded.append(mv)
                for group in config.instance_group:
                    for i in range(instance_count(group)):
                        name = f"{group.name}_{i}"
                        device = instance_device(config, name)
                        # made under its host policy, as Triton makes an
                        # instance: what the backend starts inherits it
                        placement = instance_host_placement(config, name, context.host_policies)
                        try:
                            with placement.applied():
                                made = cls(str(model_path), config, name, device, threads,
                                           **extra)
                        except HostPolicyError as err:
                            raise ServerError(Code.INTERNAL, f"model '{model.name}' instance "
                                                             f"'{name}': {err}") from None
                        mv.add_instance(name, made, group, placement)
                warmup.run(mv, samples)  # READY only once every instance ran its samples
            except ServerError as err:  # this version's (Triton's index names it)
                raise VersionLoadError(number, err.code, err.message) from None
    except BaseException:
        for mv in loaded:
            if (keep or {}).get(mv.version) is not mv:
                mv.stop()
        raise
    duration = time.monotonic() - started
    for mv in loaded:
        if (keep or {}).get(mv.version) is not mv:
            mv.load_duration_s = duration
    return loaded


def _enable_latency_metrics(mv, config, options: LoadOptions) -> None:
    """The optional latency metrics (--metrics-config): summaries, and the
    first-response histogram with the buckets the config's model_metrics
    sets for it (Triton's defaults otherwise)."""
    if options.summary_latencies:
        mv.stats.enable_summaries()
    if not options.histogram_latencies:
        return
    buckets = FIRST_RESPONSE_BUCKETS_MS
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family == FIRST_RESPONSE_FAMILY:
            buckets = tuple(control.histogram_options.buckets)
        else:
            log.warning("model '%s': metric family '%s' in 'metric_identifier' is not a "
                        "customizable metric (only %s is)", config.name, family,
                        FIRST_RESPONSE_FAMILY)
    decoupled = config.model_transaction_policy.decoupled
    mv.stats.enable_first_response_histogram(buckets, by_caller=decoupled)
    mv.first_response_by_stream = decoupled  # see ResponseStream.first_response


def _load_ensemble(model: ModelDir, config, available: dict, context: ServerContext,
                   options: LoadOptions) -> list[ModelVersion]:
    """An ensemble's versions: its plan checked, no instances (its steps run
    on their own models' instances)."""
    plan = EnsemblePlan(config)
    versions = select_versions(config, available)
    if not versions:
        raise ServerError(Code.UNAVAILABLE,
                          f"ensemble '{model.name}': no version folder to load in {model.path} "
                          "(an ensemble needs an empty one, e.g. 1/)")
    loaded = []
    for number in versions:
        mv = ModelVersion(model.name, number, config, str(available[number]), context)
        mv.ensemble = plan
        _enable_latency_metrics(mv, config, options)
        loaded.append(mv)
    return loaded


def prepare_config(model: ModelDir, config_override=None, options: LoadOptions | None = None):
    """The model's complete config (read, auto-completed, normalized), its
    backend name, version folders, model file name and backend class (None
    for an ensemble; found by backends.find_backend, once). Runs no model."""
    options = options or LoadOptions()
    config_file = config_path(model.path, options.config_name)
    if config_override is not None:
        config = ModelConfig()
        config.CopyFrom(config_override)
    elif config_file.exists():
        config = load_config_file(config_file)
    elif options.auto_complete and _guess_backend(model):
        config = ModelConfig(name=model.name, backend=_guess_backend(model))
    else:
        raise ConfigError(
            f"model '{model.name}': no {CONFIG_FILENAME} in {model.path} (writing one with "
            "platform/backend, inputs and outputs makes it loadable"
            + ("" if options.auto_complete else
               "; auto-complete is disabled, so the file is required") + ")")
    backend = backend_name(config)
    if not backend and options.auto_complete:
        # As Triton's auto-complete: the backend whose default model file
        # the model has (a config file or an override that names none)
        backend = _guess_backend(model)
        if backend:
            config.backend = backend
            backend = backend_name(config)
    if not backend:
        where = "its config override" if config_override is not None else str(config_file)
        raise ConfigError(
            f"model '{model.name}': {where} names no platform or backend "
            "(e.g. platform: \"onnxruntime_onnx\")")
    available = version_folders(model.path)
    if not config.default_model_filename and backend in DEFAULT_MODEL_FILENAMES:
        # Triton's core fills it in for the backends it knows (the config
        # it serves shows it), a backend's own library aside
        config.default_model_filename = DEFAULT_MODEL_FILENAMES[backend]
    filename = config.default_model_filename or "model"
    found = None
    if backend != "ensemble":
        found = find_backend(backend, config.runtime, BackendSearch(
            available[max(available)] if available else None, model.path,
            options.backend_directory, options.backend_config, options.auto_complete,
            options.default_max_batch_size))
    complete = getattr(found, "auto_complete_config", None) \
        if options.auto_complete and found is not None \
        and not _auto_complete_is_noop(backend, config) else None
    if options.auto_complete and complete is not None and available:
        # As Triton: the backend fills what the config leaves out, from the
        # model file of the highest version (which a backend that needs no
        # file of the model's own is handed even when it is not there).
        latest = available[max(available)] / filename
        if latest.exists() or not getattr(found, "model_file_required", True):
            complete(config, str(latest), options.default_max_batch_size)
    config = normalize(config, model.name, visible_gpus())
    return config, backend, available, filename, found
