"""Takes 20 ms per execute() call, so that requests queue behind it, and
reports how many requests that call saw (SEEN) and its number in this
process (CALL). IN < 0 raises from execute; IN == 0 answers with an error
response."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        time.sleep(0.02)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x[0] < 0:
                raise pb_utils.TritonModelException(f"negative input {x[0]:g}")
            if x[0] == 0:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("zero input", pb_utils.TritonError.INVALID_ARG)))
                continue
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x * 2),
                pb_utils.Tensor("SEEN", np.array([len(requests)], np.int64)),
                pb_utils.Tensor("CALL", np.array([self.calls], np.int64)),
            ]))
        return responses
