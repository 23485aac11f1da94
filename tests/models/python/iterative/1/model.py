"""An iterative sequence model (sequence_batching { iterative_sequence:
true }): for IN = n, a request runs n times. Each run but the last releases
it with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, so it comes back in a later
batch; the model keeps each request's progress by its correlation ID.

Not decoupled: the last run answers OUT = n and NOTE, a JSON record of each
run (correlation ID, flags, batch size, and which requests shared the
batch). Decoupled (same file, decoupled config): every run sends OUT = runs
left through the response sender, the last with the final flag.

The request parameter "mode" picks other behaviours:
- "answer_too": the first run reschedules and returns a response anyway
  (Triton's stub refuses that)
"""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.runs = {}  # correlation ID -> what each of its runs saw
        self.lock = threading.Lock()

    def execute(self, requests):
        responses = []
        ids = [request.correlation_id() for request in requests]
        for request in requests:
            given = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            n = int(given.reshape(-1)[0])
            mode = json.loads(request.parameters()).get("mode", "")
            corr = request.correlation_id()
            with self.lock:
                runs = self.runs.setdefault(corr, [])
                runs.append({"corr": corr, "flags": request.flags(), "batch": len(requests),
                             "with": ids})
            left = n - len(runs)
            if self.decoupled:
                sender = request.get_response_sender()
                out = pb_utils.Tensor("OUT", np.full(given.shape, left, np.int32))
                if left > 0:
                    request.set_release_flags(RESCHEDULE)
                    sender.send(pb_utils.InferenceResponse([out]))
                else:
                    with self.lock:
                        del self.runs[corr]
                    sender.send(pb_utils.InferenceResponse([out]), flags=FINAL)
                continue
            if left > 0:
                request.set_release_flags(RESCHEDULE)
                responses.append(self.answer(given, runs) if mode == "answer_too" else None)
                continue
            with self.lock:
                del self.runs[corr]
            responses.append(self.answer(given, runs))
        return None if self.decoupled else responses

    @staticmethod
    def answer(given, runs):
        note = np.empty(given.shape, np.object_)
        note.fill(json.dumps(runs).encode())
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", given.astype(np.int32)),
            pb_utils.Tensor("NOTE", note),
        ])
