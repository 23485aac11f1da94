"""Server-wide settings changed at run time through the logging and trace
extensions, validated as Triton validates them."""

from __future__ import annotations

import json
import logging
import os
import re
import time

from pyserver.kernel.errors import invalid_arg

log = logging.getLogger("pyserver")

LOG_FORMATS = ("default", "ISO8601")
_LEVEL_LETTERS = {logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "E"}
# The console's handler (set by the command line), which log_format also shapes.
console_handler: logging.Handler | None = None


def escape_log_messages() -> bool:
    """Whether log messages are written as JSON strings (Triton's
    TRITON_SERVER_ESCAPE_LOG_MESSAGES, on unless "0")."""
    return os.environ.get("TRITON_SERVER_ESCAPE_LOG_MESSAGES") != "0"


class TritonLogFormatter(logging.Formatter):
    """Log lines as Triton writes them: ``I1201 01:57:00.327881 <pid>
    <file>:<line>] "message"`` (``default``) or ``2026-12-01T01:57:00Z I
    <pid> <file>:<line>] "message"`` (``ISO8601``), in UTC. The message is
    JSON-escaped and quoted unless TRITON_SERVER_ESCAPE_LOG_MESSAGES=0; one
    that starts on a new line (a table) is written as it is, as Triton's
    tables are."""

    def __init__(self, log_format: str = "default"):
        super().__init__()
        self.log_format = log_format
        self.escape = escape_log_messages()

    def format(self, record: logging.LogRecord) -> str:
        level = _LEVEL_LETTERS.get(record.levelno, "I")
        t = time.gmtime(record.created)
        if self.log_format == "ISO8601":
            head = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', t)} {level}"
        else:
            micros = int((record.created % 1) * 1e6)
            head = f"{level}{time.strftime('%m%d %H:%M:%S', t)}.{micros:06d}"
        message = record.getMessage()
        if self.escape and not message.startswith("\n"):
            message = json.dumps(message, ensure_ascii=False)
        line = f"{head} {record.process} {record.filename}:{record.lineno}] {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def console(log_format: str = "default") -> logging.Handler:
    """The console's handler (stderr, Triton's lines), made once; the
    logging settings' log_format reshapes it."""
    global console_handler
    if console_handler is None:
        console_handler = logging.StreamHandler()
        console_handler.setFormatter(TritonLogFormatter(log_format))
    return console_handler


def log_to_console_if_unconfigured(log_format: str = "default") -> None:
    """For a server inside another program: Triton's core writes its log to
    stderr, so pyserver's logger gets the console unless the program has
    set up logging of its own (then its handlers get the records)."""
    handler = console(log_format)
    if not logging.getLogger().handlers and handler not in log.handlers:
        log.addHandler(handler)


class LoggerState:
    """The 'pyserver' logger's level and handlers when made; ``restore()``
    puts them back (a server inside another program leaves that program's
    logging as it found it when it stops)."""

    def __init__(self):
        self.level = log.level
        self.handlers = list(log.handlers)

    def restore(self) -> None:
        for handler in list(log.handlers):
            if handler not in self.handlers:
                log.removeHandler(handler)
                if handler is not console_handler:
                    handler.close()
        log.setLevel(self.level)


# Called with the logging settings each time they are applied (and at once
# when added): what logs beside the 'pyserver' logger follows them (Triton C
# backends' TRITONSERVER_LogMessage).
_log_listeners: list = []
_log_values: dict | None = None


def follow_log_settings(listener) -> None:
    """``listener(values)`` now with the settings last applied (if any), and
    whenever they change."""
    _log_listeners.append(listener)
    if _log_values is not None:
        listener(dict(_log_values))


class LogSettings:
    """The logging extension's settings, applied to the 'pyserver' logger."""

    def __init__(self):
        self.values = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                       "log_verbose_level": 0, "log_format": "default"}
        self._file_handler = None

    def as_dict(self) -> dict:
        return dict(self.values)

    def update(self, update: dict) -> None:
        """As Triton's handlers: a key they do not read, or one given null,
        is passed over. (Each protocol's frontend checks the types first,
        in its own words.)"""
        new = dict(self.values)
        for key, value in update.items():
            if key not in new or value is None:
                continue
            if key in ("log_info", "log_warning", "log_error"):
                if not isinstance(value, bool):
                    raise invalid_arg(f"Expect boolean value for '{key}', got {value!r}")
            elif key == "log_verbose_level":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise invalid_arg(f"Expect integer value for '{key}', got {value!r}")
                if value < 0:
                    raise invalid_arg(f"Verbose logging level must be non-negative, got {value}")
            elif key == "log_format":
                if value not in LOG_FORMATS:
                    raise invalid_arg(f"invalid argument for log_format, got: {value}")
            elif key == "log_file":
                if not isinstance(value, str):
                    raise invalid_arg(f"Expect string value for 'log_file', got {value!r}")
            new[key] = value
        self.values = new
        self._apply()

    def _apply(self) -> None:
        global _log_values
        v = self.values
        _log_values = dict(v)
        for listener in _log_listeners:
            listener(dict(v))
        if v["log_verbose_level"] > 0:
            level = logging.DEBUG
        elif v["log_info"]:
            level = logging.INFO
        elif v["log_warning"]:
            level = logging.WARNING
        elif v["log_error"]:
            level = logging.ERROR
        else:
            level = logging.CRITICAL + 1
        log.setLevel(level)
        if self._file_handler is not None:
            log.removeHandler(self._file_handler)
            self._file_handler.close()
            self._file_handler = None
        if v["log_file"]:
            try:
                handler = logging.FileHandler(v["log_file"])
            except OSError as err:
                raise invalid_arg(f"failed to open log file '{v['log_file']}': {err.strerror}") from None
            handler.setFormatter(TritonLogFormatter(v["log_format"]))
            log.addHandler(handler)
            self._file_handler = handler
        if console_handler is not None:
            console_handler.setFormatter(TritonLogFormatter(v["log_format"]))


_TRACE_COUNTERS = ("trace_rate", "trace_count", "log_frequency")
_INT32_MIN, _INT32_MAX, _UINT32_MAX = -(1 << 31), (1 << 31) - 1, (1 << 32) - 1


def _trace_number(key: str, value) -> str:
    """A counter as Triton's handler reads it: std::stoi of the text (a
    leading number, an int32), trace_count at least -1, and the unsigned
    ones (trace_rate, log_frequency) wrapped as a uint32 takes an int."""
    text = str(value)
    match = re.match(r"\s*[+-]?\d+", text)
    if match is None:
        raise invalid_arg(f"Unable to parse '{key}', got: {text}")
    number = int(match.group())
    if key == "trace_count":
        if not _INT32_MIN <= number <= _INT32_MAX:
            raise invalid_arg(f"Unable to parse 'trace_count', value is out of range [ -1, "
                              f"{_INT32_MAX} ], got: {text}")
        if number < -1:
            raise invalid_arg(f"Unable to parse 'trace_count'. Expecting value >= -1, got:{text}")
        return str(number)
    if not _INT32_MIN <= number <= _INT32_MAX:
        raise invalid_arg(f"Unable to parse '{key}', value is out of range [ 0, {_UINT32_MAX} "
                          f"], got: {text}")
    return str(number & _UINT32_MAX)


class TraceSettings:
    """The trace extension's settings: global values and per-model overrides.
    Numbers travel as strings, as in Triton's JSON."""

    def __init__(self):
        self.global_values = {"trace_file": "", "trace_level": ["OFF"], "trace_rate": "1000",
                              "trace_count": "-1", "log_frequency": "0", "trace_mode": "triton"}
        self.model_values: dict[str, dict] = {}

    def as_dict(self, model_name: str | None = None) -> dict:
        out = dict(self.global_values)
        if model_name:
            out.update(self.model_values.get(model_name, {}))
        out["trace_level"] = list(out["trace_level"])
        return out

    def consume_count(self, model_name: str) -> None:
        """One trace taken: trace_count goes down by one where it is set."""
        where = self.model_values.get(model_name, {})
        values = where if "trace_count" in where else self.global_values
        count = int(values["trace_count"])
        if count > 0:
            values["trace_count"] = str(count - 1)

    def update(self, model_name: str | None, update: dict) -> None:
        """As Triton's trace settings handler: a key it does not read
        (trace_mode among them: only the command line sets it) and a level
        it does not know are passed over; numbers are read as std::stoi reads
        them; the result must be a setting that can trace (a trace file, a
        non-zero rate) unless it turns tracing off."""
        target = dict(self.model_values.get(model_name, {})) if model_name else dict(self.global_values)
        for key, value in update.items():
            if key not in self.global_values or key == "trace_mode":
                continue
            if value is None:
                if not model_name:
                    raise invalid_arg(f"trace setting '{key}' can only be cleared for a model")
                target.pop(key, None)  # back to the global value
                continue
            if key == "trace_level":
                levels = value if isinstance(value, list) else [value]
                if "OFF" in levels:
                    if len(levels) != 1:
                        # OFF beside a level would mean both traced and not
                        raise invalid_arg("Expect only one trace level 'OFF' is specified")
                    target[key] = ["OFF"]
                    continue
                known = [level for level in ("TIMESTAMPS", "TENSORS") if level in levels]
                if known:
                    target[key] = known
            elif key in _TRACE_COUNTERS:
                target[key] = _trace_number(key, value)
            else:
                if not isinstance(value, str):
                    raise invalid_arg(f"Expect string value for '{key}', got {value!r}")
                target[key] = value
        values = dict(self.global_values, **target) if model_name else target
        if values["trace_level"] != ["OFF"]:
            reason = ("sample rate must be non-zero" if values["trace_rate"] == "0" else
                      "trace file name is not given" if not values["trace_file"] else None)
            if reason is not None:
                raise invalid_arg(f"Attempting to set invalid trace setting :{reason}")
        if model_name:
            self.model_values[model_name] = target
        else:
            self.global_values = target
