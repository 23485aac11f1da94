"""The suite's workloads: the models (written out for each system), the
request each load generator sends, and the answer that request must get.

Every system computes the same thing from the same bytes:
- add_sub: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [1,16],
  Triton's python_backend example (tests/models/python/add_sub), without and
  with dynamic batching (max_queue_delay 100 µs, max_batch_size 64);
- mlp: FP32 [1,256] -> 1024 (ReLU) -> 256, one ONNX file: served natively
  by pyserver's onnxruntime backend, by a Python model calling onnxruntime on
  Triton (the pytriton build has no onnxruntime backend) and on MLServer;
- strings: BYTES [1,8], every element reversed (Python model);
- echo_1m: FP32 [1,262144] (1 MiB) returned as is (Python model).
MLServer runs bench/models/mlserver_models.py, the same math as its runtime.
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.loadgen import grpc_frame
from pyserver.kernel.dtypes import WIRE_TO_NUMPY

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ADD_SUB_PY = ROOT / "tests" / "models" / "python" / "add_sub" / "1" / "model.py"
MODELS = HERE / "models"
BATCH_DELAY_US = 100
MAX_BATCH = 64

PYSERVER, TRITON, MLSERVER = "pyserver", "triton", "mlserver"
GRPC, HTTP_JSON, HTTP_BINARY = "grpc", "http-json", "http-binary"


@dataclass
class Tensor:
    name: str
    datatype: str  # "BYTES" or a numeric type ("FP32", "INT32", ...)
    value: np.ndarray

    @property
    def raw(self) -> bytes:
        if self.datatype == "BYTES":
            return b"".join(struct.pack("<I", len(s)) + s for s in self.value.reshape(-1))
        return self.value.astype(WIRE_TO_NUMPY[self.datatype]).tobytes()

    def json_data(self) -> list:
        if self.datatype == "BYTES":
            return [s.decode() for s in self.value.reshape(-1)]
        return self.value.reshape(-1).tolist()


@dataclass
class Workload:
    name: str          # model name, the same on every system
    title: str
    model_py: Path     # Triton Python model (pyserver runs it too unless onnx)
    inputs: list
    outputs: dict      # output name -> expected numpy value
    dims: dict         # tensor name -> (TYPE_*, dims without the batch dim)
    mlserver_class: str
    batching: bool = False
    onnx_on_pyserver: bool = False
    pyserver_params: dict = field(default_factory=dict)
    protocols: tuple = (GRPC, HTTP_JSON, HTTP_BINARY)
    concurrency: tuple = (1, 4, 16, 64, 128)
    systems: tuple = (PYSERVER, TRITON, MLSERVER)

    # ------------------------------------------------------------ requests

    def grpc_body(self) -> bytes:
        from tritonclient.grpc import service_pb2

        req = service_pb2.ModelInferRequest(model_name=self.name)
        for t in self.inputs:
            tensor = req.inputs.add(name=t.name, datatype=t.datatype)
            tensor.shape.extend(t.value.shape)
            req.raw_input_contents.append(t.raw)
        for name in self.outputs:
            req.outputs.add(name=name)
        return grpc_frame(req.SerializeToString())

    def json_body(self) -> bytes:
        return json.dumps({"inputs": [
            {"name": t.name, "shape": list(t.value.shape), "datatype": t.datatype,
             "data": t.json_data()} for t in self.inputs]}).encode()

    def binary_body(self) -> tuple[bytes, int]:
        """Triton's binary tensor extension: JSON header, then raw tensors;
        outputs asked for as binary too. Returns (body, header length)."""
        header = json.dumps({
            "inputs": [{"name": t.name, "shape": list(t.value.shape), "datatype": t.datatype,
                        "parameters": {"binary_data_size": len(t.raw)}} for t in self.inputs],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in self.outputs],
        }).encode()
        return header + b"".join(t.raw for t in self.inputs), len(header)

    # ------------------------------------------------------------ models

    def triton_config(self, system: str) -> str:
        onnx = self.onnx_on_pyserver and system == PYSERVER
        lines = [f'name: "{self.name}"',
                 'platform: "onnxruntime_onnx"' if onnx else 'backend: "python"',
                 f"max_batch_size: {MAX_BATCH}"]
        for kind, names in (("input", [t.name for t in self.inputs]), ("output", list(self.outputs))):
            specs = [f'{{ name: "{n}" data_type: {self.dims[n][0]} dims: {self.dims[n][1]} }}'
                     for n in names]
            lines.append(f"{kind} [\n  " + ",\n  ".join(specs) + "\n]")
        lines.append("instance_group [ { count: 1 kind: KIND_CPU } ]")
        if self.batching:
            lines.append(f"dynamic_batching {{ max_queue_delay_microseconds: {BATCH_DELAY_US} }}")
        params = dict(self.pyserver_params) if system == PYSERVER else {}
        if onnx:
            params.update(intra_op_thread_count="1", inter_op_thread_count="1")
        for key, value in params.items():
            lines.append(f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}')
        return "\n".join(lines) + "\n"

    def write_triton(self, repo: Path, system: str, onnx_blob: bytes | None) -> None:
        folder = repo / self.name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(self.triton_config(system))
        if self.onnx_on_pyserver:
            (folder / "1" / "model.onnx").write_bytes(onnx_blob)
        if not (self.onnx_on_pyserver and system == PYSERVER):
            shutil.copy(self.model_py, folder / "1" / "model.py")

    def write_mlserver(self, repo: Path, onnx_blob: bytes | None) -> None:
        folder = repo / self.name
        folder.mkdir(parents=True, exist_ok=True)
        settings = {"name": self.name, "implementation": f"mlserver_models.{self.mlserver_class}"}
        if self.onnx_on_pyserver:
            (folder / "model.onnx").write_bytes(onnx_blob)
            settings["parameters"] = {"uri": "./model.onnx"}
        if self.batching:  # MLServer's adaptive batching, the same bounds
            settings.update(max_batch_size=MAX_BATCH, max_batch_time=BATCH_DELAY_US / 1e6)
        (folder / "model-settings.json").write_text(json.dumps(settings, indent=2))

    # ------------------------------------------------------------ checking

    def check(self, outputs: dict) -> str | None:
        """None when every expected output is there with the right value."""
        for name, want in self.outputs.items():
            got = outputs.get(name)
            if got is None:
                return f"output {name} missing"
            got = np.asarray(got)
            if want.dtype == np.object_:
                got = [g.encode() if isinstance(g, str) else bytes(g) for g in got.reshape(-1)]
                if got != list(want.reshape(-1)):
                    return f"output {name}: {got[:2]}... != {list(want.reshape(-1))[:2]}..."
            elif got.size != want.size or not np.allclose(got.reshape(-1).astype(np.float32),
                                                         want.reshape(-1), rtol=1e-3, atol=1e-3):
                return f"output {name} differs from the expected values"
        return None


# ---------------------------------------------------------------- the MLP


def mlp_weights(seed: int = 0):
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((256, 1024)) / 16).astype(np.float32)
    b1 = (rng.standard_normal(1024) / 10).astype(np.float32)
    w2 = (rng.standard_normal((1024, 256)) / 32).astype(np.float32)
    b2 = (rng.standard_normal(256) / 10).astype(np.float32)
    return w1, b1, w2, b2


def mlp_onnx() -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w1, b1, w2, b2 = mlp_weights()
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "W1"), (b1, "B1"), (w2, "W2"), (b2, "B2"))]
    nodes = [helper.make_node("MatMul", ["INPUT", "W1"], ["h0"]),
             helper.make_node("Add", ["h0", "B1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]),
             helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
             helper.make_node("Add", ["h3", "B2"], ["OUTPUT"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", 256])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def mlp_reference(x: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = mlp_weights()
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


# ---------------------------------------------------------------- the set


def all_workloads() -> list[Workload]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.5, dtype=np.float32)
    add_sub_dims = {n: ("TYPE_FP32", [16]) for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")}
    add_sub = dict(model_py=ADD_SUB_PY, inputs=[Tensor("INPUT0", "FP32", a), Tensor("INPUT1", "FP32", b)],
                   outputs={"OUTPUT0": a + b, "OUTPUT1": a - b}, dims=add_sub_dims,
                   mlserver_class="AddSub")
    x = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
    words = np.array([f"element-{i:02d}-of-eight".encode() for i in range(8)],
                     dtype=np.object_).reshape(1, 8)
    big = np.random.default_rng(2).standard_normal((1, 262144)).astype(np.float32)
    return [
        Workload("add_sub", "add_sub FP32[16], Python model", **add_sub),
        Workload("add_sub_dyn", "add_sub FP32[16], Python model, dynamic batching 100 µs",
                 batching=True, **add_sub),
        Workload("add_sub_eager", "add_sub, dynamic batching, pyserver's eager policy",
                 batching=True, pyserver_params={"pyserver_batching": "eager"},
                 protocols=(GRPC, HTTP_JSON), concurrency=(1, 16), systems=(PYSERVER,), **add_sub),
        Workload("mlp", "MLP FP32 256→1024→256, onnxruntime, dynamic batching 100 µs",
                 model_py=MODELS / "mlp.py", inputs=[Tensor("INPUT", "FP32", x)],
                 outputs={"OUTPUT": mlp_reference(x)},
                 dims={"INPUT": ("TYPE_FP32", [256]), "OUTPUT": ("TYPE_FP32", [256])},
                 mlserver_class="Mlp", batching=True, onnx_on_pyserver=True,
                 protocols=(GRPC, HTTP_JSON), concurrency=(1, 16, 64)),
        Workload("strings", "BYTES [8] reversed, Python model", model_py=MODELS / "strings.py",
                 inputs=[Tensor("INPUT", "BYTES", words)],
                 outputs={"OUTPUT": np.array([w[::-1] for w in words.reshape(-1)],
                                             dtype=np.object_).reshape(1, 8)},
                 dims={"INPUT": ("TYPE_STRING", [8]), "OUTPUT": ("TYPE_STRING", [8])},
                 mlserver_class="Strings", protocols=(GRPC, HTTP_JSON), concurrency=(1, 16, 64)),
        Workload("echo_1m", "1 MiB FP32 tensor echo, Python model", model_py=MODELS / "echo.py",
                 inputs=[Tensor("INPUT", "FP32", big)], outputs={"OUTPUT": big},
                 dims={"INPUT": ("TYPE_FP32", [262144]), "OUTPUT": ("TYPE_FP32", [262144])},
                 mlserver_class="Echo", protocols=(GRPC, HTTP_BINARY), concurrency=(1, 4, 16)),
    ]


def supports(system: str, workload: Workload, protocol: str) -> bool:
    """MLServer has no binary tensor extension on HTTP (research/running-peers.md)."""
    if system not in workload.systems:
        return False
    return not (system == MLSERVER and protocol == HTTP_BINARY)
