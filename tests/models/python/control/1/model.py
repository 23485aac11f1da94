"""Custom metrics and model control from a model. Request parameter "op":

- "metrics" (default): the counter "control_requests" (labels model,
  version) goes up by one, the gauge "control_last_size" is set to
  len(IN), every IN value is observed by the histogram "control_values"
  (buckets 1, 10, 100). OUT = [counter value, gauge value]; NOTE holds the
  errors of operations a kind does not support.
- "load" / "unload" / "ready": pb_utils.load_model / unload_model /
  is_model_ready on parameter "target"; "load" sends parameter "config"
  and, with "file" set, that file's text as file:1/model.py. OUT = [1]
  when ready (is_model_ready); NOTE is the error text, if any.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests = pb_utils.MetricFamily(
            "control_requests", "Requests the control model executed",
            pb_utils.MetricFamily.COUNTER).Metric(labels=labels)
        self.size = pb_utils.MetricFamily(
            "control_last_size", "Elements in the last request",
            pb_utils.MetricFamily.GAUGE).Metric(labels=labels)
        self.values = pb_utils.MetricFamily(
            "control_values", "The values seen",
            pb_utils.MetricFamily.HISTOGRAM).Metric(labels=labels, buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        return [self.one(r) for r in requests]

    def one(self, request):
        params = json.loads(request.parameters())
        op = params.get("op", "metrics")
        data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        notes = []
        out = []
        if op == "metrics":
            self.requests.increment(1)
            self.size.set(len(data))
            for v in data:
                self.values.observe(float(v))
            out = [self.requests.value(), self.size.value()]
            for bad in (lambda: self.requests.increment(-1), lambda: self.requests.set(3),
                        lambda: self.values.value(), lambda: self.size.observe(1),
                        lambda: pb_utils.MetricFamily("bad name", "", 0),
                        lambda: pb_utils.MetricFamily("x_hist", "", 2).Metric(labels={}),
                        lambda: pb_utils.MetricFamily("x_gauge", "", 1).Metric(buckets=[1.0])):
                try:
                    bad()
                    notes.append("no error")
                except pb_utils.TritonModelException as e:
                    notes.append(str(e))
        else:
            target = params.get("target", "")
            try:
                if op == "load":
                    files = None
                    if params.get("file"):
                        files = {"file:1/model.py": params["file"].encode()}
                    pb_utils.load_model(model_name=target, config=params.get("config", ""),
                                        files=files)
                elif op == "unload":
                    pb_utils.unload_model(target)
                elif op == "ready":
                    out = [float(pb_utils.is_model_ready(target, params.get("version", "")))]
            except pb_utils.TritonModelException as e:
                notes.append(str(e))
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUT", np.array(out, np.float32)),
            pb_utils.Tensor("NOTE", np.array([n.encode() for n in notes], np.object_))])
