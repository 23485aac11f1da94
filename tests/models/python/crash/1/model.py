"""IN = 3: the process exits with code 3 (os._exit); IN = 11: it kills
itself with SIGSEGV; IN >= 1000: sleeps IN - 1000 ms, then answers; anything
is echoed with the worker's pid.
initialize() takes 1.5 s when a file "slow_init" is in the model folder (so a
test can watch the instance while it restarts) and fails when "fail_init" is."""

import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(os.path.join(args["model_repository"], "slow_init")):
            time.sleep(1.5)
        if os.path.exists(os.path.join(args["model_repository"], "fail_init")):
            raise pb_utils.TritonModelException("initialize refused")

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            v = int(x.reshape(-1)[0])  # (batched or not)
            if v == 3:
                os._exit(3)
            if v == 11:
                os.kill(os.getpid(), signal.SIGSEGV)
            if v >= 1000:
                time.sleep((v - 1000) / 1000)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", x),
                pb_utils.Tensor("PID", np.full(x.shape, os.getpid(), np.int64)),
            ]))
        return responses
