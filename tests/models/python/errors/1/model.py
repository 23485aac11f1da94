"""What a model can do wrong, chosen by the request's MODE string:
  code:<NAME>     a response with TritonError(<message>, TritonError.<NAME>)
  default_code    a response with TritonError(<message>) (INTERNAL)
  model_exception raise TritonModelException from execute
  value_error     raise ValueError from execute
  two_responses   return two responses for one request
  not_a_list      return a tuple
  not_a_response  return a list holding a string
  none_response   return [None]
  bad_tensor      build Tensor("", ...)
  ok              OUT = [7]
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = pb_utils.get_input_tensor_by_name(requests[0], "MODE").as_numpy().reshape(-1)[0].decode()
        ok = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7], np.int32))])
        if mode.startswith("code:"):
            name = mode[5:]
            error = pb_utils.TritonError(f"error code: {name}", getattr(pb_utils.TritonError, name))
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        if mode == "default_code":
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError("default code")) for _ in requests]
        if mode == "model_exception":
            raise pb_utils.TritonModelException("the model refused")
        if mode == "value_error":
            return self.helper()
        if mode == "two_responses":
            return [ok] * (len(requests) + 1)
        if mode == "not_a_list":
            return tuple(ok for _ in requests)
        if mode == "not_a_response":
            return ["oops" for _ in requests]
        if mode == "none_response":
            return [None for _ in requests]
        if mode == "bad_tensor":
            pb_utils.Tensor("", np.zeros(1))
        return [ok for _ in requests]

    def helper(self):
        raise ValueError("bad value in helper")
