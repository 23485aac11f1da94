"""No config.pbtxt: auto_complete_config declares the inputs, outputs,
max_batch_size and dynamic batching (as Triton's auto_complete example)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        have = {t["name"] for t in config["input"]}
        for spec in ({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                     {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": True}):
            if spec["name"] not in have:
                auto_complete_model_config.add_input(spec)
        auto_complete_model_config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out = a * 2 if b is None else a + b.as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out.astype(np.float32))]))
        return responses
