"""BYTES in, BYTES out: OUTPUT is INPUT with every element reversed
(an object array of bytes, as Triton hands BYTES tensors to Python)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            out = np.array([bytes(s)[::-1] for s in text.reshape(-1)], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", out.reshape(text.shape))]))
        return responses
