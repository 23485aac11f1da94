"""ORCA endpoint load reports on the generate routes (Triton 2.56+).

A request that carries ``endpoint-load-metrics-format: json`` or ``text``
is answered with an ``endpoint-load-metrics`` header that gateway load
balancers read: the KV-cache utilization and token capacity, derived from
the ``nv_trt_llm_kv_cache_block_metrics`` gauges a model reports
(TensorRT-LLM's backend does; a Python model may, with pb_utils.MetricFamily)
by their ``kv_cache_block_type`` label: ``tokens_per``, ``used``, ``max``.
Without all three, or with another format, no header is written and the
reason is logged, as Triton does."""

from __future__ import annotations

import logging

__all__ = ["FORMAT_HEADER", "KV_CACHE_FAMILY", "REPORT_HEADER", "load_report"]

log = logging.getLogger("pyserver")

FORMAT_HEADER = b"endpoint-load-metrics-format"
REPORT_HEADER = b"endpoint-load-metrics"
KV_CACHE_FAMILY = "nv_trt_llm_kv_cache_block_metrics"
_BLOCK_TYPE = "kv_cache_block_type"
_BLOCK_TYPES = ("tokens_per", "used", "max")


def _kv_blocks(custom_metrics) -> dict[str, float]:
    """The three block gauges; the last one reported wins when several
    models report them (Triton reads the exposition top to bottom)."""
    found: dict[str, float] = {}
    if custom_metrics is None:
        return found
    for name, _, _, samples in custom_metrics.snapshot():
        if name != KV_CACHE_FAMILY:
            continue
        for labels, value, *_ in samples:
            kind = labels.get(_BLOCK_TYPE)
            # Triton's pattern reads unsigned numbers only.
            if kind in _BLOCK_TYPES and value >= 0:
                found[kind] = float(value)
    return found


def load_report(requested: bytes | None, custom_metrics) -> bytes | None:
    """The ``endpoint-load-metrics`` value for a request whose format header
    says ``requested`` (None: the header is absent, nothing to do)."""
    if requested is None:
        return None
    fmt = requested.decode("latin-1")
    blocks = _kv_blocks(custom_metrics)
    value = None
    if len(blocks) < len(_BLOCK_TYPES):
        log.error("One or more of the kv metrics was not found or invalid.")
    elif fmt in ("json", "text"):
        used, most = blocks["used"], blocks["max"]
        utilization = used / most if most > 0 else 0.0
        capacity = int(most * blocks["tokens_per"])
        if fmt == "json":
            value = ('JSON {"named_metrics":{"kv_cache_utilization":%r,'
                     '"max_token_capacity":%d}}' % (utilization, capacity))
        else:
            value = ("TEXT named_metrics.kv_cache_utilization=%f, "
                     "named_metrics.max_token_capacity=%d" % (utilization, capacity))
    else:
        log.error("orca_type is set to an invalid type: %s", fmt)
    if value is None:
        log.error("ENDPOINT_LOAD_METRICS_TYPE request header is set but extracted_kv_metrics "
                  "is empty, no header written. orca_type=%s", fmt)
        return None
    return value.encode()
