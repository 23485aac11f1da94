"""is_ready() answers what the last request set (async, as Triton allows);
a request with READY = false makes the model report not ready."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.ready = True

    async def is_ready(self):
        await asyncio.sleep(0)
        return self.ready

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            self.ready = bool(value[0])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
