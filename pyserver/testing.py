"""Small real models for examples, tests and benchmarks, written with the
onnx package (a test/bench dependency, not a runtime one)."""

from __future__ import annotations

from pathlib import Path

ADD_SUB_CONFIG = """name: "{name}"
{backend}
max_batch_size: {max_batch_size}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {size} ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {size} ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {size} ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {size} ] }}
]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{extra}
"""


def add_sub_onnx(size: int = 16, batching: bool = True) -> bytes:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32."""
    import onnx
    from onnx import TensorProto, helper

    shape = (["batch"] if batching else []) + [size]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    graph = helper.make_graph(nodes, "add_sub", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_add_sub(repo: Path, name: str = "add_sub", size: int = 16, max_batch_size: int = 8,
                  instances: int = 1, extra: str = "", versions=(1,)) -> Path:
    """A Triton model folder <repo>/<name> with config.pbtxt and model.onnx."""
    model_dir = Path(repo) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(
        name=name, backend='platform: "onnxruntime_onnx"', size=size,
        max_batch_size=max_batch_size, instances=instances, extra=extra))
    blob = add_sub_onnx(size, batching=max_batch_size > 0)
    for v in versions:
        (model_dir / str(v)).mkdir(exist_ok=True)
        (model_dir / str(v) / "model.onnx").write_bytes(blob)
    return model_dir


MLP_CONFIG = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {inputs} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {outputs} ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{extra}
"""


def mlp_weights(inputs: int = 64, hidden: int = 256, outputs: int = 16, seed: int = 0) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    return {"w1": (rng.standard_normal((inputs, hidden)) / np.sqrt(inputs)).astype(np.float32),
            "b1": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((hidden, outputs)) / np.sqrt(hidden)).astype(np.float32),
            "b2": (rng.standard_normal(outputs) * 0.1).astype(np.float32)}


def mlp_reference(x, weights: dict):
    """What the MLP computes, in numpy: relu(x W1 + b1) W2 + b2."""
    import numpy as np

    hidden = np.maximum(x @ weights["w1"] + weights["b1"], 0)
    return hidden @ weights["w2"] + weights["b2"]


def mlp_onnx(weights: dict) -> bytes:
    """A two-layer perceptron INPUT0 [batch, in] -> OUTPUT0 [batch, out]
    (Gemm, Relu, Gemm), FP32, weights as initializers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n_in, n_out = weights["w1"].shape[0], weights["w2"].shape[1]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["INPUT0", "w1", "b1"], ["h"]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["OUTPUT0"])],
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", n_in])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", n_out])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_mlp(repo: Path, name: str = "mlp", max_batch_size: int = 64, instances: int = 1,
              extra: str = "", weights: dict | None = None) -> dict:
    """A Triton model folder <repo>/<name> serving the MLP; returns its weights."""
    weights = weights or mlp_weights()
    model_dir = Path(repo) / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(MLP_CONFIG.format(
        name=name, max_batch_size=max_batch_size, inputs=weights["w1"].shape[0],
        outputs=weights["w2"].shape[1], instances=instances, extra=extra))
    (model_dir / "1" / "model.onnx").write_bytes(mlp_onnx(weights))
    return weights
