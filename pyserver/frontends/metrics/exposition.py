"""Prometheus text as Triton writes it (prometheus-cpp): a counter under its
own name (no ``_total``), labels sorted by name, values as C++ ``ostream``
prints them with 16 digits. prometheus_client's generate_latest would add
``_total`` and print ``3.0``, so :func:`exposition` writes the families
built here (:class:`TritonMetricFamily`) the Triton way, and any other
collector in the same registry the prometheus_client way."""

from __future__ import annotations

import math

from prometheus_client.exposition import generate_latest as _prometheus_generate_latest
from prometheus_client.metrics_core import Metric

# prometheus-cpp's exposer (Triton) answers with the 0.0.4 text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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
