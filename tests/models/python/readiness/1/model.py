"""is_ready() answers what the last request set (async, as Triton allows):
READY = false makes the model report not ready. A request parameter "mode"
changes how is_ready() answers from then on: "raise" (an exception),
"non_bool" (a string), "slow" (after 8 s, past the 5 s a check may take)."""

import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready = True
        self.mode = ""

    async def is_ready(self):
        await asyncio.sleep(8 if self.mode == "slow" else 0)
        if self.mode == "raise":
            raise ValueError("the feature store is unreachable")
        if self.mode == "non_bool":
            return "yes"
        return self.ready

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            self.ready = bool(value[0])
            self.mode = json.loads(request.parameters()).get("mode", "")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
