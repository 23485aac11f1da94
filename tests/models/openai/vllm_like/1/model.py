"""A stand-in for a vLLM model on CPU: it takes what Triton's vLLM backend
takes (text_input, stream, sampling_parameters as JSON,
exclude_input_in_output, return_num_input_tokens/_output_tokens) and
answers as it does. Its tokens are the prompt's words (as tiny_llm's),
max_tokens of them from sampling_parameters, ending before a stop word it
is given there; the prompt comes first unless exclude_input_in_output.
The sampling parameters it was sent are written to last_request.json in
its model folder.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def optional(request, name, default):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    value = t.as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value.item()


def answer(text, n_in, n_out, counts):
    outputs = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
    if counts:
        outputs += [pb_utils.Tensor("num_input_tokens", np.array([n_in], np.uint32)),
                    pb_utils.Tensor("num_output_tokens", np.array([n_out], np.uint32))]
    return pb_utils.InferenceResponse(output_tensors=outputs)


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = optional(request, "text_input", "")
            params = json.loads(optional(request, "sampling_parameters", "{}"))
            exclude = bool(optional(request, "exclude_input_in_output", True))
            counts = bool(optional(request, "return_num_output_tokens", False))
            with open(os.path.join(self.folder, "last_request.json"), "w") as f:
                json.dump({"sampling_parameters": params, "exclude_input_in_output": exclude},
                          f)
            words = prompt.split() or ["?"]
            stops = params.get("stop") or []
            tokens = []
            for i in range(int(params.get("max_tokens", 16))):
                word = words[i % len(words)]
                if word in stops:
                    break
                tokens.append(" " + word)
            head = "" if exclude else prompt
            if bool(optional(request, "stream", False)):
                if head:
                    sender.send(answer(head, len(words), 0, counts))
                for token in tokens:
                    sender.send(answer(token, len(words), 1, counts))
                sender.send(flags=FINAL)
            else:
                sender.send(answer(head + "".join(tokens), len(words), len(tokens), counts),
                            flags=FINAL)
        return None
