"""MLP FP32 [256] -> 1024 (ReLU) -> 256 as a Triton Python model that runs
the suite's model.onnx with onnxruntime (one intra-op thread, as pyserver's
ONNX backend is configured in the suite). With dynamic batching the requests
of one execute() call are stacked into one session run and split again."""

import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy() for r in requests]
        batch = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        (out,) = self.session.run(["OUTPUT"], {"INPUT": batch})
        responses, start = [], 0
        for a in arrays:
            part = out[start:start + len(a)]
            start += len(a)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", part)]))
        return responses
