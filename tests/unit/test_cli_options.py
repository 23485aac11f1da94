"""Every option of tritonserver's command line is one pyserver's parser knows,
so a deployment's command line never fails on a flag name."""

from pyserver.cli import build_parser

# The long options of Triton's src/command_line_parser.cc (server repository).
TRITONSERVER_OPTIONS = (
    "--allow-client-shm", "--allow-cpu-metrics", "--allow-gpu-metrics", "--allow-grpc",
    "--allow-http", "--allow-metrics", "--allow-sagemaker", "--allow-vertex-ai",
    "--backend-config", "--backend-directory", "--buffer-manager-thread-count", "--cache-config",
    "--cache-directory", "--cuda-memory-pool-byte-size", "--cuda-virtual-address-size",
    "--disable-auto-complete-config", "--enable-peer-access", "--exit-on-error",
    "--exit-timeout-secs", "--grpc-address", "--grpc-header-forward-pattern",
    "--grpc-http2-max-ping-strikes", "--grpc-http2-max-pings-without-data",
    "--grpc-http2-min-recv-ping-interval-without-data", "--grpc-infer-allocation-pool-size",
    "--grpc-infer-response-compression-level", "--grpc-infer-thread-count",
    "--grpc-keepalive-permit-without-calls", "--grpc-keepalive-time", "--grpc-keepalive-timeout",
    "--grpc-max-connection-age", "--grpc-max-connection-age-grace",
    "--grpc-max-response-pool-size", "--grpc-port", "--grpc-restricted-protocol",
    "--grpc-root-cert", "--grpc-server-cert", "--grpc-server-key", "--grpc-use-ssl",
    "--grpc-use-ssl-mutual", "--host-policy", "--http-address", "--http-header-forward-pattern",
    "--http-max-input-size", "--http-port", "--http-restricted-api", "--http-thread-count",
    "--id", "--load-model", "--log-error", "--log-file", "--log-format", "--log-info",
    "--log-verbose", "--log-warning", "--metrics-address", "--metrics-config",
    "--metrics-interval-ms", "--metrics-port", "--min-supported-compute-capability",
    "--model-config-name", "--model-control-mode", "--model-load-gpu-limit",
    "--model-load-retry-count", "--model-load-thread-count", "--model-namespacing",
    "--model-repository", "--model-store", "--pinned-memory-pool-byte-size", "--rate-limit",
    "--rate-limit-resource", "--repoagent-directory", "--repository-poll-secs",
    "--response-cache-byte-size", "--reuse-grpc-port", "--reuse-http-port", "--sagemaker-port",
    "--sagemaker-safe-port-range", "--sagemaker-thread-count", "--strict-model-config",
    "--strict-readiness", "--trace-config", "--trace-count", "--trace-file", "--trace-level",
    "--trace-log-frequency", "--trace-rate", "--vertex-ai-default-model", "--vertex-ai-port",
    "--vertex-ai-thread-count",
)


def test_every_tritonserver_option_is_accepted():
    known = {s for action in build_parser()._actions for s in action.option_strings}
    assert [flag for flag in TRITONSERVER_OPTIONS if flag not in known] == []


def test_grpc_keepalive_and_http2_flags_parse():
    """The gRPC transport flags as KServe users tune them, Triton's spelling."""
    args = build_parser().parse_args([
        "--model-store=/mnt/models", "--grpc-keepalive-time=7200000",
        "--grpc-keepalive-timeout=20000", "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=2",
        "--grpc-http2-min-recv-ping-interval-without-data=300000",
        "--grpc-http2-max-ping-strikes=2", "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=10000", "--strict-readiness=false",
        "--allow-sagemaker=false", "--allow-vertex-ai=false", "--model-namespacing=false"])
    assert args.model_repository == ["/mnt/models"]
    assert args.strict_readiness is False and args.allow_sagemaker is False
