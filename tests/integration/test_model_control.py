"""Explicit model control through the protocol-neutral Server API: load,
reload (old version serves until the new one is ready), unload, overrides,
the repository index."""

import asyncio
import json

import numpy as np
import pytest

from pyserver.kernel.errors import Code, ServerError
from pyserver.kernel.types import InferRequest, InferTensor
from pyserver.testing import add_sub_onnx, write_add_sub


def infer(s, name, value=1.0):
    a = np.full((1, 16), value, np.float32)
    req = InferRequest(name, inputs=[InferTensor("INPUT0", "FP32", [1, 16], a),
                                     InferTensor("INPUT1", "FP32", [1, 16], a)])
    return s.call(s.server.infer(req)).outputs[0].data


def test_explicit_mode_loads_only_what_is_asked(tmp_path, start_server):
    write_add_sub(tmp_path, name="a")
    write_add_sub(tmp_path, name="b")
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["a"])
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert index["a"]["state"] == "READY"
    assert index["b"] == {"name": "b"}
    assert [r["name"] for r in s.run(s.server.repository_index, True)] == ["a"]
    with pytest.raises(ServerError) as err:
        infer(s, "b")
    assert err.value.code == Code.NOT_FOUND

    s.call(s.server.load_model("b"))
    np.testing.assert_array_equal(infer(s, "b", 2.0), np.full((1, 16), 4.0))
    s.call(s.server.unload_model("b"))
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert index["b"]["state"] == "UNAVAILABLE" and index["b"]["reason"] == "unloaded"
    with pytest.raises(ServerError) as err:
        infer(s, "b")
    assert "has no available versions" in err.value.message
    s.call(s.server.unload_model("never-there"))  # not an error, as in Triton


def test_reload_keeps_serving_and_swaps_versions(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="m", versions=(1,))
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["*"])
    assert s.run(s.server.model_metadata, "m", "")["versions"] == ["1"]
    (d / "2").mkdir()
    (d / "2" / "model.onnx").write_bytes(add_sub_onnx())

    async def reload_while_serving():
        a = np.ones((1, 16), np.float32)
        req = lambda: InferRequest("m", inputs=[InferTensor("INPUT0", "FP32", [1, 16], a),
                                                InferTensor("INPUT1", "FP32", [1, 16], a)])
        load = asyncio.ensure_future(s.server.load_model("m"))
        served = 0
        while not load.done():
            await s.server.infer(req())  # never fails during the reload
            served += 1
            await asyncio.sleep(0)
        await load
        return served

    s.call(reload_while_serving())
    assert s.run(s.server.model_metadata, "m", "")["versions"] == ["2"]
    np.testing.assert_array_equal(infer(s, "m"), np.full((1, 16), 2.0))


def test_load_with_config_and_file_override(tmp_path, start_server):
    write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path, model_control_mode="explicit")
    config = json.dumps({
        "name": "fresh", "platform": "onnxruntime_onnx", "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                  {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                   {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]}]})
    s.call(s.server.load_model("fresh", config=config, files={"1/model.onnx": add_sub_onnx()}))
    np.testing.assert_array_equal(infer(s, "fresh", 3.0), np.full((1, 16), 6.0))
    assert s.run(s.server.model_config, "fresh", "")["max_batch_size"] == 4
    with pytest.raises(ServerError) as err:
        s.call(s.server.load_model("evil", config=config, files={"../../etc/x": b"1"}))
    assert err.value.code == Code.INVALID_ARG
    with pytest.raises(ServerError) as err:
        s.call(s.server.load_model("../m"))
    assert err.value.code == Code.INVALID_ARG
    with pytest.raises(ServerError) as err:
        s.call(s.server.load_model("missing"))
    assert "failed to poll from model repository" in err.value.message
    with pytest.raises(ServerError) as err:
        s.call(s.server.load_model("m", config="{not json"))
    assert err.value.code == Code.INVALID_ARG


def test_failed_reload_keeps_the_old_version(tmp_path, start_server):
    d = write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["m"])
    (d / "config.pbtxt").write_text("max_batch_size: [\n")
    with pytest.raises(ServerError):
        s.call(s.server.load_model("m"))
    np.testing.assert_array_equal(infer(s, "m"), np.full((1, 16), 2.0))


def test_load_unload_refused_unless_explicit(tmp_path, start_server):
    write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path)
    with pytest.raises(ServerError) as err:
        s.call(s.server.load_model("m"))
    assert err.value.code == Code.UNAVAILABLE
    assert err.value.message == "explicit model load / unload is not allowed if polling is enabled"


def test_statistics_shape(tmp_path, start_server):
    write_add_sub(tmp_path, name="m", extra="dynamic_batching { }")
    s = start_server(tmp_path)
    infer(s, "m")
    stats = s.run(s.server.statistics, "m", "")
    [m] = stats["model_stats"]
    assert m["name"] == "m" and m["version"] == "1"
    assert m["inference_count"] == 1 and m["execution_count"] == 1
    assert m["inference_stats"]["success"]["count"] == 1
    assert m["batch_stats"][0]["batch_size"] == 1
    assert set(m) == {"name", "version", "last_inference", "inference_count", "execution_count",
                      "inference_stats", "response_stats", "batch_stats", "memory_usage"}
    assert s.run(s.server.statistics)["model_stats"][0]["name"] == "m"
    with pytest.raises(ServerError) as err:
        s.run(s.server.statistics, "nope", "")
    assert err.value.code == Code.INVALID_ARG  # Triton core's code here
    assert err.value.message == "requested model 'nope' is not available"


def test_loading_a_name_the_repository_lacks_keeps_the_server_ready(tmp_path, start_server):
    """A typo in a load (explicit mode) fails that load only: the name is not
    in the index and the server stays ready, as in Triton (a readiness probe
    would otherwise take it out of service until a restart)."""
    write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["m"])
    assert s.run(s.server.is_ready)
    with pytest.raises(ServerError) as err:
        s.call(s.server.load_model("mm"))
    assert "failed to load 'mm', failed to poll from model repository" in err.value.message
    assert s.run(s.server.is_ready)
    assert "mm" not in {r["name"] for r in s.run(s.server.repository_index)}
    np.testing.assert_array_equal(infer(s, "m", 1.0), np.full((1, 16), 2.0))
    # a model the repository has but that fails to load still counts
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "config.pbtxt").write_text("max_batch_size: [\n")
    with pytest.raises(ServerError):
        s.call(s.server.load_model("broken"))
    index = {r["name"]: r for r in s.run(s.server.repository_index)}
    assert index["broken"]["state"] == "UNAVAILABLE"


def test_a_plain_load_keeps_a_config_override_while_the_folder_is_unchanged(tmp_path,
                                                                           start_server):
    """#21 item 15: after a load with a config override, a plain load of the
    unchanged model is a no-op (the override stays), as in Triton; once the
    folder changes, a plain load takes the folder's config again."""
    d = write_add_sub(tmp_path, name="m")
    s = start_server(tmp_path, model_control_mode="explicit", load_models=["m"])
    config = s.run(s.server.model_config, "m", "")
    config["max_batch_size"] = 2
    s.call(s.server.load_model("m", config=json.dumps(config)))
    assert s.run(s.server.model_config, "m", "")["max_batch_size"] == 2
    s.call(s.server.load_model("m"))
    assert s.run(s.server.model_config, "m", "")["max_batch_size"] == 2  # kept
    text = (d / "config.pbtxt").read_text()
    (d / "config.pbtxt").write_text(text + "\n# changed\n")
    s.call(s.server.load_model("m"))
    assert s.run(s.server.model_config, "m", "")["max_batch_size"] == 8  # the folder's


def test_a_config_without_backend_is_completed_from_the_model_files(tmp_path, start_server,
                                                                    caplog):
    """#21 item 3 (Triton's simple_*_model_control.py): a config override
    that names no backend or platform, and a config.pbtxt that names none,
    get the backend whose model file the model has, as Triton's
    auto-complete does; an override that does not parse is refused with
    Triton's log line."""
    import logging

    d = write_add_sub(tmp_path, name="m")
    text = (d / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in text
    (d / "config.pbtxt").write_text(text.replace('platform: "onnxruntime_onnx"', ""))
    s = start_server(tmp_path, model_control_mode="explicit")
    s.call(s.server.load_model("m"))  # config.pbtxt without a backend
    assert s.run(s.server.model_config, "m", "")["backend"] == "onnxruntime"
    override = {"name": "m", "max_batch_size": 4,
                "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]}
                          for n in ("INPUT0", "INPUT1")],
                "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]}
                           for n in ("OUTPUT0", "OUTPUT1")]}
    s.call(s.server.load_model("m", config=json.dumps(override)))
    config = s.run(s.server.model_config, "m", "")
    assert config["backend"] == "onnxruntime" and config["max_batch_size"] == 4
    np.testing.assert_array_equal(infer(s, "m", 2.0), np.full((1, 16), 4.0))
    with caplog.at_level(logging.ERROR, logger="pyserver"):
        with pytest.raises(ServerError) as err:
            s.call(s.server.load_model("m", config="{not json"))
    assert err.value.code == Code.INVALID_ARG
    assert any(r.getMessage().startswith("Invalid config override: ") for r in caplog.records)
    assert s.run(s.server.model_config, "m", "")["max_batch_size"] == 4  # still serving
