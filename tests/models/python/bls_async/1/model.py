"""BLS from an async execute: for each request, "count" (request parameter,
default 4) async_exec calls to "target" (default "add_sub") in flight at
once, INPUT0 scaled by 1..count, awaited together with asyncio.gather.
OUTPUT0 is the sum of their OUTPUT0s, OUTPUT1 of their OUTPUT1s. A BLS
error comes back as this request's error. "decoupled": true awaits
async_exec(decoupled=True) on "repeat" instead and counts its responses.
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        return await asyncio.gather(*(self.one(r) for r in requests))

    async def one(self, request):
        params = json.loads(request.parameters())
        target = params.get("target", "add_sub")
        count = int(params.get("count", 4))
        a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
        if params.get("decoupled"):
            bls = pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["IDX"],
                inputs=[pb_utils.Tensor("IN", np.array([len(a)], np.int32))])
            responses = await bls.async_exec(decoupled=True)
            idx = [int(pb_utils.get_output_tensor_by_name(r, "IDX").as_numpy()[0])
                   for r in responses if r.output_tensors()]
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.array(idx, np.float32)),
                pb_utils.Tensor("OUTPUT1", np.zeros(1, np.float32))])
        calls = []
        for k in range(1, count + 1):
            bls = pb_utils.InferenceRequest(
                model_name=target, requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[pb_utils.Tensor("INPUT0", a * k), pb_utils.Tensor("INPUT1", b)])
            calls.append(bls.async_exec())
        responses = await asyncio.gather(*calls)
        out0 = np.zeros_like(a)
        out1 = np.zeros_like(a)
        for response in responses:
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            out0 += pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
            out1 += pb_utils.get_output_tensor_by_name(response, "OUTPUT1").as_numpy()
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", out0), pb_utils.Tensor("OUTPUT1", out1)])
