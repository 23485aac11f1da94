"""request.is_cancelled() while execute runs. IN = 1: poll is_cancelled()
every 10 ms for up to 5 s, remember whether the cancel was seen and how long
it took. IN = 0: OUT = [1.0 if the last wait saw its cancel, seconds it
waited]."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = (0.0, 0.0)

    def execute(self, requests):
        responses = []
        for request in requests:
            wait = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            if wait:
                start = time.monotonic()
                cancelled = False
                while time.monotonic() - start < 5.0:
                    if request.is_cancelled():
                        cancelled = True
                        break
                    time.sleep(0.01)
                self.seen = (float(cancelled), time.monotonic() - start)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array(self.seen, np.float32))]))
        return responses
