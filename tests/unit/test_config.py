"""config.pbtxt parsing, normalization and its JSON form."""

import pytest

from pyserver.config import ConfigError, config_to_json, load_config_file, normalize, parse_config_text
from pyserver.kernel.errors import Code

GOOD = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100
  default_queue_policy { default_timeout_microseconds: 5000000000 } }
"""


def test_error_names_file_line_and_field(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\nmax_batch_size: 4\nmax_batchsize: 3\n')
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    msg = err.value.message
    assert f"{path}:3:" in msg
    assert "max_batchsize" in msg
    assert "Did you mean 'max_batch_size'?" in msg
    assert err.value.code == Code.INVALID_ARG


def test_placeholder_gets_a_hint():
    with pytest.raises(ConfigError) as err:
        parse_config_text('name: "m"\nmax_batch_size: ${MBS}\n', "cfg.pbtxt")
    assert "cfg.pbtxt:2:" in err.value.message
    assert "${VAR}" in err.value.message


def test_wrong_value_type_is_reported_with_line():
    with pytest.raises(ConfigError) as err:
        parse_config_text('name: "m"\ninput [ { name: "X" data_type: TYPE_NOPE } ]\n', "c")
    assert "c:2:" in err.value.message


def test_normalize_fills_triton_defaults():
    cfg = normalize(parse_config_text(GOOD), "m")
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    assert cfg.version_policy.latest.num_versions == 1
    assert cfg.instance_group[0].name == "m"  # no group in the config: one named after it
    assert cfg.instance_group[0].count == 1
    assert cfg.backend == "onnxruntime"
    assert cfg.optimization.input_pinned_memory.enable
    assert cfg.optimization.output_pinned_memory.enable
    named = normalize(parse_config_text(GOOD + "instance_group [ { count: 2 }, { } ]\n"
                                        "optimization { input_pinned_memory { enable: false } }"),
                      "m")
    assert [g.name for g in named.instance_group] == ["m_0", "m_1"]
    assert not named.optimization.input_pinned_memory.enable


def test_normalize_rejects_bad_values():
    with pytest.raises(ConfigError, match="does not match"):
        normalize(parse_config_text('name: "other"'), "m")
    with pytest.raises(ConfigError, match="preferred size"):
        normalize(parse_config_text(
            'max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 8 ] }'), "m")
    with pytest.raises(ConfigError, match="max_batch_size is 0"):
        normalize(parse_config_text('dynamic_batching { }'), "m")


def test_json_shape_matches_triton():
    data = config_to_json(normalize(parse_config_text(GOOD), "m"))
    assert data["max_batch_size"] == 8
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["input"][0]["dims"] == [-1, 4]  # int64 as numbers, not strings
    assert data["output"][0]["data_type"] == "TYPE_STRING"
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    policy = data["dynamic_batching"]["default_queue_policy"]
    assert policy["default_timeout_microseconds"] == 5000000000
    assert policy["timeout_action"] == "REJECT"
    assert data["input"][0]["optional"] is False  # every field present
    assert data["instance_group"][0]["kind"] == "KIND_CPU"
