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
    for bad in ({"log_verbose_level": -1}, {"log_info": "yes"}, {"log_format": "xml"}):
        with pytest.raises(ServerError) as err:
            s.update(bad)
        assert err.value.code == Code.INVALID_ARG
    assert s.as_dict()["log_info"] is False  # a refused update changes nothing
    s.update({"nope": 1, "log_info": None})  # passed over, as Triton's handlers do
    assert "nope" not in s.as_dict() and s.as_dict()["log_info"] is False
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
    # a level with nowhere to write: not a setting that can trace (Triton's text)
    with pytest.raises(ServerError, match="^Attempting to set invalid trace setting :trace "
                                          "file name is not given$"):
        t.update(None, {"trace_level": ["TIMESTAMPS", "TENSORS"]})
    assert t.as_dict()["trace_level"] == ["OFF"]
    t.global_values["trace_file"] = "/tmp/trace.json"  # (the command line's)
    t.update(None, {"trace_level": ["TIMESTAMPS", "TENSORS"]})
    assert t.as_dict()["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    t.update(None, {"trace_level": ["TIMESTAMPS"], "trace_count": "2"})
    t.consume_count("m")
    assert t.as_dict("m")["trace_count"] == "1"
    t.update("m", {"trace_rate": None})
    assert t.as_dict("m")["trace_rate"] == "5"
    with pytest.raises(ServerError, match="sample rate must be non-zero"):
        t.update(None, {"trace_rate": "0"})
    # what Triton's handler passes over: unknown levels and keys, trace_mode
    t.update(None, {"trace_level": ["LOUD"], "bogus": 1, "trace_mode": "opentelemetry"})
    assert t.as_dict()["trace_level"] == ["TIMESTAMPS"] and t.as_dict()["trace_mode"] == "triton"
    t.update(None, {"trace_level": ["LOUD", "TENSORS"]})
    assert t.as_dict()["trace_level"] == ["TENSORS"]
    # numbers as std::stoi reads them into Triton's types
    t.update(None, {"trace_rate": "-1", "log_frequency": "7 per file"})
    assert t.as_dict()["trace_rate"] == "4294967295" and t.as_dict()["log_frequency"] == "7"
    with pytest.raises(ServerError, match="^Unable to parse 'trace_rate', got: often$"):
        t.update(None, {"trace_rate": "often"})
    with pytest.raises(ServerError, match=r"out of range \[ 0, 4294967295 \], got: 9999999999"):
        t.update(None, {"trace_rate": "9999999999"})
    with pytest.raises(ServerError, match="^Unable to parse 'trace_count'. Expecting value >= "
                                          "-1, got:-2$"):
        t.update(None, {"trace_count": "-2"})
    with pytest.raises(ServerError):
        t.update(None, {"trace_rate": None})


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
