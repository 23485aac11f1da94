"""Sleeps 0.3 s per request, holding the GIL of its own process only, and
reports when it ran and in which process."""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            start = time.time()
            end = start + 0.3
            while time.time() < end:  # busy: a thread pool could not overlap this
                pass
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x * 2),
                pb_utils.Tensor("SPAN", np.array([start, time.time()], np.float64)),
                pb_utils.Tensor("PID", np.array([os.getpid()], np.int64)),
            ]))
        return responses
