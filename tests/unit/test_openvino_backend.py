"""The OpenVINO backend's reading of a config, on the real runtime (no
server): properties from Triton's parameters, reshaping, load errors."""

import numpy as np
import pytest

from pyserver._proto import ModelConfig
from pyserver.kernel.errors import ServerError
from pyserver.testing import add_sub_onnx

from ..sanitizers import skip_openvino_under_asan

ov = pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino "
                                            "(pip install 'pyserver[openvino]')")
from pyserver.backends.openvino import OpenVINOBackend, device_properties  # noqa: E402

pytestmark = skip_openvino_under_asan


def config(max_batch_size=8, **params):
    c = ModelConfig(name="m", backend="openvino", max_batch_size=max_batch_size)
    for key, value in params.items():
        c.parameters[key].string_value = value
    return c


@pytest.fixture(scope="module")
def model_xml(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ov")
    (folder / "m.onnx").write_bytes(add_sub_onnx(4, batching=False))  # a static [4] model
    path = folder / "model.xml"
    ov.save_model(ov.convert_model(str(folder / "m.onnx")), str(path))
    return str(path)


def test_properties_from_tritons_parameters():
    assert device_properties(config(), 3) == {"INFERENCE_NUM_THREADS": 3}
    assert device_properties(config(INFERENCE_NUM_THREADS="0"), 3) == {}
    assert device_properties(config(ENABLE_CPU_PINNING="Yes"), 1)["ENABLE_CPU_PINNING"] is True
    assert device_properties(config(ENABLE_CPU_PINNING="no"), 1)["ENABLE_CPU_PINNING"] is False
    got = device_properties(config(NUM_STREAMS="auto", PERFORMANCE_HINT="Latency",
                                   COMPILATION_NUM_THREADS="2", HINT_BF16="YES",
                                   COMPILED_MODEL_CACHE="/tmp/c"), 1)
    assert got == {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": "AUTO",
                   "PERFORMANCE_HINT": "LATENCY", "COMPILATION_NUM_THREADS": 2,
                   "INFERENCE_PRECISION_HINT": "bf16", "CACHE_DIR": "/tmp/c"}
    assert device_properties(config(NUM_STREAMS="3"), 1)["NUM_STREAMS"] == 3


@pytest.mark.parametrize("key,value,text", [
    ("NUM_STREAMS", "x", "expected the parameter 'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, "
                         "got x"),
    ("PERFORMANCE_HINT", "FAST", "to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast"),
    ("INFERENCE_NUM_THREADS", "1.5", "'INFERENCE_NUM_THREADS' to be a non-negative number, got 1.5"),
    ("COMPILATION_NUM_THREADS", "-1", "to be a non-negative number, got -1"),
    ("HINT_BF16", "no", "expected the parameter 'HINT_BF16' to be YES, got no"),
    ("ENABLE_CPU_PINNING", "maybe", "expected the parameter 'ENABLE_CPU_PINNING' to be YES or NO, "
                                    "got maybe"),
])
def test_bad_values(key, value, text):
    with pytest.raises(ServerError) as err:
        device_properties(config(**{key: value}), 1)
    assert text in str(err.value)


def test_static_batch_dimension_made_dynamic(model_xml):
    # The file's shape is [4]; as a batching model's [?, 4] it needs
    # RESHAPE_IO_LAYERS (the config's dims behind a dynamic batch).
    c = config(4, RESHAPE_IO_LAYERS="YES")
    for name in ("INPUT0", "INPUT1"):
        c.input.add(name=name, data_type=11, dims=[-1])  # TYPE_FP32
    backend = OpenVINOBackend(model_xml, c, "m_0", "cpu", 1)
    a = np.ones((3, 5), np.float32)
    out = backend.execute({"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(out["OUTPUT0"], a * 2)
    assert backend.compiled.inputs[0].get_partial_shape().to_string() == "[?,?]"


def io_config(max_batch_size=0, dims=(4,), data_type=11, **params):
    """config() declaring the static model's two inputs (TYPE_FP32 by default)."""
    c = config(max_batch_size, **params)
    for name in ("INPUT0", "INPUT1"):
        c.input.add(name=name, data_type=data_type, dims=list(dims))
    return c


def test_without_a_batching_config_the_shape_stays(model_xml):
    backend = OpenVINOBackend(model_xml, io_config(), "m_0", "cpu", 1)
    assert backend.compiled.inputs[0].get_partial_shape().to_string() == "[4]"
    skip = OpenVINOBackend(model_xml, io_config(SKIP_OV_DYNAMIC_BATCHSIZE="yes"), "m_0", "cpu", 1)
    assert skip.compiled.inputs[0].get_partial_shape().to_string() == "[4]"


def load_error(model_xml, c, device="cpu"):
    with pytest.raises(ServerError) as err:
        OpenVINOBackend(model_xml, c, "m_0", device, 1)
    return str(err.value)


def test_load_errors(model_xml, tmp_path):
    """Triton's checks and texts: as many inputs as the model, names it has,
    dims that fit, CPU instances only."""
    c = io_config()
    c.output.add(name="NOPE", data_type=11, dims=[4])
    assert load_error(model_xml, c) == ("unexpected inference output 'NOPE', allowed outputs "
                                        "are: OUTPUT0, OUTPUT1")
    fewer = config(0)
    fewer.input.add(name="INPUT0", data_type=11, dims=[4])
    assert load_error(model_xml, fewer) == ("unable to load model 'm', configuration expects 1 "
                                            "inputs, model provides 2")
    assert load_error(model_xml, io_config(dims=(2, 2))) == (
        "model 'm', tensor 'INPUT0': the model expects 1 dimensions (shape [4]) but the model "
        "configuration specifies 2 dimensions (shape [2,2])")
    assert load_error(model_xml, io_config(4)) == (
        "model 'm', tensor 'INPUT0': the model expects 1 dimensions (shape [4]) but the model "
        "configuration specifies 2 dimensions (an initial batch dimension because "
        "max_batch_size > 0 followed by the explicit tensor shape, making complete shape [4,4])")
    assert load_error(model_xml, io_config(), device="cuda:0") == (
        "unable to load model 'm', Triton OpenVINO backend supports only Kind CPU and AUTO")
    assert "openvino could not read" in load_error(str(tmp_path / "missing.xml"), io_config())
    assert "could not compile it for NOSUCH" in load_error(model_xml,
                                                           io_config(TARGET_DEVICE="NOSUCH"))


def test_a_config_type_unlike_the_models_converts_at_its_edge(model_xml):
    """Triton's backend sets the config's element types on the model's
    inputs and outputs (OpenVINO's PrePostProcessor): INT32 in, FP16 out of
    an FP32 model."""
    c = io_config(data_type=8)  # TYPE_INT32
    for name in ("OUTPUT0", "OUTPUT1"):
        c.output.add(name=name, data_type=10, dims=[4])  # TYPE_FP16
    backend = OpenVINOBackend(model_xml, c, "m_0", "cpu", 1)
    a, b = np.array([1, 2, 3, 4], np.int32), np.array([4, 3, 2, 1], np.int32)
    out = backend.execute({"INPUT0": a, "INPUT1": b})
    assert out["OUTPUT0"].dtype == np.float16
    np.testing.assert_array_equal(out["OUTPUT0"], (a + b).astype(np.float16))
    np.testing.assert_array_equal(out["OUTPUT1"], (a - b).astype(np.float16))


def test_a_left_out_input_is_an_error_not_the_last_requests_tensor(model_xml):
    backend = OpenVINOBackend(model_xml, io_config(), "m_0", "cpu", 1)
    a = np.arange(4, dtype=np.float32)
    backend.execute({"INPUT0": a, "INPUT1": a})
    with pytest.raises(ServerError) as err:
        backend.execute({"INPUT0": a})
    assert err.value.code.name == "INVALID_ARG"
    assert "needs input(s) INPUT1" in str(err.value)


def test_disagreeing_dynamic_dims_never_answer_the_last_batchs_outputs(tmp_path):
    """OpenVINO's CPU plugin runs nothing and raises nothing for inputs
    whose dynamic dims disagree; the outputs are emptied first, so the
    answer is empty rather than the previous batch's."""
    import openvino.opset13 as ops

    x = ops.parameter([-1, -1], ov.Type.f32, name="X")
    y = ops.parameter([-1, -1], ov.Type.f32, name="Y")
    x.output(0).set_names({"X"})
    y.output(0).set_names({"Y"})
    total = ops.add(x, y)
    total.output(0).set_names({"SUM"})
    path = tmp_path / "sum.xml"
    ov.save_model(ov.Model([ops.result(total)], [x, y], "sum"), str(path))
    c = config(0)
    for name in ("X", "Y"):
        c.input.add(name=name, data_type=11, dims=[-1, -1])
    backend = OpenVINOBackend(str(path), c, "m_0", "cpu", 1)
    first = backend.execute({"X": np.ones((1, 7), np.float32), "Y": np.ones((1, 7), np.float32)})
    np.testing.assert_array_equal(first["SUM"], np.full((1, 7), 2, np.float32))
    bad = backend.execute({"X": np.ones((2, 3), np.float32), "Y": np.ones((3, 3), np.float32)})
    assert bad["SUM"].size == 0
    good = backend.execute({"X": np.ones((2, 3), np.float32), "Y": np.ones((2, 3), np.float32)})
    assert good["SUM"].shape == (2, 3)
