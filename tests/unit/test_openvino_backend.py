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


def test_without_a_batching_config_the_shape_stays(model_xml):
    backend = OpenVINOBackend(model_xml, config(0), "m_0", "cpu", 1)
    assert backend.compiled.inputs[0].get_partial_shape().to_string() == "[4]"
    skip = OpenVINOBackend(model_xml, config(0, SKIP_OV_DYNAMIC_BATCHSIZE="yes"), "m_0", "cpu", 1)
    assert skip.compiled.inputs[0].get_partial_shape().to_string() == "[4]"


def test_load_errors(model_xml, tmp_path):
    c = config(0)
    c.output.add(name="NOPE", data_type=11, dims=[4])
    with pytest.raises(ServerError) as err:
        OpenVINOBackend(model_xml, c, "m_0", "cpu", 1)
    assert "declares output(s) ['NOPE']" in str(err.value)
    with pytest.raises(ServerError) as err:
        OpenVINOBackend(str(tmp_path / "missing.xml"), config(0), "m_0", "cpu", 1)
    assert "openvino could not read" in str(err.value)
    with pytest.raises(ServerError) as err:
        OpenVINOBackend(model_xml, config(0, TARGET_DEVICE="NOSUCH"), "m_0", "cpu", 1)
    assert "could not compile it for NOSUCH" in str(err.value)
