"""Answers what initialize() was given (and what the worker sees of its
environment) as one JSON string."""

import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.arg_types = sorted({type(k).__name__ for k in args} | {type(v).__name__ for v in args.values()})

    def execute(self, requests):
        info = {
            "args": self.args,
            "arg_types": self.arg_types,
            "pid": os.getpid(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "model_dir": pb_utils.get_model_dir(),
            "module": __name__,
            "sys_path_tail": sys.path[-3:],
        }
        out = np.array([json.dumps(info).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]) for _ in requests]
