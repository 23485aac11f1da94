"""ONNX Runtime backend (CPU execution provider), as Triton's onnxruntime
backend reads its config: intra/inter op thread counts from `parameters`,
graph optimization level from `optimization.graph.level`."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from pyserver.core.errors import Code, ServerError

# ONNX Runtime type strings -> config data types.
_ORT_TO_CONFIG = {
    "tensor(bool)": "TYPE_BOOL", "tensor(uint8)": "TYPE_UINT8", "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32", "tensor(uint64)": "TYPE_UINT64", "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16", "tensor(int32)": "TYPE_INT32", "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16", "tensor(float)": "TYPE_FP32", "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING", "tensor(bfloat16)": "TYPE_BF16",
}


def _param(config, key: str):
    if key in config.parameters:
        return config.parameters[key].string_value
    return None


class OnnxRuntimeBackend:
    def __init__(self, model_path: str, config, instance_name: str, device: str, threads: int):
        options = ort.SessionOptions()
        intra = _param(config, "intra_op_thread_count")
        inter = _param(config, "inter_op_thread_count")
        # Default: share the cores among instances so N instances do not
        # oversubscribe them (ORT's own default is one thread per core each).
        options.intra_op_num_threads = int(intra) if intra else max(1, threads)
        options.inter_op_num_threads = int(inter) if inter else 1
        level = config.optimization.graph.level if config.HasField("optimization") else 0
        if level == -1:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        elif level == 1:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(model_path, options,
                                                providers=["CPUExecutionProvider"])
        except Exception as err:
            raise ServerError(Code.INVALID_ARG,
                              f"onnxruntime could not load '{model_path}': {err}") from None
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.input_names = {i.name for i in self.session.get_inputs()}
        declared = {t.name for t in config.output}
        missing = declared - set(self.output_names)
        if missing:
            raise ServerError(
                Code.INVALID_ARG,
                f"model '{config.name}' config declares output(s) {sorted(missing)} that "
                f"{model_path} does not produce (it has {self.output_names})")
        unknown = {t.name for t in config.input} - self.input_names
        if unknown:
            raise ServerError(
                Code.INVALID_ARG,
                f"model '{config.name}' config declares input(s) {sorted(unknown)} that "
                f"{model_path} does not take (it has {sorted(self.input_names)})")
        self.instance_name = instance_name

    @staticmethod
    def auto_complete_config(config, model_path: str, default_max_batch_size: int) -> None:
        """Fills inputs, outputs, max_batch_size and dynamic batching from the
        model file, as Triton's onnxruntime backend does: a model whose every
        input and output has a variable first dimension can batch, and gets
        max_batch_size = default_max_batch_size (with dynamic batching when
        that is > 1 and no scheduler is configured)."""
        try:
            session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        except Exception as err:
            raise ServerError(Code.INVALID_ARG,
                              f"onnxruntime could not load '{model_path}': {err}") from None
        ins, outs = session.get_inputs(), session.get_outputs()

        def variable_first(t):
            return bool(t.shape) and not (isinstance(t.shape[0], int) and t.shape[0] > 0)

        can_batch = all(variable_first(t) for t in ins + outs)
        if config.max_batch_size == 0 and can_batch and not config.input and not config.output:
            config.max_batch_size = max(0, default_max_batch_size)
            if (config.max_batch_size > 1 and not config.HasField("dynamic_batching")
                    and not config.HasField("sequence_batching")):
                config.dynamic_batching.SetInParent()
        skip = 1 if config.max_batch_size > 0 else 0
        from pyserver._proto import enum_descriptor
        data_types = enum_descriptor("inference.DataType").values_by_name

        def fill(target, tensors, kind):
            for t in tensors:
                if t.type not in _ORT_TO_CONFIG:
                    raise ServerError(Code.UNSUPPORTED,
                                      f"model '{config.name}': {kind} '{t.name}' has type {t.type}, "
                                      "which this backend does not support")
                entry = target.add()
                entry.name = t.name
                entry.data_type = data_types[_ORT_TO_CONFIG[t.type]].number
                dims = [d if isinstance(d, int) and d > 0 else -1 for d in t.shape[skip:]]
                entry.dims.extend(dims)

        if not config.input:
            fill(config.input, ins, "input")
        if not config.output:
            fill(config.output, outs, "output")
        if not config.platform and not config.backend:
            config.backend = "onnxruntime"

    def execute(self, inputs: dict) -> dict:
        feed = {}
        for name, value in inputs.items():
            if value.dtype == np.object_:
                # ORT takes string tensors as str objects.
                value = np.array([v.decode("utf-8") if isinstance(v, bytes) else v
                                  for v in value.reshape(-1)], dtype=object).reshape(value.shape)
            feed[name] = value
        # InferenceSession.run releases the GIL while the graph executes.
        results = self.session.run(self.output_names, feed)
        return dict(zip(self.output_names, results))
