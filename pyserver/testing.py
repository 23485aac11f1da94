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
