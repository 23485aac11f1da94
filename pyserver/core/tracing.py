"""Request tracing (Triton's trace extension, TIMESTAMPS level).

Every trace_rate-th request of a model is traced, until trace_count runs
out (-1: no limit). A traced request collects the engine clock's timestamps
REQUEST_START, QUEUE_START, COMPUTE_START, COMPUTE_INPUT_END,
COMPUTE_OUTPUT_START, COMPUTE_END and REQUEST_END, and is written to
trace_file as Triton writes traces: a JSON array of
{"id", "model_name", "model_version", "timestamps": [{"name", "ns"}]}.
With log_frequency N > 0 every N traces go to "<trace_file>.<k>"; with 0
they are written when tracing settings change and at shutdown.

Nothing here runs per request while tracing is off: the server checks one
flag.
"""

from __future__ import annotations

import json
import logging

from pyserver.core.settings import TraceSettings

log = logging.getLogger("pyserver")


class Tracer:
    def __init__(self, settings: TraceSettings):
        self.settings = settings
        self.active = False
        self._seen: dict[str, int] = {}
        self._next_id = 1
        self._pending: dict[str, list] = {}  # trace_file -> finished traces
        self._file_index: dict[str, int] = {}
        self.refresh([])

    def refresh(self, model_names) -> None:
        """Recomputes whether any model may be traced (after a settings change)."""
        def on(values):
            return "TIMESTAMPS" in values["trace_level"] and bool(values["trace_file"])
        self.active = on(self.settings.as_dict()) or any(
            on(self.settings.as_dict(name)) for name in model_names)

    def sample(self, model_name: str, model_version: int, now_ns: int):
        """A new trace record when this request is to be traced, else None."""
        values = self.settings.as_dict(model_name)
        if "TIMESTAMPS" not in values["trace_level"] or not values["trace_file"]:
            return None
        count = int(values["trace_count"])
        if count == 0:
            return None
        seen = self._seen.get(model_name, 0) + 1
        self._seen[model_name] = seen
        rate = max(1, int(values["trace_rate"]))
        if seen % rate:
            return None
        if count > 0:
            self.settings.consume_count(model_name)
        record = {"id": self._next_id, "model_name": model_name, "model_version": model_version,
                  "timestamps": [{"name": "REQUEST_START", "ns": now_ns}],
                  "_file": values["trace_file"], "_every": int(values["log_frequency"])}
        self._next_id += 1
        return record

    def finish(self, record: dict, now_ns: int) -> None:
        record["timestamps"].append({"name": "REQUEST_END", "ns": now_ns})
        path = record.pop("_file")
        every = record.pop("_every")
        traces = self._pending.setdefault(path, [])
        traces.append(record)
        if every > 0 and len(traces) >= every:
            index = self._file_index.get(path, 0)
            self._file_index[path] = index + 1
            self._write(f"{path}.{index}", traces)
            self._pending[path] = []

    def flush(self) -> None:
        """Writes traces not yet written (log_frequency 0, or a partial group)."""
        for path, traces in list(self._pending.items()):
            if not traces:
                continue
            if path in self._file_index:  # written in groups: the rest is the next group
                index = self._file_index[path]
                self._file_index[path] = index + 1
                self._write(f"{path}.{index}", traces)
            else:
                self._write(path, traces)
            self._pending[path] = []

    @staticmethod
    def _write(path: str, traces: list) -> None:
        try:
            with open(path, "w") as f:
                json.dump(traces, f)
        except OSError as err:
            log.error("cannot write trace file %s: %s", path, err.strerror)
