"""A non-decoupled model that answers through the response sender (one
response with the final flag) and returns None for the request. IN = 2
tries to send twice: the second send raises, and its text is the answer's
error."""

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            out = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n * 10], np.int32))])
            if n == 2:
                sender.send(out)
                try:
                    sender.send(out, flags=FINAL)
                except pb_utils.TritonModelException as e:
                    raise pb_utils.TritonModelException(f"second send: {e}") from None
            else:
                sender.send(out, flags=FINAL)
        return [None] * len(requests)
