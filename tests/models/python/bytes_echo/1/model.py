"""BYTES in and out: upper-cases each element (bytes), gives its length, and
answers the same text as Python str objects (sent back UTF-8 encoded)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT")
            values = text.as_numpy()
            assert values.dtype == np.object_, values.dtype
            assert text.triton_dtype() == 13
            upper = np.array([v.upper() for v in values.reshape(-1)], dtype=np.object_).reshape(values.shape)
            lengths = np.array([len(v) for v in values.reshape(-1)], dtype=np.int32).reshape(values.shape)
            as_str = np.array([v.decode("utf-8") for v in values.reshape(-1)], dtype=np.object_).reshape(values.shape)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("LENGTHS", lengths),
                 pb_utils.Tensor("AS_STR", as_str)],
                parameters={"request_id": request.request_id(),
                            "requested": json.dumps(request.requested_output_names()),
                            "params": request.parameters(),
                            "cancelled": request.is_cancelled(),
                            "correlation_id": request.correlation_id(),
                            "flags": request.flags(),
                            "timeout": request.timeout()}))
        return responses
