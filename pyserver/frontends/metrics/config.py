"""The metrics endpoint's configuration: --allow-metrics, --metrics-port,
--metrics-interval-ms, --allow-cpu-metrics, --allow-gpu-metrics and
--metrics-config's settings, as tritonserver reads them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from pyserver.kernel.flags import SETTING_WORDS, bool_word, parse_bool

# Triton's default quantiles (metric_model_reporter.h): (quantile, error).
DEFAULT_SUMMARY_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001),
                             (0.999, 0.001))

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


class MetricsConfigError(ValueError):
    """A metrics flag or --metrics-config setting that cannot be used."""


_SETTINGS = ("counter_latencies", "summary_latencies", "summary_quantiles",
             "histogram_latencies")
_STOD_PREFIX = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _parse_bool(setting: str, value: str) -> bool:
    word = bool_word(value, SETTING_WORDS)
    if word is None:
        raise MetricsConfigError(
            f"--metrics-config {setting}={value}: expected true or false")
    return word


def _leading_float(text: str):
    # C++ std::stod reads the longest numeric prefix ("0.0.1" -> 0.0); Triton
    # parses quantiles with it, so its command lines parse the same here.
    m = _STOD_PREFIX.match(text)
    return float(m.group(0)) if m else None


def parse_quantiles(value: str) -> tuple:
    """``"0.5:0.05,0.9:0.01"`` -> ((0.5, 0.05), (0.9, 0.01))."""
    pairs = []
    for item in value.split(","):
        quantile, sep, error = item.partition(":")
        q = _leading_float(quantile)
        e = _leading_float(error) if sep else None
        if q is None or e is None:
            raise MetricsConfigError(
                f"--metrics-config summary_quantiles={value}: '{item}' is not "
                "<quantile>:<error> (e.g. summary_quantiles=0.5:0.05,0.9:0.01)")
        if not 0.0 <= q <= 1.0:
            raise MetricsConfigError(
                f"--metrics-config summary_quantiles={value}: quantile {q} is not in [0, 1]")
        pairs.append((q, e))
    return tuple(pairs)


@dataclass
class MetricsConfig:
    """The metrics flags of tritonserver, parsed and checked.

    Build it with :meth:`from_args` (an ``argparse`` namespace from
    :func:`add_cli_arguments`) or :meth:`from_cli` (plain values); both raise
    :class:`MetricsConfigError` with a message that names the flag.
    """

    allow_metrics: bool = True
    allow_cpu_metrics: bool = True
    allow_gpu_metrics: bool = True
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8002
    metrics_interval_ms: float = 2000.0
    counter_latencies: bool = True
    summary_latencies: bool = False
    summary_quantiles: tuple = DEFAULT_SUMMARY_QUANTILES
    histogram_latencies: bool = False
    settings: dict = field(default_factory=dict)  # every --metrics-config k=v as given

    @classmethod
    def from_cli(cls, *, allow_metrics: bool = True, allow_cpu_metrics: bool = True,
                 allow_gpu_metrics: bool = True, metrics_address: str | None = None,
                 metrics_port: int = 8002, metrics_interval_ms: float = 2000.0,
                 metrics_config=(), http_address: str = "0.0.0.0") -> "MetricsConfig":
        """``metrics_config``: the ``--metrics-config`` values, each
        ``<setting>=<value>``. ``metrics_address`` defaults to
        ``http_address``, as in Triton."""
        if not 0 <= int(metrics_port) <= 65535:
            raise MetricsConfigError(f"--metrics-port {metrics_port}: not a port number (0-65535)")
        interval = float(metrics_interval_ms)
        if not interval > 0 or math.isinf(interval):
            raise MetricsConfigError(
                f"--metrics-interval-ms {metrics_interval_ms}: must be a positive number")
        config = cls(allow_metrics=bool(allow_metrics), allow_cpu_metrics=bool(allow_cpu_metrics),
                     allow_gpu_metrics=bool(allow_gpu_metrics),
                     metrics_address=metrics_address or http_address or "0.0.0.0",
                     metrics_port=int(metrics_port), metrics_interval_ms=interval)
        for item in metrics_config or ():
            config._apply(item)
        return config

    @classmethod
    def from_args(cls, args) -> "MetricsConfig":
        """From the namespace of a parser that ran :func:`add_cli_arguments`."""
        return cls.from_cli(
            allow_metrics=args.allow_metrics, allow_cpu_metrics=args.allow_cpu_metrics,
            allow_gpu_metrics=args.allow_gpu_metrics, metrics_address=args.metrics_address,
            metrics_port=args.metrics_port, metrics_interval_ms=args.metrics_interval_ms,
            metrics_config=args.metrics_config,
            http_address=getattr(args, "http_address", "0.0.0.0"))

    def _apply(self, item: str) -> None:
        # Triton's format rules (command_line_parser.cc ParseMetricsConfigOption).
        setting, sep, value = item.partition("=")
        if not sep or not setting or not value or "," in setting:
            raise MetricsConfigError(
                f"--metrics-config option format is <setting>=<value>. Got {item}")
        setting = setting.strip()
        if setting not in _SETTINGS:
            raise MetricsConfigError(
                f"--metrics-config {item}: unknown setting '{setting}' (known: "
                f"{', '.join(_SETTINGS)})")
        self.settings[setting] = value
        if setting == "summary_quantiles":
            self.summary_quantiles = parse_quantiles(value)
        else:
            setattr(self, setting, _parse_bool(setting, value))


def add_cli_arguments(parser) -> None:
    """Adds tritonserver's metrics flags to an ``argparse`` parser; read them
    back with :meth:`MetricsConfig.from_args`."""


    group = parser.add_argument_group("metrics")
    group.add_argument("--allow-metrics", type=parse_bool, default=True,
                       help="serve Prometheus metrics (default true)")
    group.add_argument("--allow-gpu-metrics", type=parse_bool, default=True,
                       help="GPU utilization, memory, power and energy gauges from NVML "
                       "(default true)")
    group.add_argument("--allow-cpu-metrics", type=parse_bool, default=True,
                       help="CPU utilization and memory gauges (default true)")
    group.add_argument("--metrics-address", default=None,
                       help="address of the metrics endpoint (default: --http-address)")
    group.add_argument("--metrics-port", type=int, default=8002,
                       help="port of the metrics endpoint (default 8002)")
    group.add_argument("--metrics-interval-ms", type=float, default=2000.0,
                       help="how often CPU gauges are refreshed, in ms (default 2000)")
    group.add_argument("--metrics-config", action="append", default=[],
                       metavar="<setting>=<value>",
                       help="counter_latencies, summary_latencies, summary_quantiles, "
                            "histogram_latencies (repeatable)")
