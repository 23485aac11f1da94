"""Request tracing (Triton's trace extension, TIMESTAMPS and TENSORS levels).

Every trace_rate-th request of a model is traced, until trace_count runs
out (-1: no limit). At TIMESTAMPS a traced request collects the engine
clock's timestamps REQUEST_START, QUEUE_START, COMPUTE_START,
COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END and REQUEST_END; at
TENSORS its tensors, as TENSOR_QUEUE_INPUT (the inputs as queued),
TENSOR_BACKEND_INPUT (as the backend got them) and TENSOR_BACKEND_OUTPUT
(each output of its response) entries:
{"id", "activity", "tensor": {"name", "data": "v,v,...", "shape": "d,d",
"dtype"}}, values written as C++ streams them, BYTES elements quoted,
FP16/BF16 left empty (as Triton does). Traces go to trace_file as Triton
writes them: a JSON array of {"id", "model_name", "model_version",
"request_id" (when the request has one), "parent_id" (for a child),
"timestamps": [{"name", "ns"}]} records and those tensor entries.

Only a client's request is sampled. A request the server makes itself is
traced as Triton traces it, as a child of the request it serves, or not at
all: an ensemble's steps when the ensemble request is traced, a BLS call
when the model passed ``trace=request.trace()``. A child takes its parent's
level and file, its own id, and "parent_id": the parent's id; it does not
count against trace_rate or trace_count.

A frontend that times its side of a request (HTTP_RECV_START/END and
HTTP_SEND_START/END, GRPC_WAITREAD_START/END and GRPC_SEND_START/END, as
Triton's frontends stamp them, so that Triton's trace_summary.py reads our
files) sets ``request.trace`` to its receive stamps before it submits
(``frontend_received``); a sampled request's record then starts with them,
takes the place of the tuple in ``request.trace``, and waits for the
frontend's send stamps (``sent``) before it is written.
With log_frequency N > 0 every N traces go to "<trace_file>.<k>"; with 0
they are written when tracing settings change and at shutdown.

A program that embeds the server through Triton's C API traces its own
requests (TRITONSERVER_InferenceTraceNew, given to ServerInferAsync): such a
request arrives with ``parent_trace`` a ``ProgramTraceRef``, is traced at
that trace's level under its id whatever the settings say, and so are the
requests spawned for it (its children). Their records go back to the
program (``ProgramTraceRef.report``: its callbacks, then its release
callback) instead of to a file; their tensors are kept as arrays. While
any is in flight the tracer is ``active`` (``on_change`` tells the server).

Nothing here runs per request while tracing is off: the server checks one
flag.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import numpy as np

from pyserver.engine.trace_id import next_trace_id
from pyserver.kernel.dtypes import numpy_to_wire
from pyserver.runtime.settings import TraceSettings

if TYPE_CHECKING:  # loaded only where a C program's trace arrives
    from pyserver.engine.triton_bls import ProgramTraceRef

log = logging.getLogger("pyserver")

# Traces kept open for children to name at most; past it the oldest goes.
MAX_OPEN = 65536


class Tracer:
    def __init__(self, settings: TraceSettings):
        self.settings = settings
        self.active = False
        self._settings_on = False  # some model's settings trace
        self._programs = 0  # programs' traces given to requests and not yet reported
        # Called when ``active`` changes without a settings change (a
        # program's trace comes or goes): the server re-applies it.
        self.on_change = None
        self._seen: dict[str, int] = {}
        self._pending: dict[str, list] = {}  # trace_file -> finished traces
        self._file_index: dict[str, int] = {}
        # Traces begun and not finished, by id: the parents a child may name
        # (a Python model's BLS call names its request's trace by id).
        self._open: dict[int, dict] = {}
        self.refresh([])

    def refresh(self, model_names) -> None:
        """Recomputes whether any model may be traced (after a settings change)."""
        self._settings_on = _on(self.settings.as_dict()) or any(
            _on(self.settings.as_dict(name)) for name in model_names)
        self._set_active()

    def _set_active(self) -> None:
        self.active = self._settings_on or self._programs > 0

    def program_begun(self) -> None:
        """A request with a program's trace is about to be submitted: tracing
        is on from here (the server's start() then records it)."""
        self._programs += 1
        if not self.active:
            self._changed()

    def program_settled(self, ref: ProgramTraceRef) -> None:
        """After that submit: a trace no record was made for (the request
        was refused before its queue, or answered from the cache) goes back
        to its program now, with no activities."""
        if not ref.recorded:
            release_unrecorded(ref)
            self._program_done()

    def _program_done(self) -> None:
        self._programs -= 1
        if self._programs == 0 and not self._settings_on:
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()  # refresh(), then the models' flags
        else:
            self._set_active()

    def start(self, model_name: str, model_version: int, now_ns: int, request):
        """The trace record of a request on its way into a model, or None:
        sampled for a client's request, a child of ``request.parent_trace``
        for one the server made (0: not traced)."""
        parent = request.parent_trace
        if parent is None:
            return self.sample(model_name, model_version, now_ns, request)
        if not parent:
            return None
        if type(parent) is int:  # the id of the trace it belongs under
            return self.child(parent, model_name, model_version, now_ns, request)
        # a program's own trace (engine/triton_bls.ProgramTraceRef)
        parent.recorded = True
        record = self._record(model_name, model_version, request, None, 0, parent.timestamps,
                              parent.tensors, now_ns, parent.parent_id, program=parent,
                              trace_id=parent.id)
        record["_program_own"] = True  # reporting it ends the program's hold
        return record

    def child(self, parent_id: int, model_name: str, model_version: int, now_ns: int, request):
        """A record under the open trace ``parent_id`` (None when that one
        has finished or was never begun)."""
        parent = self._open.get(parent_id)
        if parent is None:
            return None
        return self._record(model_name, model_version, request, parent.get("_file"),
                            parent.get("_every", 0), "timestamps" in parent,
                            "_tensors" in parent, now_ns, parent_id, parent.get("_program"))

    def sample(self, model_name: str, model_version: int, now_ns: int, request=None):
        """A new trace record when this request is to be traced, else None."""
        values = self.settings.as_dict(model_name)
        if not _on(values):
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
        levels = values["trace_level"]
        record = self._record(model_name, model_version, request, values["trace_file"],
                              int(values["log_frequency"]), "TIMESTAMPS" in levels,
                              "TENSORS" in levels, now_ns)
        received = request.trace if request is not None else None
        if type(received) is tuple and "timestamps" in record:
            record["timestamps"][:0] = [{"name": received[0], "ns": received[1]},
                                        {"name": received[2], "ns": received[3]}]
            record["_held"] = True  # until the frontend's send stamps (sent)
            request.trace = record
        return record

    @staticmethod
    def frontend_received(request, start_name: str, start_ns: int, end_name: str,
                          end_ns: int) -> None:
        """A frontend's receive stamps for ``request``, before it is submitted."""
        request.trace = (start_name, start_ns, end_name, end_ns)

    def sent(self, request, start_name: str, start_ns: int, end_name: str, end_ns: int) -> None:
        """A frontend's send stamps for a request it gave receive stamps:
        its trace, if it was sampled, is complete and written."""
        record = request.trace
        if type(record) is not dict:
            return  # not sampled
        request.trace = None
        record["timestamps"] += [{"name": start_name, "ns": start_ns},
                                 {"name": end_name, "ns": end_ns}]
        finished = record.pop("_finished", None)
        record.pop("_held", None)
        if finished is not None:  # else the server never finished it: dropped
            self._write_finished(record, finished)

    def _record(self, model_name, model_version, request, path, every, timestamps, tensors,
                now_ns, parent_id=0, program=None, trace_id=0) -> dict:
        """A new trace record: written to ``path`` (every ``every``
        records), or reported to ``program`` (a ProgramTraceRef). Its id is
        ``trace_id`` (a program's trace's own) or a new one."""
        trace_id = trace_id or next_trace_id()
        # the header's fields in Triton's order
        record = {"id": trace_id, "model_name": model_name, "model_version": model_version}
        if request is not None and request.id:
            record["request_id"] = request.id
        if parent_id:
            record["parent_id"] = parent_id
        if program is not None:
            record["_program"] = program
        else:
            record["_file"] = path
            record["_every"] = every
        if timestamps:
            record["timestamps"] = [{"name": "REQUEST_START", "ns": now_ns}]
        if tensors:
            record["_tensors"] = []
            for t in (request.inputs if request is not None else ()):
                self._tensor(record, "TENSOR_QUEUE_INPUT", t.name, t.datatype, t.data)
        if len(self._open) >= MAX_OPEN:  # one never finished must not pin the rest
            del self._open[next(iter(self._open))]
        self._open[trace_id] = record
        return record

    @staticmethod
    def queued(record: dict, now_ns: int) -> None:
        """QUEUE_START of a request that does not wait in a model's queue
        (an ensemble's, which goes to its steps at once)."""
        stamps = record.get("timestamps")
        if stamps is not None:
            stamps.append({"name": "QUEUE_START", "ns": now_ns})

    @staticmethod
    def _tensor(record: dict, activity: str, name: str, datatype: str, data) -> None:
        """A tensor entry of ``record``: as written to a file, or the array
        itself for a program."""
        if "_program" in record:
            record["_tensors"].append((activity, name, datatype, data))
        else:
            record["_tensors"].append(tensor_entry(record["id"], activity, name, datatype, data))

    @classmethod
    def backend_inputs(cls, record: dict, arrays: dict) -> None:
        """TENSOR_BACKEND_INPUT entries: the request's inputs as its backend got them."""
        if "_tensors" in record:
            for name, value in arrays.items():
                cls._tensor(record, "TENSOR_BACKEND_INPUT", name, numpy_to_wire(value.dtype),
                            value)

    def activity(self, trace_id: int, name: str, ns: int) -> None:
        """A backend's own activity (TRITONSERVER_InferenceTraceReportActivity)
        in the open trace ``trace_id``, at the TIMESTAMPS level."""
        record = self._open.get(trace_id)
        if record is not None and "timestamps" in record:
            record["timestamps"].append({"name": name, "ns": ns})

    def discard(self, record: dict) -> None:
        """Forgets a trace whose request never ran (refused at the queue); a
        program's goes back to it with what it recorded."""
        self._open.pop(record["id"], None)
        if "_program" in record:
            self._report(record, None)

    def end_in_two_parts(self, record: dict) -> None:
        """A decoupled model's request: its trace stays open (its model's BLS
        calls are children of it) until finish() has been called twice, as
        its batch completes and as its final response is delivered, in
        either order; as Triton's, which lives until the request is released."""
        record["_parts"] = 2

    def finish(self, record: dict, now_ns: int, response=None) -> None:
        parts = record.get("_parts")
        if parts is not None and parts > 1:
            record["_parts"] = parts - 1
            return
        self._open.pop(record["id"], None)
        if "timestamps" in record:
            record["timestamps"].append({"name": "REQUEST_END", "ns": now_ns})
        if record.get("_held"):  # written once its frontend adds the send stamps
            record["_finished"] = (response,)
            return
        self._write_finished(record, (response,))

    def _write_finished(self, record: dict, finished: tuple) -> None:
        response = finished[0]
        if "_program" in record:
            self._report(record, response)
            return
        path = record.pop("_file")
        every = record.pop("_every")
        entries = record.pop("_tensors", None)
        traces = self._pending.setdefault(path, [])
        traces.append(record)
        if entries is not None:
            for t in getattr(response, "outputs", None) or ():
                entries.append(tensor_entry(record["id"], "TENSOR_BACKEND_OUTPUT", t.name,
                                            t.datatype, t.data))
            traces.extend(entries)
        if every > 0 and len(traces) >= every:
            index = self._file_index.get(path, 0)
            self._file_index[path] = index + 1
            self._write(f"{path}.{index}", traces)
            self._pending[path] = []

    def _report(self, record: dict, response) -> None:
        """A program's record, to its program; its own trace's ends the
        program's hold on tracing."""
        tensors = record.get("_tensors")
        if tensors is not None:
            for t in getattr(response, "outputs", None) or ():
                self._tensor(record, "TENSOR_BACKEND_OUTPUT", t.name, t.datatype, t.data)
        program = record.pop("_program")
        own = record.pop("_program_own", False)
        program.report(own, record["id"], record.get("parent_id", 0), record["model_name"],
                       record["model_version"], record.get("request_id", ""),
                       [(t["name"], t["ns"]) for t in record.get("timestamps", ())],
                       tensors or [])
        if own:
            self._program_done()

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


def release_unrecorded(ref: ProgramTraceRef) -> None:
    """A program's trace that recorded nothing, back to its program."""
    if not ref.recorded:
        ref.recorded = True
        ref.report(True, ref.id, ref.parent_id, "", -1, "", [], [])


def _on(values: dict) -> bool:
    levels = values["trace_level"]
    return ("TIMESTAMPS" in levels or "TENSORS" in levels) and bool(values["trace_file"])


def _stream_value(value) -> str:
    """A number as a C++ ostream writes it by default (6 significant digits)."""
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return "%g" % value
    return str(value)


def tensor_entry(trace_id: int, activity: str, name: str, datatype: str, data) -> dict:
    """One tensor activity of a trace, as Triton's tracer serializes it."""
    array = np.asarray(data)
    if datatype == "BYTES":
        text = ",".join('"%s"' % (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
                        for v in array.reshape(-1))
    elif datatype in ("FP16", "BF16"):
        text = ""  # Triton leaves them out
    elif datatype == "BOOL":
        text = ",".join("1" if v else "0" for v in array.reshape(-1))
    else:
        text = ",".join(_stream_value(v) for v in array.reshape(-1).tolist())
    return {"id": trace_id, "activity": activity,
            "tensor": {"name": name, "data": text,
                       "shape": ",".join(str(d) for d in array.shape), "dtype": datatype}}

