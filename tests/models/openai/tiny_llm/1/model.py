"""A decoupled model that "generates" text the way Triton's OpenAI frontend
expects (text_input, stream, max_tokens -> text_output, num_input_tokens,
num_output_tokens). Its tokens are the prompt's whitespace-separated words:
it answers max_tokens of them (16 when not told), the prompt's words over
and over, each with a space in front. Streaming, one response per token;
else one response with all of them.

Each request runs on its own thread, so requests overlap. It writes what
it saw to files in its model folder: last_request.json (the inputs of the
latest request), and, for a prompt with the word SLOW (a token every 20 ms,
up to 5,000), cancelled.txt once it sees the request cancelled. A prompt
with the word FAIL is answered with an error after its first token.
"""

import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def optional(request, name, default):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    value = t.as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value.item()


def answer(tokens, n_in, counts):
    outputs = [pb_utils.Tensor("text_output",
                               np.array(["".join(tokens).encode()], dtype=np.object_))]
    if counts:
        outputs += [pb_utils.Tensor("num_input_tokens", np.array([n_in], np.int32)),
                    pb_utils.Tensor("num_output_tokens", np.array([len(tokens)], np.int32))]
    return pb_utils.InferenceResponse(output_tensors=outputs)


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self.generate, args=(request,), daemon=True).start()
        return None

    def note(self, name, text):
        path = os.path.join(self.folder, name)
        # a temporary name of this thread's own: requests run on threads at once
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = optional(request, "text_input", "")
        stream = bool(optional(request, "stream", False))
        max_tokens = int(optional(request, "max_tokens", 16))
        counts = bool(optional(request, "return_num_output_tokens", False))
        seen = {"text_input": prompt, "stream": stream, "max_tokens": max_tokens,
                "temperature": optional(request, "temperature", None),
                "seed": optional(request, "seed", None), "counts": counts}
        self.note("last_request.json", json.dumps(seen))
        words = prompt.split() or ["?"]
        slow = "SLOW" in words
        if slow:
            max_tokens = 5000
        tokens = [" " + words[i % len(words)] for i in range(max_tokens)]
        if not stream:
            sender.send(answer(tokens, len(words), counts), flags=FINAL)
            return
        for i, token in enumerate(tokens):
            if request.is_cancelled():
                self.note("cancelled.txt", f"cancelled after {i} tokens")
                sender.send(flags=FINAL)
                return
            if "FAIL" in words and i == 1:
                sender.send(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("the model failed on purpose")), flags=FINAL)
                return
            try:
                sender.send(answer([token], len(words), counts))
            except Exception as e:  # the request is over on the server's side
                self.note("cancelled.txt", f"send failed after {i} tokens: {e}")
                return
            if slow:
                time.sleep(0.02)
        sender.send(flags=FINAL)
