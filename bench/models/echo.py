"""Tensor echo: OUTPUT = INPUT (FP32, 1 MiB per request in the suite), so
the figure is the cost of moving bytes through the server."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy())])
            for r in requests]
