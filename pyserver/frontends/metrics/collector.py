"""Triton's Prometheus metrics, read from the engine's C++ counters at scrape
time.

Nothing here runs per request: every model version keeps its counters in
csrc (``pyserver::ModelStats``, relaxed atomics bumped by the scheduler and
instance threads), and :class:`EngineCollector` turns one snapshot of them
into metric families when ``/metrics`` is scraped. The names, HELP texts,
types, labels and family order are Triton's (core ``src/metrics.cc`` and
``src/metric_model_reporter.cc``). GPU metrics (``nv_gpu_*``,
``nv_energy_consumption``) come from NVML (gpu.py) where the driver is
present, with ``--allow-gpu-metrics``; the models' own metrics from the
server's custom metric store (runtime/custom_metrics.py).
"""

from __future__ import annotations

import logging
import math

from pyserver.config import FIRST_RESPONSE_FAMILY
from pyserver.frontends.metrics.config import FAILURE_REASONS, MetricsConfig
from pyserver.frontends.metrics.exposition import TritonMetricFamily, _format_value
from pyserver.frontends.metrics.host import HostSampler

log = logging.getLogger("pyserver")

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
            from pyserver.frontends.metrics.gpu import GpuSampler
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
            yield from custom_families(custom)

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
            from pyserver.frontends.metrics.gpu import GPU_HELP
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


def custom_families(custom) -> list:
    """The models' own metric families (a CustomMetrics snapshot) as Triton's
    /metrics shows them (prometheus-cpp: a histogram as _count, _sum, then
    cumulative _bucket lines)."""
    out = []
    for name, description, kind, values in custom.snapshot():
        metric = TritonMetricFamily(name, description, kind)
        for labels, value, total, buckets, counts in values:
            if kind != "histogram":
                metric.add(labels, value)
                continue
            metric.add_sample(name + "_count", labels, sum(counts))
            metric.add_sample(name + "_sum", labels, total)
            running = 0
            for bound, count in zip(buckets + [math.inf], counts):
                running += count
                metric.add_sample(name + "_bucket", {**labels, "le": _format_value(bound)}, running)
        out.append(metric)
    return out
