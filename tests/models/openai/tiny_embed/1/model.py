"""An embedding model for the OpenAI frontend's tests: text_input -> a
4-vector [characters, words, code of the first character, 0.5] and its
word count as num_input_tokens."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            text = text.reshape(-1)[0].decode()
            vector = np.array([len(text), len(text.split()), ord(text[0]), 0.5], np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("embedding", vector),
                pb_utils.Tensor("num_input_tokens", np.array([len(text.split())], np.int32))]))
        return responses
