"""Triton's Prometheus metrics, read from the engine's C++ counters at scrape time.

Nothing here runs per request: every model version keeps its counters in
csrc (``pyserver::ModelStats``, relaxed atomics bumped by the scheduler and
instance threads), and :class:`EngineCollector` turns one snapshot of them
into metric families when ``/metrics`` is scraped.

The names, HELP texts, types, labels and family order are Triton's
(triton-inference-server/core ``src/metrics.cc`` and
``src/metric_model_reporter.cc``). So is the text: Triton serializes with
prometheus-cpp, which writes a counter under its own name (no ``_total``),
sorts labels by name and prints values like C++ ``ostream`` with 16 digits
(``3``, ``0.004683712``, ``16861294592``). prometheus_client's
``generate_latest`` would add ``_total`` to counters' HELP/TYPE lines and
print ``3.0``, so :func:`exposition` writes the families built here
(:class:`TritonMetricFamily`) the Triton way, and any other collector in the
same registry the prometheus_client way.

GPU metrics (``nv_gpu_*``, ``nv_energy_consumption``) come from NVML
(gpu_metrics.py) where the driver is present, with ``--allow-gpu-metrics``.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from dataclasses import dataclass, field

from prometheus_client.exposition import generate_latest as _prometheus_generate_latest
from prometheus_client.metrics_core import Metric

from pyserver.core.config import FIRST_RESPONSE_FAMILY
from pyserver.kernel.flags import SETTING_WORDS, bool_word, parse_bool

log = logging.getLogger("pyserver")

__all__ = [
    "CONTENT_TYPE", "DEFAULT_SUMMARY_QUANTILES", "EngineCollector", "HostSampler",
    "CustomMetrics", "MetricsConfig", "MetricsConfigError", "TritonMetricFamily",
    "add_cli_arguments",
    "exposition",
]

# prometheus-cpp's exposer (Triton) answers with the 0.0.4 text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Triton's default quantiles (metric_model_reporter.h): (quantile, error).
DEFAULT_SUMMARY_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001),
                             (0.999, 0.001))

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


# ---------------------------------------------------------------------------
# configuration


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


# ---------------------------------------------------------------------------
# exposition


class TritonMetricFamily(Metric):
    """A metric family written exactly as Triton writes it: the sample name is
    the family name (a counter has no ``_total``), labels sorted by name,
    values as C++ prints doubles. Types: ``counter`` or ``gauge``."""

    def __init__(self, name: str, documentation: str, typ: str):
        Metric.__init__(self, name, documentation, typ)

    def add(self, labels: dict, value: float) -> None:
        self.add_sample(self.name, labels, value)


def _format_value(value: float) -> str:
    # prometheus-cpp: ostream with precision(max_digits10 - 1) == %.16g.
    if value != value:
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return "%.16g" % value


def _escape_label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class _Single:
    """One foreign metric family as a collector, for prometheus_client's writer."""

    def __init__(self, metric):
        self._metric = metric

    def collect(self):
        return [self._metric]


def _label_order(item) -> tuple:
    return (item[0] in ("le", "quantile"), item[0])


def _write_family(metric: TritonMetricFamily, out: list) -> None:
    name = metric.name
    out.append(f"# HELP {name} {_escape_help(metric.documentation)}\n"
               f"# TYPE {name} {metric.type}\n")
    for sample in metric.samples:
        labels = sample.labels
        if labels:
            # As prometheus-cpp writes them: the labels sorted, then a
            # bucket's "le" or a summary's "quantile" last.
            items = sorted(labels.items(), key=_label_order)
            text = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in items)
            out.append(f"{sample.name}{{{text}}} {_format_value(sample.value)}\n")
        else:
            out.append(f"{sample.name} {_format_value(sample.value)}\n")


def exposition(registry) -> bytes:
    """The Prometheus 0.0.4 text of every family ``registry.collect()``
    yields: Triton's families in Triton's format, others as prometheus_client
    writes them. A family with no samples is left out, as prometheus-cpp does."""
    out: list[str] = []
    for metric in registry.collect():
        if not metric.samples:
            continue
        if isinstance(metric, TritonMetricFamily):
            _write_family(metric, out)
        else:
            out.append(_prometheus_generate_latest(_Single(metric)).decode("utf-8"))
    return "".join(out).encode("utf-8")


# ---------------------------------------------------------------------------
# host gauges


class HostSampler:
    """CPU utilization and RAM from /proc, as Triton's metrics poller reads
    them: utilization is busy / (busy + idle) jiffies between two reads of
    /proc/stat, used memory is MemTotal - MemAvailable.

    Triton refreshes these on a thread every interval. Here nothing runs
    between scrapes: a scrape re-reads /proc when at least ``interval_s``
    has passed since the last read, and otherwise reports the last values.
    """

    def __init__(self, interval_s: float = 2.0, proc_root: str = "/proc", clock=time.monotonic):
        self.interval_s = interval_s
        self._stat_path = os.path.join(proc_root, "stat")
        self._meminfo_path = os.path.join(proc_root, "meminfo")
        self._clock = clock
        self.utilization = 0.0
        self.memory_total = 0.0
        self.memory_used = 0.0
        self._last_cpu = self._read_cpu()  # the baseline, as Triton takes at start
        self._read_memory()
        self._last_read = clock()

    def _read_cpu(self):
        try:
            with open(self._stat_path, "rb") as f:
                line = f.readline().split()
        except OSError:
            return None
        if not line or line[0] != b"cpu":
            return None
        v = [int(x) for x in line[1:9]] + [0] * max(0, 8 - len(line[1:9]))
        user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
        return user + nice + system + irq + softirq + steal, idle + iowait

    def _read_memory(self) -> None:
        values = {}
        try:
            with open(self._meminfo_path, "rb") as f:
                for line in f:
                    name, _, rest = line.partition(b":")
                    if name in (b"MemTotal", b"MemAvailable"):
                        values[name] = int(rest.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            return
        total = values.get(b"MemTotal")
        available = values.get(b"MemAvailable")
        if total is None or available is None or available > total:
            return
        self.memory_total = float(total)
        self.memory_used = float(total - available)

    def refresh(self) -> None:
        """Re-reads /proc if the interval has passed since the last read."""
        now = self._clock()
        if now - self._last_read < self.interval_s:
            return
        self._last_read = now
        cpu = self._read_cpu()
        if cpu is not None and self._last_cpu is not None:
            busy = max(0, cpu[0] - self._last_cpu[0])
            idle = max(0, cpu[1] - self._last_cpu[1])
            self.utilization = busy / (busy + idle) if busy + idle else 0.0
        if cpu is not None:
            self._last_cpu = cpu
        self._read_memory()


# ---------------------------------------------------------------------------
# the collector

_HELP = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count":
        "Number of model executions performed (does not include cached requests)",
    "nv_inference_request_duration_us":
        "Cumulative inference request duration in microseconds (includes cached requests)",
    "nv_inference_queue_duration_us":
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    "nv_inference_compute_input_duration_us":
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    "nv_inference_compute_infer_duration_us":
        "Cumulative compute inference duration in microseconds (does not include cached "
        "requests)",
    "nv_inference_first_response_histogram_ms":
        "Duration from request to first response in milliseconds",
    "nv_inference_request_summary_us": "Summary of inference request duration in microseconds",
    "nv_inference_queue_summary_us": "Summary of inference queuing duration in microseconds",
    "nv_inference_compute_input_summary_us":
        "Summary of compute input duration in microseconds",
    "nv_inference_compute_infer_summary_us":
        "Summary of compute inference duration in microseconds",
    "nv_inference_compute_output_summary_us":
        "Summary of inference compute output duration in microseconds",
    "nv_inference_compute_output_duration_us":
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
    "nv_inference_pending_request_count":
        "Instantaneous number of pending requests awaiting execution per-model.",
    "nv_model_load_duration_secs": "Model load time in seconds",
    "nv_pinned_memory_pool_total_bytes": "Pinned memory pool total memory size, in bytes",
    "nv_pinned_memory_pool_used_bytes": "Pinned memory pool used memory size, in bytes",
    "nv_cache_num_hits_per_model": "Number of cache hits per model",
    "nv_cache_hit_duration_per_model": "Total cache hit duration per model, in microseconds",
    "nv_cache_num_misses_per_model": "Number of cache misses per model",
    "nv_cache_miss_duration_per_model":
        "Total cache miss (insert+lookup) duration per model, in microseconds",
    "nv_cpu_utilization": "CPU utilization rate [0.0 - 1.0]",
    "nv_cpu_memory_total_bytes": "CPU total memory (RAM), in bytes",
    "nv_cpu_memory_used_bytes": "CPU used memory (RAM), in bytes",
}

# (family, engine summary kind): latency summaries, with summary_latencies=true.
_LATENCY_SUMMARIES = (
    ("nv_inference_request_summary_us", "request"),
    ("nv_inference_queue_summary_us", "queue"),
    ("nv_inference_compute_input_summary_us", "compute_input"),
    ("nv_inference_compute_infer_summary_us", "compute_infer"),
    ("nv_inference_compute_output_summary_us", "compute_output"),
)

# (family, statistics key): the latency counters, in µs from the engine's ns.
_LATENCY_COUNTERS = (
    ("nv_inference_request_duration_us", "success"),
    ("nv_inference_queue_duration_us", "queue"),
    ("nv_inference_compute_input_duration_us", "compute_input"),
    ("nv_inference_compute_infer_duration_us", "compute_infer"),
    ("nv_inference_compute_output_duration_us", "compute_output"),
)


def _family(name: str, typ: str) -> TritonMetricFamily:
    return TritonMetricFamily(name, _HELP[name], typ)


def model_labels(mv) -> dict:
    """Triton's per-model labels: model, version and ``_<tag>`` for each
    ``metric_tags`` entry of the config."""
    labels = {"model": mv.name, "version": mv.version_str}
    config = getattr(mv, "config", None)
    if config is not None:
        for tag, value in config.metric_tags.items():
            labels["_" + tag] = value
    return labels


def _cache_enabled(mv) -> bool:
    config = getattr(mv, "config", None)
    return bool(config is not None and config.HasField("response_cache")
                and config.response_cache.enable)


class EngineCollector:
    """A prometheus_client collector over a running Server: each
    ``collect()`` snapshots every loaded model version's engine counters and
    yields Triton's metric families (:class:`TritonMetricFamily`; write them
    with :func:`exposition`). Nothing is recorded between scrapes.

    ``server`` needs ``loaded_versions()``, each item with ``name``,
    ``version_str``, ``stats.snapshot()``, ``load_duration_s`` and ``config``.
    """

    def __init__(self, server, config: MetricsConfig | None = None, host: HostSampler | None = None,
                 gpus=None):
        self._server = server
        self.config = config or MetricsConfig()
        if host is None and self.config.allow_cpu_metrics:
            host = HostSampler(self.config.metrics_interval_ms / 1000.0)
        self._host = host if self.config.allow_cpu_metrics else None
        if gpus is None and self.config.allow_gpu_metrics:
            from pyserver.gpu_metrics import GpuSampler
            gpus = GpuSampler(self.config.metrics_interval_ms / 1000.0)
            if not gpus.gpus:
                log.info("GPU metrics are not collected: %s", gpus.reason)
        self._gpus = gpus if self.config.allow_gpu_metrics else None
        self._labels: dict = {}  # id(ModelVersion) -> (ModelVersion, labels)

    def describe(self):
        # No fixed names to check at registration: the families depend on
        # which models are loaded when scraped.
        return []

    def _labels_of(self, mv) -> dict:
        entry = self._labels.get(id(mv))
        if entry is None or entry[0] is not mv:
            entry = (mv, model_labels(mv))
            self._labels[id(mv)] = entry
        return entry[1]

    def collect(self):
        versions = list(self._server.loaded_versions())
        if len(self._labels) > 2 * len(versions) + 16:  # forget unloaded versions
            live = {id(mv) for mv in versions}
            self._labels = {k: v for k, v in self._labels.items() if k in live}
        rows = [(mv, self._labels_of(mv), mv.stats.snapshot()) for mv in versions]
        yield from self._model_families(rows)
        yield from self._server_families()
        custom = getattr(self._server, "custom_metrics", None)
        if custom is not None:  # families Python models made (pb_utils.MetricFamily)
            yield from custom.families()

    def _model_families(self, rows):
        success = _family("nv_inference_request_success", "counter")
        failure = _family("nv_inference_request_failure", "counter")
        count = _family("nv_inference_count", "counter")
        exec_count = _family("nv_inference_exec_count", "counter")
        for _, labels, snap in rows:
            stats = snap["inference_stats"]
            success.add(labels, stats["success"]["count"])
            reasons = snap["failure_reasons"]
            for reason in FAILURE_REASONS:
                failure.add({**labels, "reason": reason}, reasons.get(reason, 0))
            count.add(labels, snap["inference_count"])
            exec_count.add(labels, snap["execution_count"])
        yield from (success, failure, count, exec_count)

        counters = self.config.counter_latencies
        if counters:
            for name, key in _LATENCY_COUNTERS:
                family = _family(name, "counter")
                for _, labels, snap in rows:
                    family.add(labels, snap["inference_stats"][key]["ns"] // 1000)
                yield family

        pending = _family("nv_inference_pending_request_count", "gauge")
        load = _family("nv_model_load_duration_secs", "gauge")
        for mv, labels, snap in rows:
            pending.add(labels, max(0, snap["pending_count"]))
            load.add(labels, float(getattr(mv, "load_duration_s", 0.0) or 0.0))
        yield pending
        yield load

        # Server-wide, but registered between the model gauges and the cache
        # counters in Triton, so written here. Both read 0 when no CUDA
        # device can pin memory, as in Triton on a machine without a GPU.
        host_memory = getattr(self._server, "host_memory", None)
        pinned_total, pinned_used = host_memory.gauges() if host_memory is not None else (0, 0)
        total = _family("nv_pinned_memory_pool_total_bytes", "gauge")
        total.add({}, pinned_total)
        used = _family("nv_pinned_memory_pool_used_bytes", "gauge")
        used.add({}, pinned_used)
        yield total
        yield used

        # Cache counters: models with response_cache.enable only, and only
        # with the latency counters on (as Triton's MetricModelReporter).
        cached = [(labels, snap) for mv, labels, snap in rows if _cache_enabled(mv)]
        if counters and cached:
            hits = _family("nv_cache_num_hits_per_model", "counter")
            hit_us = _family("nv_cache_hit_duration_per_model", "counter")
            misses = _family("nv_cache_num_misses_per_model", "counter")
            miss_us = _family("nv_cache_miss_duration_per_model", "counter")
            for labels, snap in cached:
                stats = snap["inference_stats"]
                hits.add(labels, stats["cache_hit"]["count"])
                hit_us.add(labels, stats["cache_hit"]["ns"] // 1000)
                misses.add(labels, stats["cache_miss"]["count"])
                miss_us.add(labels, stats["cache_miss"]["ns"] // 1000)
            yield from (hits, hit_us, misses, miss_us)

        # Registered after the cache counters in Triton, then the summaries.
        if self.config.histogram_latencies:
            yield self._first_response_histogram(rows)
        if self.config.summary_latencies:
            quantiles = [q for q, _ in self.config.summary_quantiles]
            for name, kind in _LATENCY_SUMMARIES:
                family = _family(name, "summary")
                for mv, labels, _ in rows:
                    values, n, total_ns = mv.stats.summary(kind, quantiles)
                    for q, v in zip(quantiles, values):
                        family.add_sample(name, {**labels, "quantile": _format_value(q)}, v / 1000.0)
                    family.add_sample(name + "_sum", labels, total_ns / 1000.0)
                    family.add_sample(name + "_count", labels, n)
                yield family

    @staticmethod
    def _first_response_histogram(rows) -> TritonMetricFamily:
        """As prometheus-cpp writes a histogram: _count, _sum, then the
        cumulative _bucket lines up to le="+Inf"."""
        name = FIRST_RESPONSE_FAMILY
        family = _family(name, "histogram")
        for mv, labels, _ in rows:
            histogram = mv.stats.first_response_histogram()
            if histogram is None:
                continue
            bounds, counts, n, total_ms = histogram
            family.add_sample(name + "_count", labels, n)
            family.add_sample(name + "_sum", labels, total_ms)
            cumulative = 0
            for bound, count in zip([*bounds, math.inf], counts):
                cumulative += count
                family.add_sample(name + "_bucket", {**labels, "le": _format_value(bound)},
                                  cumulative)
        return family

    def _server_families(self):
        if self._gpus is not None:  # registered before the CPU ones in Triton
            from pyserver.gpu_metrics import GPU_HELP
            for name, typ, samples in self._gpus.families():
                family = TritonMetricFamily(name, GPU_HELP[name], typ)
                for labels, value in samples:
                    family.add(labels, value)
                yield family
        host = self._host
        if host is None:
            return
        host.refresh()
        for name, value in (("nv_cpu_utilization", host.utilization),
                            ("nv_cpu_memory_total_bytes", host.memory_total),
                            ("nv_cpu_memory_used_bytes", host.memory_used)):
            family = _family(name, "gauge")
            family.add({}, value)
            yield family


# ---------------------------------------------------------------------------
# custom metrics (pb_utils.MetricFamily / Metric from Python models)

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_KINDS = {0: "counter", 1: "gauge", 2: "histogram"}
_KIND_ENUM = {"counter": "TRITONSERVER_METRIC_KIND_COUNTER",
              "gauge": "TRITONSERVER_METRIC_KIND_GAUGE",
              "histogram": "TRITONSERVER_METRIC_KIND_HISTOGRAM"}


class CustomMetricError(Exception):
    """A metric operation Triton refuses; ``code`` is the Triton code name."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class _CustomValue:
    """One labelled metric: its value (or histogram buckets) and who made it."""

    __slots__ = ("labels", "value", "buckets", "counts", "sum", "owners")

    def __init__(self, labels: dict, buckets):
        self.labels = labels
        self.value = 0.0
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1) if buckets is not None else None
        self.sum = 0.0
        self.owners: dict = {}  # owner -> number of Metric objects it made


class _CustomFamily:
    __slots__ = ("name", "description", "kind", "values", "owners")

    def __init__(self, name: str, description: str, kind: str):
        self.name = name
        self.description = description
        self.kind = kind
        self.values: dict = {}  # sorted label items -> _CustomValue
        self.owners: dict = {}


class CustomMetrics:
    """The metric families Python models create, as prometheus-cpp keeps
    them in Triton: one family per name (made again with the same kind, it
    is the same family), one metric per label set (made again, the same
    metric). Ids name families and metrics to the models' workers. What an
    owner (a model instance) made goes away with it (``drop_owner``); a
    family or metric another owner still holds stays."""

    def __init__(self):
        import threading

        self._lock = threading.Lock()
        self._families: dict[str, _CustomFamily] = {}
        self._ids: dict[int, object] = {}
        self._next = 1

    def _new_id(self, obj) -> int:
        ident = self._next
        self._next += 1
        self._ids[ident] = obj
        return ident

    def new_family(self, name: str, description: str, kind: int, owner) -> int:
        typ = _KINDS.get(kind)
        if typ is None:
            raise CustomMetricError("INVALID_ARG", "Unknown metric kind")
        if not isinstance(name, str) or not _METRIC_NAME.match(name):
            raise CustomMetricError("INVALID_ARG", f"Invalid metric name: '{name}'")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _CustomFamily(name, str(description), typ)
            elif family.kind != typ:
                raise CustomMetricError(
                    "INVALID_ARG",
                    f"Metric family '{name}' already exists with kind "
                    f"{_KIND_ENUM[family.kind]}, not {_KIND_ENUM[typ]}")
            family.owners[owner] = family.owners.get(owner, 0) + 1
            return self._new_id(("family", family))

    def new_metric(self, family_id: int, labels: dict, buckets, owner) -> int:
        with self._lock:
            entry = self._ids.get(family_id)
            if entry is None or entry[0] != "family":
                raise CustomMetricError("INTERNAL", "Metric family has been deleted")
            family = entry[1]
            for key, value in labels.items():
                if not _LABEL_NAME.match(str(key)) or str(key).startswith("__"):
                    raise CustomMetricError("INVALID_ARG", f"Invalid label name: '{key}'")
                if not isinstance(value, str):
                    raise CustomMetricError("INVALID_ARG",
                                            f"Label '{key}' must have a string value")
            if family.kind == "histogram":
                buckets = [float(b) for b in buckets]
                if buckets != sorted(buckets):
                    raise CustomMetricError("INVALID_ARG",
                                            "Histogram buckets must be in increasing order")
            else:
                buckets = None
            key = tuple(sorted(labels.items()))
            value = family.values.get(key)
            if value is None:
                value = family.values[key] = _CustomValue(dict(labels), buckets)
            value.owners[owner] = value.owners.get(owner, 0) + 1
            return self._new_id(("metric", family, value))

    def _metric(self, metric_id: int):
        entry = self._ids.get(metric_id)
        if entry is None or entry[0] != "metric":
            raise CustomMetricError("INTERNAL", "Metric has been invalidated.")
        return entry[1], entry[2]

    def operate(self, metric_id: int, op: str, amount: float = 0.0):
        with self._lock:
            family, value = self._metric(metric_id)
            kind = _KIND_ENUM[family.kind]
            if op == "value":
                if family.kind == "histogram":
                    raise CustomMetricError("UNSUPPORTED", f"{kind} does not support Value")
                return value.value
            if op == "increment":
                if family.kind == "histogram":
                    raise CustomMetricError("UNSUPPORTED", f"{kind} does not support Increment")
                if family.kind == "counter" and amount < 0:
                    raise CustomMetricError(
                        "INVALID_ARG", f"{kind} can only be incremented monotonically by "
                                       "non-negative values.")
                value.value += amount
            elif op == "set":
                if family.kind != "gauge":
                    raise CustomMetricError("UNSUPPORTED", f"{kind} does not support Set")
                value.value = amount
            elif op == "observe":
                if family.kind != "histogram":
                    raise CustomMetricError("UNSUPPORTED", f"{kind} does not support Observe")
                i = 0
                while i < len(value.buckets) and amount > value.buckets[i]:
                    i += 1
                value.counts[i] += 1
                value.sum += amount
            else:
                raise CustomMetricError("INTERNAL", "Unknown metric operation")
            return None

    def drop_owner(self, owner) -> None:
        """Forgets what ``owner`` made, unless another owner holds it too."""
        with self._lock:
            for name, family in list(self._families.items()):
                for key, value in list(family.values.items()):
                    value.owners.pop(owner, None)
                    if not value.owners:
                        del family.values[key]
                family.owners.pop(owner, None)
                if not family.owners:
                    del self._families[name]
            live = set(map(id, self._families.values()))
            self._ids = {k: v for k, v in self._ids.items()
                         if id(v[1]) in live and (v[0] == "family" or v[2].owners)}

    def families(self):
        """The families as Triton's /metrics shows them (prometheus-cpp: a
        histogram as _count, _sum, then cumulative _bucket lines)."""
        out = []
        with self._lock:
            for family in self._families.values():
                metric = TritonMetricFamily(family.name, family.description, family.kind)
                for value in family.values.values():
                    if family.kind != "histogram":
                        metric.add(value.labels, value.value)
                        continue
                    total = sum(value.counts)
                    metric.add_sample(family.name + "_count", value.labels, total)
                    metric.add_sample(family.name + "_sum", value.labels, value.sum)
                    running = 0
                    for bound, count in zip(value.buckets + [math.inf], value.counts):
                        running += count
                        metric.add_sample(family.name + "_bucket",
                                          {**value.labels, "le": _format_value(bound)}, running)
                out.append(metric)
        return out
