"""A model folder with just model.onnx loads, as in Triton: the onnxruntime
backend completes the config from the model file."""

import numpy as np
import pytest
import tritonclient.http as httpclient

from pyserver.kernel.errors import ServerError
from pyserver.testing import add_sub_onnx


def make(tmp_path, batching=True, config=None):
    d = tmp_path / "auto"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(add_sub_onnx(batching=batching))
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    return d


def test_no_config_file_batching_model(tmp_path, start_server):
    make(tmp_path)
    s = start_server(tmp_path)
    client = httpclient.InferenceServerClient(s.url)
    cfg = client.get_model_config("auto")
    assert cfg["backend"] == "onnxruntime"
    assert cfg["max_batch_size"] == 4  # --backend-config default-max-batch-size
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("INPUT0", "TYPE_FP32", [16]), ("INPUT1", "TYPE_FP32", [16])]
    a = np.ones((2, 16), np.float32)
    inputs = [httpclient.InferInput("INPUT0", [2, 16], "FP32"), httpclient.InferInput("INPUT1", [2, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("auto", inputs).as_numpy("OUTPUT0"), 2 * a)


def test_non_batching_model_and_default_override(tmp_path, start_server):
    make(tmp_path, batching=False)
    s = start_server(tmp_path, default_max_batch_size=8)
    cfg = s.run(s.server.model_config, "auto", "")
    assert cfg["max_batch_size"] == 0  # first dim fixed: cannot batch
    assert cfg["input"][0]["dims"] == [16]


def test_partial_config_is_completed(tmp_path, start_server):
    make(tmp_path, config='backend: "onnxruntime"\nmax_batch_size: 2\n')
    s = start_server(tmp_path)
    cfg = s.run(s.server.model_config, "auto", "")
    assert cfg["max_batch_size"] == 2
    assert "dynamic_batching" not in cfg or not cfg["dynamic_batching"]["preferred_batch_size"]
    assert [o["name"] for o in cfg["output"]] == ["OUTPUT0", "OUTPUT1"]


def test_disabled_autocomplete_requires_config(tmp_path, start_server):
    make(tmp_path)
    with pytest.raises(ServerError) as err:
        start_server(tmp_path, auto_complete_config=False)
    assert "auto-complete is disabled" in err.value.message


def test_disabled_autocomplete_counts_the_models_inputs(tmp_path, start_server):
    """With auto-complete off, a config that leaves out an input the model
    takes fails to load, with Triton's onnxruntime text; one that lists them
    all loads."""
    make(tmp_path, config='platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                          'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                          'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n')
    with pytest.raises(ServerError) as err:
        start_server(tmp_path, auto_complete_config=False)
    assert "unable to load model 'auto', configuration expects 1 inputs, model provides 2" \
        in err.value.message
    (tmp_path / "auto" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n')
    s = start_server(tmp_path, auto_complete_config=False)
    assert s.run(s.server.model_ready, "auto", "")
