"""ONNX Runtime backend (CPU execution provider), as Triton's onnxruntime
backend reads its config: intra/inter op thread counts from `parameters`,
graph optimization level from `optimization.graph.level`."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from pyserver.core.errors import Code, ServerError


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
