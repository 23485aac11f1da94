"""BLS from a synchronous execute. Request parameters:

- "target" (default "add_sub"): the model INPUT0/INPUT1 are sent to with
  exec(); its OUTPUT0/OUTPUT1 are returned. An error the BLS call returns
  (in the response, not raised) is returned as this request's error, with
  its code.
- "mode" "decoupled": exec(decoupled=True) on the decoupled model "repeat"
  with IN = len(INPUT0); OUTPUT0 lists the IDX of every response, OUTPUT1
  says how many responses had no outputs (the final flag alone).
- "mode" "cancel": exec(decoupled=True) on "repeat" in its "slow" mode,
  cancel() after the first response, read on to the end; OUTPUT0 lists the
  IDX received, OUTPUT1 is 1 when the last response says the model saw
  the cancellation.
- "mode" "bytes": sends [[b"ab", b"", "cdé"]] (a BYTES tensor, batch of 1)
  to "bytes_echo"; OUTPUT0 is its LENGTHS, OUTPUT1 is 1 when its UPPER is
  the upper-cased text.
- "mode" "wrong_input": sends INPUT0 only, as INT32.
- "mode" "unary_to_decoupled": exec() without decoupled=True on "repeat".
- "trace" true: the call to "target" passes trace=request.trace(), so it is
  traced as a child of this request (Triton's way to trace a BLS call).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [self.one(r) for r in requests]

    def one(self, request):
        params = json.loads(request.parameters())
        target = params.get("target", "add_sub")
        mode = params.get("mode", "")
        a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
        if mode in ("decoupled", "unary_to_decoupled"):
            bls = pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["IDX"],
                inputs=[pb_utils.Tensor("IN", np.array([len(a)], np.int32))])
            if mode == "unary_to_decoupled":
                return self.relay(bls.exec())
            seen, empty = [], 0
            for response in bls.exec(decoupled=True):
                if response.has_error():
                    return pb_utils.InferenceResponse(error=response.error())
                if not response.output_tensors():
                    empty += 1
                    continue
                seen.append(int(pb_utils.get_output_tensor_by_name(response, "IDX").as_numpy()[0]))
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.array(seen, np.float32)),
                pb_utils.Tensor("OUTPUT1", np.array([empty], np.float32))])
        if mode == "cancel":
            bls = pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["IDX", "NOTE"],
                inputs=[pb_utils.Tensor("IN", np.array([len(a)], np.int32))],
                parameters={"mode": "slow"})
            responses = bls.exec(decoupled=True)
            seen, note = [], b""
            for response in responses:
                if response.has_error():
                    return pb_utils.InferenceResponse(error=response.error())
                if not response.output_tensors():
                    continue
                seen.append(int(pb_utils.get_output_tensor_by_name(response, "IDX").as_numpy()[0]))
                note = pb_utils.get_output_tensor_by_name(response, "NOTE").as_numpy()[0]
                if len(seen) == 1:
                    responses.cancel()
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", np.array(seen, np.float32)),
                pb_utils.Tensor("OUTPUT1", np.array([note == b"cancelled"], np.float32))])
        if mode == "bytes":
            text = np.array([[b"ab", b"", "cd\u00e9".encode()]], np.object_)
            response = pb_utils.InferenceRequest(
                model_name="bytes_echo", requested_output_names=["UPPER", "LENGTHS"],
                inputs=[pb_utils.Tensor("TEXT", text)]).exec()
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            upper = pb_utils.get_output_tensor_by_name(response, "UPPER").as_numpy()
            lengths = pb_utils.get_output_tensor_by_name(response, "LENGTHS").as_numpy()
            same = upper.tolist() == [[b"AB", b"", "CD\u00e9".encode()]]
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", lengths.reshape(-1).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", np.array([same], np.float32))])
        if mode == "wrong_input":
            inputs = [pb_utils.Tensor("INPUT0", a.astype(np.int32))]
        else:
            inputs = [pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)]
        traced = {"trace": request.trace()} if params.get("trace") else {}
        bls = pb_utils.InferenceRequest(model_name=target, inputs=inputs,
                                        requested_output_names=["OUTPUT0", "OUTPUT1"], **traced)
        return self.relay(bls.exec())

    @staticmethod
    def relay(response):
        """The called model's outputs and response parameters, as ours."""
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUTPUT0", pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()),
            pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(response, "OUTPUT1").as_numpy())],
            parameters=json.loads(response.parameters()))
