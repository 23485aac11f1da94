"""A decoupled model whose work happens after execute() has returned: a
thread per request calls "add_sub" through BLS (with trace=request.trace(),
so that call is traced under the request), sends its OUTPUT0 as one
response, then the final flag alone."""

import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.answer, args=(request,))
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        inputs = [pb_utils.get_input_tensor_by_name(request, name) for name in ("INPUT0", "INPUT1")]
        bls = pb_utils.InferenceRequest(model_name="add_sub", requested_output_names=["OUTPUT0"],
                                        inputs=inputs, trace=request.trace())
        response = bls.exec()
        if response.has_error():
            sender.send(pb_utils.InferenceResponse(error=response.error()),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
        sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
