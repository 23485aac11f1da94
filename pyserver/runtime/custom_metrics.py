"""The store of the metrics Python models make (pb_utils.MetricFamily and
Metric): families, labelled metrics and their values, shared by every
instance that makes the same one. A runtime service (ServerContext
.custom_metrics): models write it through the Python backend, the metrics
endpoint reads its snapshot."""

from __future__ import annotations

import re
import threading

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
        self._lock = threading.Lock()
        self._families: dict[str, _CustomFamily] = {}
        self._ids: dict[int, object] = {}
        self._next = 1
        self._sources: list = []  # other stores' snapshot functions (Triton C backends')

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

    def add_source(self, snapshot) -> None:
        """Families kept elsewhere (a callable returning what snapshot()
        returns: the custom metrics Triton C backends make in
        libtritonserver.so) shown with these."""
        with self._lock:
            if snapshot not in self._sources:
                self._sources.append(snapshot)

    def snapshot(self) -> list:
        """Every family as (name, description, kind, [(labels, value, sum,
        buckets, counts)]): a counter's or gauge's value, a histogram's sum,
        bucket bounds and per-bucket counts (the metrics endpoint writes
        them out, frontends/metrics/collector.py)."""
        out = []
        with self._lock:
            for family in self._families.values():
                values = [(dict(v.labels), v.value, v.sum, list(v.buckets), list(v.counts))
                          if family.kind == "histogram" else (dict(v.labels), v.value, 0.0, [], [])
                          for v in family.values.values()]
                out.append((family.name, family.description, family.kind, values))
            sources = list(self._sources)
        for source in sources:
            out.extend(source())
        return out
