"""add_sub with `async def execute`: the coroutine runs on the instance's
asyncio loop and may await."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def initialize(self, args):
        await asyncio.sleep(0)
        self.loop_seen = None

    async def execute(self, requests):
        await asyncio.sleep(0.001)
        loop = asyncio.get_running_loop()
        if self.loop_seen is None:
            self.loop_seen = loop
        same_loop = self.loop_seen is loop
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32)),
            ], parameters={"same_loop": same_loop}))
        return responses
