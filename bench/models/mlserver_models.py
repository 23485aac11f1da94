"""The suite's models as MLServer runtimes: the same math as the Triton
model.py files beside this one (add_sub, MLP through onnxruntime, BYTES
reversal, tensor echo). MLServer imports this module from the model
repository folder (the suite starts `mlserver start` there)."""

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput
from mlserver.utils import get_model_uri


def _inputs(payload: InferenceRequest) -> dict:
    return {i.name: i for i in payload.inputs}


def _response(model: MLModel, outputs: list) -> InferenceResponse:
    return InferenceResponse(model_name=model.name, outputs=outputs)


class AddSub(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        named = _inputs(payload)
        a = NumpyCodec.decode_input(named["INPUT0"]).astype(np.float32)
        b = NumpyCodec.decode_input(named["INPUT1"]).astype(np.float32)
        return _response(self, [NumpyCodec.encode_output("OUTPUT0", a + b),
                                NumpyCodec.encode_output("OUTPUT1", a - b)])


class Mlp(MLModel):
    async def load(self) -> bool:
        path = await get_model_uri(self.settings)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(_inputs(payload)["INPUT"]).astype(np.float32)
        (out,) = self.session.run(["OUTPUT"], {"INPUT": x})
        return _response(self, [NumpyCodec.encode_output("OUTPUT", out)])


class Strings(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tensor = _inputs(payload)["INPUT"]
        data = getattr(tensor.data, "root", tensor.data)
        items = [s.encode() if isinstance(s, str) else bytes(s) for s in data]
        return _response(self, [ResponseOutput(name="OUTPUT", shape=tensor.shape, datatype="BYTES",
                                               data=[s[::-1] for s in items])])


class Echo(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(_inputs(payload)["INPUT"]).astype(np.float32)
        return _response(self, [NumpyCodec.encode_output("OUTPUT", x)])
