"""Server and Options: Triton's in-process server object over pyserver's
Server, which runs on a loop thread of its own (ServerHost). Also the
custom-metric API (MetricFamily, Metric) over the server's metric store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from pyserver.inprocess.enums import (
    InstanceGroupKind,
    LogFormat,
    MetricFormat,
    MetricKind,
    ModelControlMode,
    RateLimitMode,
)
from pyserver.inprocess.errors import (
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    api_error,
)
from pyserver.inprocess.host import ServerHost
from pyserver.inprocess.model import Model
from pyserver.kernel.errors import ServerError
from pyserver.runtime import settings
from pyserver.runtime.custom_metrics import CustomMetricError, CustomMetrics

__all__ = ["Metric", "MetricFamily", "ModelDictionary", "ModelLoadDeviceLimit", "Options",
           "RateLimiterResource", "Server"]

_CONTROL_MODES = {ModelControlMode.NONE: "none", ModelControlMode.POLL: "poll",
                  ModelControlMode.EXPLICIT: "explicit"}


@dataclass(slots=True)
class RateLimiterResource:
    name: str
    count: int
    device: int


@dataclass(slots=True)
class ModelLoadDeviceLimit:
    kind: InstanceGroupKind
    device: int
    fraction: float


@dataclass(slots=True)
class Options:
    """The server's options, with Triton's names and defaults; checked by
    ``Server.start()``."""

    model_repository: str | list[str] = field(default_factory=list)
    server_id: str = "triton"
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    strict_model_config: bool = False

    rate_limiter_mode: RateLimitMode = RateLimitMode.OFF
    rate_limiter_resources: list[RateLimiterResource] = field(default_factory=list)

    pinned_memory_pool_size: int = 1 << 28
    cuda_memory_pool_sizes: dict[int, int] = field(default_factory=dict)

    cache_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache_directory: str = "/opt/tritonserver/caches"

    min_supported_compute_capability: float = 6.0

    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: int = 30
    buffer_manager_thread_count: int = 0
    model_load_thread_count: int = 4
    model_load_retry_count: int = 0
    model_namespacing: bool = False
    enable_peer_access: bool = True

    log_file: Optional[str] = None
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: LogFormat = LogFormat.DEFAULT
    log_verbose: int = 0

    metrics: bool = True
    gpu_metrics: bool = True
    cpu_metrics: bool = True
    metrics_interval: int = 2000

    backend_directory: str = "/opt/tritonserver/backends"
    repo_agent_directory: str = "/opt/tritonserver/repoagents"
    model_load_device_limits: list[ModelLoadDeviceLimit] = field(default_factory=list)
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    host_policies: dict[str, dict[str, str]] = field(default_factory=dict)
    metrics_configuration: dict[str, dict[str, str]] = field(default_factory=dict)

    def _server_arguments(self) -> dict:
        """pyserver Server's keyword arguments for these options. TypeError
        for a value of the wrong type (as Triton's binding raises),
        InvalidArgumentError or UnsupportedError for one it refuses."""
        _typed("server_id", self.server_id, str)  # checked in the order Triton sets them
        if self.model_repository is None:
            raise InvalidArgumentError("Model repository must be specified.")
        repositories = self.model_repository if isinstance(self.model_repository, list) \
            else [self.model_repository]
        for path in repositories:
            if not isinstance(path, str):
                raise TypeError(f"model_repository: expected str, got {type(path).__name__}")
        if not repositories:
            raise InvalidArgumentError("Model repository must be specified.")
        for name in ("strict_model_config", "exit_on_error", "strict_readiness",
                     "model_namespacing", "log_info", "log_warn", "log_error", "metrics"):
            _typed(name, getattr(self, name), bool)
        for name in ("exit_timeout", "model_load_thread_count", "model_load_retry_count",
                     "pinned_memory_pool_size", "log_verbose", "metrics_interval"):
            value = getattr(self, name)
            _typed(name, value, int)
            if value < 0:
                raise TypeError(f"{name}: expected an unsigned integer, got {value}")
        if self.model_namespacing:
            raise UnsupportedError("model namespacing is not supported by this server")
        mode = _CONTROL_MODES.get(self.model_control_mode)
        if mode is None:
            raise TypeError(f"model_control_mode: expected a ModelControlMode, got "
                            f"{self.model_control_mode!r}")
        cache_bytes = 0
        for name, cache_settings in self.cache_config.items():
            if name != "local":
                raise InvalidArgumentError(f"unsupported cache '{name}': this server has the "
                                           "'local' cache")
            cache_bytes = int(cache_settings.get("size", 0))
        default_mbs = 4
        for backend_settings in self.backend_configuration.values():
            if "default-max-batch-size" in backend_settings:
                default_mbs = int(backend_settings["default-max-batch-size"])
        return dict(
            model_repository=list(repositories), server_id=self.server_id,
            model_control_mode=mode, load_models=list(self.startup_models),
            auto_complete_config=not self.strict_model_config,
            default_max_batch_size=default_mbs,
            rate_limit="execution_count" if self.rate_limiter_mode == RateLimitMode.EXEC_COUNT
            else "off",
            rate_limit_resources=[(r.name, r.device, r.count)
                                  for r in self.rate_limiter_resources],
            pinned_memory_pool_byte_size=self.pinned_memory_pool_size,
            cuda_memory_pool_byte_size=dict(self.cuda_memory_pool_sizes) or None,
            response_cache_byte_size=cache_bytes, exit_on_error=self.exit_on_error,
            strict_readiness=self.strict_readiness,
            model_load_thread_count=self.model_load_thread_count,
            model_load_retry_count=self.model_load_retry_count,
            backend_directory=self.backend_directory,
            backend_config={name: {k: str(v) for k, v in settings.items()}
                            for name, settings in self.backend_configuration.items()},
            host_policies={name: {k: str(v) for k, v in policy.items()}  # the server checks them
                           for name, policy in self.host_policies.items()},
            # poll mode polls when asked (poll_model_repository), as Triton's API does
            repository_poll_secs=0,
        )

    def _log_settings(self) -> dict:
        # a level turns on the levels below it, as Triton cascades them
        info = self.log_info or self.log_verbose > 0
        warn = self.log_warn or info
        error = self.log_error or warn
        settings = {"log_info": info, "log_warning": warn, "log_error": error,
                    "log_format": "ISO8601" if self.log_format == LogFormat.ISO8601 else "default",
                    "log_verbose_level": int(self.log_verbose)}
        if self.log_file:
            settings["log_file"] = self.log_file
        return settings


def _typed(name: str, value, kind) -> None:
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise TypeError(f"{name}: expected {kind.__name__}, got {type(value).__name__}")


class ModelDictionary(dict):
    """``Server.models()``: {(name, version): Model}; indexed by a name
    alone it gives that model at version -1."""

    def __init__(self, server: Server, models: list[Model]):
        super().__init__()
        for model in models:
            self[(model.name, model.version)] = model
        self._server = server
        self._model_names = {key[0] for key in self.keys()}

    def __getitem__(self, key):
        if isinstance(key, tuple):
            try:
                return dict.__getitem__(self, key)
            except KeyError:
                raise KeyError(f"Unknown Model: {key}") from None
        if key in self._model_names:
            return Model(self._server, name=key, version=-1)
        raise KeyError(f"Unknown Model: {key}")


class Server:
    """An in-process server: ``Server(Options(...))`` or
    ``Server(model_repository=..., ...)``, then ``start()``."""

    _UNLOADED_STATES = (None, "UNAVAILABLE")

    def __init__(self, options: Optional[Options] = None, **kwargs):
        self.options: Options = options if options is not None else Options(**kwargs)
        self._host: ServerHost | None = None
        self._metrics = None  # the registry metrics() renders, made on first use

    # -- lifecycle -------------------------------------------------------------

    def start(self, wait_until_ready: bool = False, polling_interval: float = 0.1,
              timeout: Optional[float] = None) -> Server:
        """Starts the server and loads its models (all of them, or the
        startup models in explicit mode); returns the server."""
        if self._host is not None:
            raise InvalidArgumentError("Server already started")
        from pyserver.server.server import Server as CoreServer

        arguments = self.options._server_arguments()
        logging_before = settings.LoggerState()
        try:
            core = CoreServer(**arguments)
            core.log_settings(self.options._log_settings())
            if not self.options.log_file:  # Triton's log goes to stderr then
                settings.log_to_console_if_unconfigured(core.log_settings()["log_format"])
            host = ServerHost(core)
            host.start()
        except BaseException as e:
            logging_before.restore()
            if isinstance(e, ServerError):
                raise api_error(e) from None
            raise
        self._host = host
        self._logging_before = logging_before
        started = time.monotonic()
        while wait_until_ready and not self.ready() and (
                timeout is None or time.monotonic() - started < timeout):
            time.sleep(polling_interval)
        if wait_until_ready and not self.ready():
            raise UnavailableError("Timeout before ready")
        return self

    def stop(self) -> None:
        """Stops taking requests, lets those in flight finish (up to the
        exit timeout), unloads the models."""
        host = self._started()
        self._host = None
        self._metrics = None
        try:
            host.stop(float(self.options.exit_timeout))
        finally:
            self._logging_before.restore()  # the program's logging as it was

    def _started(self) -> ServerHost:
        if self._host is None:
            raise InvalidArgumentError("Server not started")
        return self._host

    def _ask(self, fn, *args):
        try:
            return self._started().run(fn, *args)
        except ServerError as e:
            raise api_error(e) from None

    def _await(self, coro_fn, *args):
        host = self._started()
        try:
            return host.call(coro_fn(*args))
        except ServerError as e:
            raise api_error(e) from None

    # -- state -----------------------------------------------------------------

    def live(self) -> bool:
        return self._ask(self._started().server.is_live)

    def ready(self) -> bool:
        return self._ask(self._started().server.is_ready)

    def metadata(self) -> dict[str, Any]:
        return self._ask(self._started().server.metadata)

    def metrics(self, metric_format: MetricFormat = MetricFormat.PROMETHEUS) -> str:
        """Triton's Prometheus metrics (the text /metrics serves)."""
        if metric_format != MetricFormat.PROMETHEUS:
            raise InvalidArgumentError(f"unsupported metric format {metric_format}")
        from pyserver.frontends.metrics import exposition

        host = self._started()
        if self._metrics is None:
            self._metrics = _metrics_registry(host.server, self.options)
        return self._ask(exposition, self._metrics).decode()

    # -- models ----------------------------------------------------------------

    def model(self, model_name: str, model_version: int = -1) -> Model:
        self._started()
        return Model(self, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        rows = self._ask(self._started().server.repository_index, exclude_not_ready)
        models = []
        for row in rows:
            version = int(row["version"]) if row.get("version") else -1
            models.append(Model(self, row["name"], version, row.get("state"), row.get("reason")))
        return ModelDictionary(self, models)

    def load(self, model_name: str, parameters: Optional[dict] = None) -> Model:
        """Loads (or reloads) a model, explicit mode. ``parameters``:
        "config" (a JSON config to use instead of the folder's) and
        "file:<path>" (bytes: a file of the model's folder)."""
        config = None
        files = None
        for key, value in (parameters or {}).items():
            if key == "config":
                if not isinstance(value, str):
                    raise InvalidArgumentError("Invalid value type for 'config' parameter, "
                                               "expected string")
                config = value
            elif key.startswith("file:"):
                if not isinstance(value, (bytes, bytearray)):
                    raise InvalidArgumentError(f"Invalid value type for '{key}' parameter, "
                                               "expected bytes")
                files = files or {}
                files[key[5:]] = bytes(value)
            else:
                raise InvalidArgumentError(f"Unrecognized load parameter '{key}'.")
        host = self._started()
        self._await(lambda: host.server.load_model(model_name, config=config, files=files))
        return self.model(model_name)

    def unload(self, model: str | Model, unload_dependents: bool = False,
               wait_until_unloaded: bool = False, polling_interval: float = 0.1,
               timeout: Optional[float] = None) -> None:
        host = self._started()
        name = model.name if isinstance(model, Model) else model
        versions = [key for key in self.models() if key[0] == name] if wait_until_unloaded \
            else []
        self._await(lambda: host.server.unload_model(name, unload_dependents=unload_dependents))
        started = time.monotonic()
        while versions and not self._unloaded(versions) and (
                timeout is None or time.monotonic() - started < timeout):
            time.sleep(polling_interval)

    def _unloaded(self, versions: list) -> bool:
        models = self.models()
        return all(dict.get(models, key) is None or models[key].state in self._UNLOADED_STATES
                   for key in versions)

    def poll_model_repository(self) -> None:
        host = self._started()
        self._await(host.server.poll_repository)

    def register_model_repository(self, repository_path: str,
                                  name_mapping: Optional[dict[str, str]] = None) -> None:
        if name_mapping:
            raise UnsupportedError("model name mapping of a registered repository is not "
                                   "supported by this server")
        self._ask(self._started().server.register_repository, repository_path)

    def unregister_model_repository(self, repository_path: str) -> None:
        self._ask(self._started().server.unregister_repository, repository_path)


class _ApiMetrics:
    """The families made through this API (MetricFamily), for a registry."""

    def describe(self):
        return []

    def collect(self):
        from pyserver.frontends.metrics.collector import custom_families

        yield from custom_families(API_METRICS)


def _metrics_registry(core, options: Options):
    """One registry per started server: the engine's families, the
    models' own and the API's."""
    from prometheus_client import CollectorRegistry

    from pyserver.frontends.metrics import EngineCollector, MetricsConfig

    registry = CollectorRegistry(auto_describe=False)
    config = MetricsConfig()
    config.allow_cpu_metrics = options.metrics and options.cpu_metrics
    config.allow_gpu_metrics = options.metrics and options.gpu_metrics
    config.metrics_interval_ms = options.metrics_interval
    registry.register(EngineCollector(core, config))
    registry.register(_ApiMetrics())
    return registry


# -- custom metrics ---------------------------------------------------------------------

# Triton keeps custom metric families process-wide (TRITONSERVER_MetricFamilyNew
# takes no server), and so does this API: every in-process server reports them.
API_METRICS = CustomMetrics()


class MetricFamily:
    """A family of custom metrics (a counter, gauge or histogram) that every
    in-process server's ``metrics()`` reports."""

    def __init__(self, kind: MetricKind, name: str, description: str):
        self.kind = MetricKind(kind)
        # the store keys what it keeps by an owner token, not by this object
        # (which it would then keep alive)
        self._owner = object()
        self._id = _checked(API_METRICS.new_family, name, description, int(self.kind),
                            self._owner)

    def __del__(self):
        if getattr(self, "_id", None) is not None:
            API_METRICS.drop_owner(self._owner)


class Metric:
    """One labelled metric of a family."""

    def __init__(self, family: MetricFamily, labels: Optional[dict[str, str]] = None):
        self._family = family  # the family lives as long as its metrics
        self._owner = object()
        self._id = _checked(API_METRICS.new_metric, family._id, dict(labels or {}), None,
                            self._owner)

    @property
    def kind(self) -> MetricKind:
        return self._family.kind

    @property
    def value(self) -> float:
        return _checked(API_METRICS.operate, self._id, "value")

    def increment(self, value: float) -> None:
        _checked(API_METRICS.operate, self._id, "increment", float(value))

    def set_value(self, value: float) -> None:
        _checked(API_METRICS.operate, self._id, "set", float(value))

    def __del__(self):
        if getattr(self, "_id", None) is not None:
            API_METRICS.drop_owner(self._owner)


_METRIC_ERRORS = {"UNSUPPORTED": UnsupportedError, "INVALID_ARG": InvalidArgumentError,
                  "INTERNAL": InternalError}


def _checked(fn, *args):
    try:
        return fn(*args)
    except CustomMetricError as e:
        raise _METRIC_ERRORS.get(e.code, InvalidArgumentError)(e.message) from None
