"""A decoupled model: for IN = n it sends n responses (OUT = n, IDX = 0..n-1)
through the request's response sender, then the final flag alone. The
request parameter "mode" picks other behaviours:

- "thread": the responses are sent from a thread after execute() returned
- "last_final": the last response carries the final flag itself
- "error_mid": the second response is an error response (the stream goes on)
- "raise": one response, then execute raises
- "return_list": execute returns a list (decoupled models must return None)
- "after_final": sends after the final flag; NOTE of a later "report"
  request is the error that send raised
- "no_final": one response, never the final flag
- "crash_later": one response from a thread, then the worker process exits
- "slow": n responses 50 ms apart from a thread (NOTE, and that of a later
  "report", says whether the request was cancelled when the last was due)
"""

import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def response(n, i, note=""):
    return pb_utils.InferenceResponse(output_tensors=[
        pb_utils.Tensor("OUT", np.array([n], np.int32)),
        pb_utils.Tensor("IDX", np.array([i], np.int32)),
        pb_utils.Tensor("NOTE", np.array([note.encode()], np.object_)),
    ], parameters={"idx": i, "note": note, "last": i == n - 1})


class TritonPythonModel:
    def initialize(self, args):
        self.last_error = ""
        self.threads = []

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            mode = json.loads(request.parameters()).get("mode", "")
            sender = request.get_response_sender()
            if mode == "return_list":
                return [response(n, 0)]
            if mode == "no_final":
                sender.send(response(n, 0))
                continue
            if mode == "crash_later":
                threading.Thread(target=self.crash_later, args=(sender, n)).start()
                continue
            if mode == "thread" or mode == "slow":
                t = threading.Thread(target=self.send_later, args=(sender, n, mode == "slow"))
                t.start()
                self.threads.append(t)
                continue
            if mode == "after_final":
                sender.send(response(n, 0), flags=FINAL)
                try:
                    sender.send(response(n, 1))
                except pb_utils.TritonModelException as e:
                    self.last_error = str(e)
                continue
            if mode == "report":
                sender.send(response(n, 0, self.last_error), flags=FINAL)
                continue
            for i in range(n):
                if mode == "error_mid" and i == 1:
                    sender.send(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("second one failed",
                                                   pb_utils.TritonError.INVALID_ARG)))
                    continue
                last = mode == "last_final" and i == n - 1
                sender.send(response(n, i), flags=FINAL if last else 0)
                if mode == "raise":
                    raise pb_utils.TritonModelException("gave up after one response")
            if mode != "last_final" or n == 0:
                sender.send(flags=FINAL)
        return None

    def send_later(self, sender, n, slow):
        for i in range(n):
            time.sleep(0.05 if slow else 0.01)
            note = ""
            if slow and i == n - 1:
                note = "cancelled" if sender.is_cancelled() else "not cancelled"
                self.last_error = note
            sender.send(response(n, i, note))
        sender.send(flags=FINAL)

    def crash_later(self, sender, n):
        time.sleep(0.05)  # execute has returned: only the open request is left
        sender.send(response(n, 0))
        os._exit(3)

    def finalize(self):
        for t in self.threads:
            t.join(5)
