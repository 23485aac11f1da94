"""`python -m pyserver`: the server command line, with tritonserver's flag names."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import time

from pyserver.backends import DEFAULT_BACKEND_DIRECTORY
from pyserver.frontends.listener import thread_count
from pyserver.kernel.flags import parse_bool

log = logging.getLogger("pyserver")


# flag -> (repeatable, why it changes nothing here)
NO_EFFECT_FLAGS = {
    "--grpc-infer-allocation-pool-size": (False, "gRPC calls keep no pool of states"),
    "--repoagent-directory": (False, "there are no repository agents"),
    "--cache-directory": (False, "the response cache is built in (--cache-config local,...)"),
    "--buffer-manager-thread-count": (False, "tensors are copied on the requesting thread"),
    "--model-load-gpu-limit": (True, "models load without a GPU memory check"),
    "--cuda-virtual-address-size": (True, "device memory comes from the CUDA memory pools "
                                          "and the frameworks' allocators"),
    "--min-supported-compute-capability": (False, "every GPU the frameworks accept is used"),
    "--enable-peer-access": (False, "GPUs exchange no tensors directly"),
    "--sagemaker-port": (False, "there is no SageMaker endpoint"),
    "--sagemaker-safe-port-range": (False, "there is no SageMaker endpoint"),
    "--sagemaker-thread-count": (False, "there is no SageMaker endpoint"),
    "--vertex-ai-port": (False, "there is no Vertex AI endpoint"),
    "--vertex-ai-thread-count": (False, "there is no Vertex AI endpoint"),
    "--vertex-ai-default-model": (False, "there is no Vertex AI endpoint"),
}
# flag -> why true cannot be honoured
OFF_ONLY_FLAGS = {
    "--model-namespacing": "model names are unique across the repositories",
    "--allow-sagemaker": "there is no SageMaker endpoint",
    "--allow-vertex-ai": "there is no Vertex AI endpoint",
}
# deprecated trace flag -> the --trace-config key that replaced it
_DEPRECATED_TRACE_FLAGS = {"--trace-file": "triton,file", "--trace-level": "level",
                           "--trace-rate": "rate", "--trace-count": "count",
                           "--trace-log-frequency": "triton,log-frequency"}


def build_parser(prog: str = "pyserver") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Triton-compatible inference server")
    p.add_argument("--model-repository", "--model-store", dest="model_repository",
                   action="append", required=True, metavar="DIR",
                   help="model repository folder (repeatable)")
    p.add_argument("--id", dest="server_id", default="triton", help="server identifier")
    p.add_argument("--model-control-mode", default="none", choices=["none", "poll", "explicit"],
                   help="none: load every model at startup; poll: and follow changes in the "
                   "repository; explicit: load/unload through the API")
    p.add_argument("--repository-poll-secs", type=int, default=15, metavar="SECONDS",
                   help="poll mode: how often the repository is checked for changes (0: never)")
    p.add_argument("--model-config-name", default="", metavar="NAME",
                   help="load <model>/configs/NAME.pbtxt where it exists instead of config.pbtxt")
    p.add_argument("--load-model", action="append", default=[], metavar="NAME",
                   help="model to load at startup in explicit mode (repeatable; '*' = all)")
    p.add_argument("--disable-auto-complete-config", action="store_true",
                   help="use config.pbtxt as written: backends fill nothing in")
    p.add_argument("--strict-model-config", type=parse_bool, default=None,
                   help="deprecated: true is --disable-auto-complete-config")
    p.add_argument("--backend-config", action="append", default=[], metavar="[BACKEND,]KEY=VALUE",
                   help="backend setting: default-max-batch-size=N for every backend; others "
                   "go to the Triton backend library of that name")
    p.add_argument("--backend-directory", default=DEFAULT_BACKEND_DIRECTORY, metavar="DIR",
                   help="where backends not built in are found: DIR/NAME/libtriton_NAME.so (a "
                   "Triton backend library) or DIR/NAME/model.py (a Python-based backend)")
    p.add_argument("--exit-on-error", type=parse_bool, default=True,
                   help="exit when a model fails to load at startup")
    p.add_argument("--strict-readiness", type=parse_bool, default=True,
                   help="ready only while every model is READY (false: ready while live)")
    p.add_argument("--model-load-thread-count", type=int, default=4,
                   help="how many models load in parallel")
    p.add_argument("--exit-timeout-secs", type=int, default=30,
                   help="on SIGINT/SIGTERM, how long in-flight requests may take to finish")
    p.add_argument("--cache-config", action="append", default=[], metavar="local,size=BYTES",
                   help="the response cache (models opt in with response_cache { enable: true })")
    p.add_argument("--response-cache-byte-size", type=int, default=0,
                   help="deprecated: --cache-config local,size=BYTES")
    p.add_argument("--pinned-memory-pool-byte-size", type=int, default=268435456,
                   help="page-locked host memory for GPU staging (0 when no GPU is usable)")
    p.add_argument("--allow-client-shm", type=parse_bool, default=False,
                   help="let clients register system shared memory regions")
    p.add_argument("--allow-http", type=parse_bool, default=True)
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--http-address", default="0.0.0.0")
    p.add_argument("--http-max-input-size", type=int, default=64 * 1024 * 1024)
    p.add_argument("--http-restricted-api", action="append", default=[],
                   metavar="API[,API...]:KEY=VALUE")
    p.add_argument("--allow-grpc", type=parse_bool, default=True)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--grpc-address", default="0.0.0.0")
    p.add_argument("--grpc-restricted-protocol", action="append", default=[],
                   metavar="PROTOCOL[,PROTOCOL...]:KEY=VALUE")
    p.add_argument("--allow-openai", type=parse_bool, nargs="?", const=True, default=None,
                   help="serve OpenAI's API (/v1/completions, /v1/chat/completions, "
                   "/v1/embeddings, /v1/models); on when --openai-port is given")
    p.add_argument("--openai-port", type=int, default=None, metavar="PORT",
                   help="the OpenAI API's port (default 9000); giving it turns the API on")
    p.add_argument("--openai-address", default="0.0.0.0")
    p.add_argument("--openai-default-max-tokens", type=int, default=16, metavar="N",
                   help="max_tokens of an OpenAI request that sets none")
    p.add_argument("--openai-chat-template", default="", metavar="PATH",
                   help="a chat template (.jinja, or a tokenizer_config.json) for every model, "
                   "instead of the one in each model's folder")
    p.add_argument("--log-verbose", type=int, default=0)
    p.add_argument("--log-info", type=parse_bool, default=True)
    p.add_argument("--log-warning", type=parse_bool, default=True)
    p.add_argument("--log-error", type=parse_bool, default=True)
    p.add_argument("--log-format", default="default", choices=["default", "ISO8601"])
    p.add_argument("--log-file", default="", metavar="PATH",
                   help="write the log to PATH instead of the console")
    p.add_argument("--trace-config", action="append", default=[],
                   metavar="[triton,]KEY=VALUE",
                   help="trace setting (repeatable): level=OFF|TIMESTAMPS, rate=N, count=N, "
                   "log-frequency=N, file=PATH, mode=triton")
    p.add_argument("--model-load-retry-count", type=int, default=0, metavar="N",
                   help="try a model load that failed N more times")
    p.add_argument("--http-header-forward-pattern", default="", metavar="REGEX",
                   help="HTTP headers whose name this matches (case-insensitive unless it "
                   "starts with (?-i)) become request parameters")
    p.add_argument("--http-header-timeout-secs", type=float, default=60.0, metavar="SECONDS",
                   help="close (408) a connection whose request head does not arrive whole "
                   "within this long, the first counted from the connect (nginx's "
                   "client_header_timeout); 0: no bound")
    p.add_argument("--http-body-timeout-secs", type=float, default=60.0, metavar="SECONDS",
                   help="close (408) a connection whose request body pauses longer than this "
                   "between reads (nginx's client_body_timeout); 0: no bound")
    p.add_argument("--http-max-connections", type=int, default=0, metavar="N",
                   help="HTTP connections held at most (one more is answered 503 and "
                   "closed); 0: what the open-file limit leaves")
    p.add_argument("--http-thread-count", type=thread_count, default=0, metavar="N",
                   help="threads of their own that read and write the HTTP connections (a "
                   "socket pump); 0: the event loop does")
    p.add_argument("--reuse-http-port", type=parse_bool, default=False,
                   help="let several servers listen on the HTTP port (SO_REUSEPORT)")
    p.add_argument("--rate-limit", default="off", choices=["off", "execution_count"],
                   help="execution_count: instances whose instance_group lists rate_limiter "
                   "resources hold them while they execute")
    p.add_argument("--rate-limit-resource", action="append", default=[],
                   metavar="NAME:COUNT[:DEVICE]",
                   help="copies of a rate limiter resource (per device, or on DEVICE); "
                   "default: the largest count an instance asks for")
    # tritonserver's deprecated trace flags: each is read as the --trace-config
    # setting that replaced it, and --trace-config given beside it wins.
    for flag, metavar in (("--trace-file", "PATH"), ("--trace-level", "LEVEL"),
                          ("--trace-rate", "N"), ("--trace-count", "N"),
                          ("--trace-log-frequency", "N")):
        p.add_argument(flag, action="append", default=[], metavar=metavar,
                       help=f"deprecated: --trace-config {_DEPRECATED_TRACE_FLAGS[flag]}=...")
    # Accepted so that a tritonserver command line runs unchanged; each
    # names something this server does not have, and the log says so.
    for flag, (repeatable, reason) in NO_EFFECT_FLAGS.items():
        p.add_argument(flag, action="append" if repeatable else "store",
                       default=[] if repeatable else None, help=f"no effect: {reason}")
    # Accepted when off; what they would turn on is not here.
    for flag, reason in OFF_ONLY_FLAGS.items():
        p.add_argument(flag, type=parse_bool, default=False, help=f"only false: {reason}")
    p.add_argument("--host-policy", action="append", default=[],
                   metavar="NAME,SETTING=VALUE",
                   help="a setting of the host policy NAME (repeatable): cpu-cores=LOW-HIGH[,...] "
                   "pins the instances that take it to those CPUs, numa-node=N binds their "
                   "memory to that NUMA node; an instance takes the policy its instance_group's "
                   "host_policy names, else 'cpu', 'gpu_<device>' or 'model' by its kind")
    p.add_argument("--cuda-memory-pool-byte-size", action="append", default=[],
                   metavar="GPU:BYTES",
                   help="the CUDA memory pool of a GPU (repeatable; default 64 MiB each): "
                   "device buffers the server keeps, e.g. TensorRT's I/O bindings")
    from pyserver.frontends import grpc_options
    grpc_options.add_cli_arguments(p)  # --grpc-use-ssl, ..., response compression
    from pyserver.frontends.metrics import add_cli_arguments
    add_cli_arguments(p)  # --allow-metrics, --metrics-port, --metrics-config, ...
    return p


async def serve(args) -> int:
    from pyserver.frontends import grpc_keepalive
    from pyserver.frontends.header_forward import HeaderForwarder
    from pyserver.frontends.http import HttpFrontend
    from pyserver.frontends.metrics import MetricsConfig, MetricsConfigError
    from pyserver.kernel.errors import ServerError
    from pyserver.runtime.device_memory import parse_cuda_memory_pool_sizes
    from pyserver.runtime.host_policy import parse_host_policy_flags
    from pyserver.server.response_cache import CacheConfigError, parse_cache_config
    from pyserver.server.server import Server

    try:
        metrics_config = MetricsConfig.from_args(args)
        cache_bytes = parse_cache_config(args.cache_config, args.response_cache_byte_size)
    except (MetricsConfigError, CacheConfigError) as err:
        log.error("%s", err)
        return 1

    if args.rate_limit == "off" and args.rate_limit_resource:
        log.info("--rate-limit-resource has no effect with --rate-limit=off")
    for flag, reason in OFF_ONLY_FLAGS.items():
        if getattr(args, _dest(flag)):
            log.error("%s=true is not supported: %s", flag, reason)
            return 1
    for flag in NO_EFFECT_FLAGS:
        if getattr(args, _dest(flag)):
            log.info("%s has no effect on this server (see --help)", flag)
    try:
        trace_update = parse_trace_config(deprecated_trace_config(args) + args.trace_config)
        cuda_pool_sizes = parse_cuda_memory_pool_sizes(args.cuda_memory_pool_byte_size)
        rate_limit_resources = parse_rate_limit_resources(args.rate_limit_resource)
        host_policies = parse_host_policy_flags(args.host_policy)
        if args.http_header_forward_pattern:  # checked before the models load
            HeaderForwarder(args.http_header_forward_pattern)
        if args.grpc_header_forward_pattern:
            HeaderForwarder(args.grpc_header_forward_pattern, "--grpc-header-forward-pattern")
        grpc_keepalive.options_from_args(args)
        chat_template = _openai_chat_template(args)  # read before the models load
    except ValueError as err:
        log.error("%s", err)
        return 1

    auto_complete = not args.disable_auto_complete_config and not args.strict_model_config
    default_mbs = 4
    backend_config: dict[str, dict[str, str]] = {}
    for item in args.backend_config:
        # BACKEND,KEY=VALUE for one backend, KEY=VALUE for all (as Triton splits them)
        backend, _, setting = item.partition(",") if "," in item.split("=", 1)[0] else ("", "", item)
        key, _, value = setting.partition("=")
        if key == "default-max-batch-size":
            default_mbs = int(value)
        backend_config.setdefault(backend, {})[key] = value
    try:
        server = Server(args.model_repository, auto_complete_config=auto_complete,
                        default_max_batch_size=default_mbs,
                        summary_latencies=metrics_config.summary_latencies,
                        histogram_latencies=metrics_config.histogram_latencies, server_id=args.server_id,
                        exit_on_error=args.exit_on_error, strict_readiness=args.strict_readiness,
                        model_load_thread_count=args.model_load_thread_count,
                        model_load_retry_count=args.model_load_retry_count,
                        model_control_mode=args.model_control_mode, load_models=args.load_model,
                        allow_client_shm=args.allow_client_shm,
                        repository_poll_secs=args.repository_poll_secs,
                        model_config_name=args.model_config_name,
                        pinned_memory_pool_byte_size=args.pinned_memory_pool_byte_size,
                        cuda_memory_pool_byte_size=cuda_pool_sizes,
                        rate_limit=args.rate_limit, rate_limit_resources=rate_limit_resources,
                        response_cache_byte_size=cache_bytes,
                        backend_directory=args.backend_directory, backend_config=backend_config,
                        host_policies=host_policies)
    except ServerError as err:  # a setting it refuses (a host policy's value)
        log.error("%s", err.message)
        return 1
    for reason in server.device_memory.unusable_sizes():
        log.warning("%s", reason)
    try:  # the settings the log and trace APIs also change, from the command line
        server.log_settings({"log_info": args.log_info, "log_warning": args.log_warning,
                             "log_error": args.log_error, "log_format": args.log_format,
                             "log_file": args.log_file, "log_verbose_level": args.log_verbose})
        if trace_update:
            server.trace_settings(None, trace_update)
    except ServerError as err:
        log.error("%s", err.message)
        return 1
    await server.start()
    log.info("\n%s", model_table(server.repository_index()))
    from pyserver.runtime import allocator
    log.info("memory allocator: %s (%s=%s)", allocator.active(), allocator.ENV,
             os.environ.get(allocator.ENV, "auto"))
    server.opening_frontends = True  # not ready until every endpoint listens
    frontends = []
    if args.allow_http:
        kwargs = {"max_input_size": args.http_max_input_size,
                  "header_forward_pattern": args.http_header_forward_pattern,
                  "reuse_port": args.reuse_http_port,
                  "header_timeout": args.http_header_timeout_secs,
                  "body_timeout": args.http_body_timeout_secs,
                  "max_connections": args.http_max_connections,
                  "io_threads": args.http_thread_count}
        if args.http_restricted_api:
            from pyserver.frontends.http import parse_restricted_api
            try:
                kwargs["restricted_apis"] = parse_restricted_api(args.http_restricted_api)
            except ValueError as err:  # a log line, as for the gRPC twin, not a traceback
                log.error("%s", err)
                await server.stop()
                return 1
        http = HttpFrontend(server, args.http_address, args.http_port, **kwargs)
        if not await _start_frontend(http, "HTTP service", frontends, server):
            return 1
        log.info("Started HTTPService at %s:%d", args.http_address, http.port)
    if args.allow_grpc:
        from pyserver.frontends.grpc import GrpcFrontend, parse_restricted_protocols
        from pyserver.frontends.grpc_options import frontend_options
        try:
            restricted = parse_restricted_protocols(args.grpc_restricted_protocol)
            options = frontend_options(args)  # TLS, response compression
        except ValueError as err:
            log.error("%s", err)
            for f in frontends:
                await f.stop()
            await server.stop()
            return 1
        grpc = GrpcFrontend(server, args.grpc_address, args.grpc_port,
                            restricted_protocols=restricted, **options)
        if not await _start_frontend(grpc, "GRPC service", frontends, server):
            return 1
        log.info("Started GRPCInferenceService at %s:%d", args.grpc_address, grpc.port)
    if _openai_enabled(args):
        from pyserver.frontends.openai import DEFAULT_PORT, OpenAIFrontend
        port = DEFAULT_PORT if args.openai_port is None else args.openai_port
        openai_api = OpenAIFrontend(server, args.openai_address, port,
                                    default_max_tokens=args.openai_default_max_tokens,
                                    chat_template=chat_template,
                                    max_input_size=args.http_max_input_size,
                                    header_timeout=args.http_header_timeout_secs,
                                    body_timeout=args.http_body_timeout_secs,
                                    max_connections=args.http_max_connections)
        if not await _start_frontend(openai_api, "OpenAI service", frontends, server):
            return 1
        log.info("Started OpenAI-compatible API at %s:%d", args.openai_address, openai_api.port)
    if metrics_config.allow_metrics:
        from pyserver.frontends.metrics.endpoint import MetricsFrontend
        metrics = MetricsFrontend(server, metrics_config)
        if not await _start_frontend(metrics, "Metrics service", frontends, server):
            return 1
        log.info("Started Metrics Service at %s:%d", metrics_config.metrics_address, metrics.port)
    server.opening_frontends = False
    # Everything allocated so far (models, modules) lives for the whole run:
    # keep it out of the cyclic GC's scans, and collect the young generation
    # less often (per-request objects are freed by reference counting; a
    # collection every 700 allocations cost ~8% of HTTP throughput).
    gc.freeze()
    gc.set_threshold(50000, 50, 100)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # Readiness goes false at once; accepted requests get up to
    # --exit-timeout-secs to finish before the models stop.
    server.begin_shutdown()
    for f in frontends:
        if hasattr(f, "begin_shutdown"):
            f.begin_shutdown()  # gRPC clients get GOAWAY before the drain
    log.info("shutting down: waiting up to %d s for in-flight requests", args.exit_timeout_secs)
    deadline = time.monotonic() + args.exit_timeout_secs
    # Past the timeout nothing more is waited for: what is still in flight
    # is answered with an error now, the models stop at once.
    drained, failed = await server.drain_or_abandon(args.exit_timeout_secs)
    if not drained:
        log.warning("exit timeout reached: %d requests still in flight were failed", failed)
        await asyncio.sleep(0.05)  # their answers go out before the connections close
        deadline = time.monotonic() + _FORCED_STOP_S
    for f in frontends:
        await f.stop(max(0.5, deadline - time.monotonic()))
    await server.stop(None if drained else deadline)
    if not drained:
        # A thread still inside a model (ONNX Runtime, a thread-mode Python
        # model) cannot be stopped; the process ends without waiting for it.
        logging.shutdown()
        os._exit(0)
    return 0


# After the exit timeout: how long the frontends and the models get to close.
_FORCED_STOP_S = 1.0


# --trace-config KEY (as Triton spells it) -> the trace settings API's key.
_TRACE_KEYS = {"level": "trace_level", "rate": "trace_rate", "count": "trace_count",
               "log-frequency": "log_frequency", "log_frequency": "log_frequency",
               "file": "trace_file", "mode": "trace_mode"}


async def _start_frontend(frontend, service: str, started: list, server) -> bool:
    """Starts an endpoint; when it cannot listen (the port is taken), says
    why, stops what already started and returns False."""
    try:
        await frontend.start()
    except OSError as err:
        log.error("failed to start %s: %s", service, err)
        for f in started:
            await f.stop()
        await server.stop()
        return False
    started.append(frontend)
    return True


def _openai_enabled(args) -> bool:
    """--allow-openai, or --openai-port without --allow-openai=false."""
    if args.allow_openai is not None:
        return args.allow_openai
    return args.openai_port is not None


def _openai_chat_template(args):
    if not args.openai_chat_template or not _openai_enabled(args):
        return None
    from pyserver.frontends.openai.chat import load_template
    try:
        return load_template(args.openai_chat_template)
    except OSError as err:
        raise ValueError(f"--openai-chat-template {args.openai_chat_template}: "
                         f"{err.strerror or err}") from None


def parse_rate_limit_resources(values: list[str]) -> list[tuple[str, int, int]]:
    """--rate-limit-resource values, ``<name>:<count>[:<device>]``, as
    (name, device or ANY_DEVICE, count); ValueError with Triton's text for a
    malformed one."""
    from pyserver.engine.rate_limiter import ANY_DEVICE

    parsed = []
    for value in values:
        parts = value.split(":")
        try:
            if len(parts) not in (2, 3) or not parts[0]:
                raise ValueError
            count = int(parts[1])
            device = int(parts[2]) if len(parts) == 3 else ANY_DEVICE
            if count < 0 or (len(parts) == 3 and device < 0):
                raise ValueError
        except ValueError:
            raise ValueError("--rate-limit-resource option format is "
                             "'<resource_name>:<count>:<device>' or '<resource_name>:<count>'. "
                             f"Got {value}") from None
        parsed.append((parts[0], device, count))
    return parsed


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def deprecated_trace_config(args) -> list[str]:
    """tritonserver's deprecated --trace-file/-level/-rate/-count/-log-frequency
    as --trace-config values, each with Triton's deprecation warning."""
    items = []
    for flag, key in _DEPRECATED_TRACE_FLAGS.items():
        values = getattr(args, _dest(flag))
        if values:
            log.warning("'%s' is deprecated: use '--trace-config %s=<value>' instead", flag, key)
        items.extend(f"{key}={value}" for value in values)
    return items


# What Triton's command line takes for a trace level.
_TRACE_LEVEL_WORDS = {"false": "OFF", "off": "OFF", "true": "TIMESTAMPS", "on": "TIMESTAMPS",
                      "min": "TIMESTAMPS", "max": "TIMESTAMPS", "timestamps": "TIMESTAMPS",
                      "tensors": "TENSORS"}


def parse_trace_config(items: list[str]) -> dict:
    """--trace-config values ("[triton,]key=value") as a trace settings
    update; ValueError names what is wrong."""
    update: dict = {}
    for item in items:
        mode, _, setting = item.rpartition(",")
        if mode and mode != "triton":
            raise ValueError(f"--trace-config {item}: trace mode '{mode}' is not supported "
                             "(only triton)")
        key, eq, value = setting.partition("=")
        if not eq or key not in _TRACE_KEYS:
            raise ValueError(f"--trace-config {item}: expected [triton,]KEY=VALUE with KEY one "
                             f"of {', '.join(sorted(set(_TRACE_KEYS) - {'log_frequency'}))}")
        name = _TRACE_KEYS[key]
        if name == "trace_mode" and value != "triton":
            # no OpenTelemetry exporter here: refused, not accepted and ignored
            raise ValueError(f"--trace-config {item}: trace mode '{value}' is not supported "
                             "(only triton)")
        if name == "trace_level":  # repeatable, as in Triton: each adds a level
            level = _TRACE_LEVEL_WORDS.get(value.lower())
            if level is None:  # Triton's words for its command line
                raise ValueError(f"--trace-config {item}: invalid value for trace level "
                                 f"option: {value.lower()}")
            levels = [] if update.get(name) in (None, ["OFF"]) else update[name]
            update[name] = ["OFF"] if level == "OFF" else [*levels, level]
        else:
            update[name] = value
    return update


def model_table(rows: list[dict]) -> str:
    """The model status table Triton logs at startup: the models that have a
    state (loaded, loading or failed), one row per version."""
    body = [(r["name"], r.get("version") or "-",
             r["state"] + (f": {' '.join(r['reason'].split())}" if r.get("reason") else ""))
            for r in rows if r.get("state")]
    header = ("Model", "Version", "Status")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([rule, line(header), rule, *map(line, body), rule])


def _raise_open_file_limit() -> None:
    """A server holds a socket per client: take the whole open-file limit
    the system grants (the soft limit is often 1,024, the hard far more)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _program_name() -> str:
    """The name usage lines show: `tritonserver` when run as Triton's command."""
    return "tritonserver" if os.path.basename(sys.argv[0]) == "tritonserver" else "pyserver"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "check-repo":
        from pyserver.check_repo import main as check_repo
        return check_repo(argv[1:])
    args = build_parser(_program_name()).parse_args(argv)
    _raise_open_file_limit()
    from pyserver.runtime import settings
    console = settings.console(args.log_format)  # Triton's lines
    logging.basicConfig(level=logging.DEBUG if args.log_verbose else logging.INFO,
                        handlers=[console])
    if args.log_verbose:
        log.setLevel(logging.DEBUG)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # uvloop is a dependency; plain asyncio still works
        runner = asyncio.run
    from pyserver.kernel.errors import ServerError
    try:
        return runner(serve(args))
    except ServerError as err:
        log.error("%s", err.message)
        return 1


if __name__ == "__main__":
    sys.exit(main())
