import logging

import pytest

from pyserver.kernel.errors import Code, ServerError
from pyserver.runtime.settings import LogSettings, TraceSettings


def test_log_settings_validate_and_apply(tmp_path):
    s = LogSettings()
    assert s.as_dict()["log_verbose_level"] == 0
    s.update({"log_verbose_level": 2})
    assert logging.getLogger("pyserver").level == logging.DEBUG
    s.update({"log_verbose_level": 0, "log_info": False})
    assert logging.getLogger("pyserver").level == logging.WARNING
    for bad in ({"log_verbose_level": -1}, {"log_info": "yes"}, {"log_format": "xml"}, {"nope": 1}):
        with pytest.raises(ServerError) as err:
            s.update(bad)
        assert err.value.code == Code.INVALID_ARG
    assert s.as_dict()["log_info"] is False  # a refused update changes nothing
    path = tmp_path / "server.log"
    s.update({"log_file": str(path), "log_info": True})
    logging.getLogger("pyserver").info("hello file")
    s.update({"log_file": ""})
    assert "hello file" in path.read_text()


def test_trace_settings_global_and_model_override():
    t = TraceSettings()
    assert t.as_dict()["trace_level"] == ["OFF"]
    t.update(None, {"trace_level": ["OFF"], "trace_rate": 5})
    assert t.as_dict()["trace_rate"] == "5"
    t.update("m", {"trace_rate": "1"})
    assert t.as_dict("m")["trace_rate"] == "1"
    assert t.as_dict("m")["trace_level"] == ["OFF"]
    t.update(None, {"trace_level": ["TIMESTAMPS", "TENSORS"]})
    assert t.as_dict()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    t.update(None, {"trace_level": ["TIMESTAMPS"], "trace_count": "2"})
    t.consume_count("m")
    assert t.as_dict("m")["trace_count"] == "1"
    t.update("m", {"trace_rate": None})
    assert t.as_dict("m")["trace_rate"] == "5"
    with pytest.raises(ServerError):
        t.update(None, {"trace_level": ["LOUD"]})
    with pytest.raises(ServerError):
        t.update(None, {"trace_rate": "often"})
    with pytest.raises(ServerError):
        t.update(None, {"trace_rate": None})
    # no OpenTelemetry exporter: that mode is refused rather than accepted and ignored
    t.update(None, {"trace_mode": "triton"})
    with pytest.raises(ServerError, match="unsupported trace mode 'opentelemetry'"):
        t.update(None, {"trace_mode": "opentelemetry"})
    assert t.as_dict()["trace_mode"] == "triton"


def test_log_lines_are_tritons(monkeypatch):
    import re

    from pyserver.runtime.settings import TritonLogFormatter

    def line(fmt, msg, level=logging.INFO, *args):
        record = logging.LogRecord("pyserver", level, "/x/server.py", 42, msg, args, None)
        record.created = 1764554220.327881  # 2025-12-01 01:57:00.327881 UTC
        return TritonLogFormatter(fmt).format(record)

    assert re.fullmatch(r'I1201 01:57:00\.3278\d\d \d+ server\.py:42\] "loaded \\"m\\" 5"',
                        line("default", 'loaded "m" %d', logging.INFO, 5))
    assert line("ISO8601", "bad", logging.ERROR).startswith("2025-12-01T01:57:00Z E ")
    assert " server.py:42] \"careful\"" in line("default", "careful", logging.WARNING)
    assert line("default", "x", logging.WARNING)[0] == "W"
    table = line("default", "\n+---+\n| m |")
    assert table.endswith("] \n+---+\n| m |")  # tables as they are
    monkeypatch.setenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "0")
    assert line("default", 'plain "text"').endswith('] plain "text"')
