"""A decoupled model with `async def execute`: as in Triton, execute runs
on the instance's asyncio loop in the background (the worker takes the next
batch at once) and sends IN = n responses 10 ms apart, OUT = n, IDX = i,
then the final flag alone. NOTE of the last response says how many
executes were running at once at its start."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.running = 0

    async def execute(self, requests):
        self.running += 1
        try:
            overlap = self.running
            await asyncio.gather(*(self.answer(r, overlap) for r in requests))
        finally:
            self.running -= 1

    async def answer(self, request, overlap):
        n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
        sender = request.get_response_sender()
        for i in range(n):
            await asyncio.sleep(0.01)
            note = str(overlap).encode() if i == n - 1 else b""
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([n], np.int32)),
                pb_utils.Tensor("IDX", np.array([i], np.int32)),
                pb_utils.Tensor("NOTE", np.array([note], np.object_))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
