"""The metrics endpoint (:8002/metrics) with Triton's names, split by concern.

config      the metrics flags and --metrics-config
exposition  Prometheus text as Triton (prometheus-cpp) writes it
host        the CPU utilization and memory gauges
gpu         the GPU gauges and counters from NVML
collector   EngineCollector: the engine's counters, the host's, the GPUs' and the
            models' own metrics, as families, at scrape time
endpoint    MetricsFrontend: the HTTP endpoint that serves them
"""

from pyserver.frontends.metrics.collector import EngineCollector, model_labels
from pyserver.frontends.metrics.config import (
    DEFAULT_SUMMARY_QUANTILES,
    MetricsConfig,
    MetricsConfigError,
    add_cli_arguments,
    parse_quantiles,
)
from pyserver.frontends.metrics.exposition import CONTENT_TYPE, TritonMetricFamily, exposition
from pyserver.frontends.metrics.host import HostSampler

__all__ = ["CONTENT_TYPE", "DEFAULT_SUMMARY_QUANTILES", "EngineCollector", "HostSampler",
           "MetricsConfig", "MetricsConfigError", "TritonMetricFamily", "add_cli_arguments",
           "exposition", "model_labels", "parse_quantiles"]
