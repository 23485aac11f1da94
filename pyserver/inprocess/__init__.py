"""Triton's in-process Python API (the ``tritonserver`` package's) over
pyserver: code written for it runs here unchanged.

    import tritonserver            # with the shim installed (shims/tritonserver)
    server = tritonserver.Server(model_repository="models/").start(wait_until_ready=True)
    for response in server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}):
        print(numpy.from_dlpack(response.outputs["OUTPUT0"]))

or, without the shim, ``import pyserver.inprocess as tritonserver``.
Requests go through the same schedulers, batching, cache, statistics and
tracing as network requests; no HTTP or gRPC endpoint is opened.

Modules: server (Server, Options, metrics), model (Model), request
(InferenceRequest), response (InferenceResponse, the response iterators),
tensor (Tensor, MemoryBuffer, DLPack), enums, errors, host (the loop thread
the server runs on).
"""

from pyserver.inprocess.enums import (
    DataType,
    DLDeviceType,
    InstanceGroupKind,
    LogFormat,
    LogLevel,
    MemoryType,
    MetricFormat,
    MetricKind,
    ModelBatchFlag,
    ModelControlMode,
    ModelIndexFlag,
    ModelTxnPropertyFlag,
    RateLimitMode,
    RequestFlag,
    ResponseCompleteFlag,
)
from pyserver.inprocess.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from pyserver.inprocess.model import Model
from pyserver.inprocess.request import InferenceRequest
from pyserver.inprocess.response import InferenceResponse
from pyserver.inprocess.server import (
    Metric,
    MetricFamily,
    ModelLoadDeviceLimit,
    Options,
    RateLimiterResource,
    Server,
)
from pyserver.inprocess.tensor import MemoryBuffer, Tensor

__all__ = ["AlreadyExistsError", "DLDeviceType", "DataType", "InferenceRequest",
           "InferenceResponse", "InstanceGroupKind", "InternalError", "InvalidArgumentError",
           "LogFormat", "LogLevel", "MemoryBuffer", "MemoryType", "Metric", "MetricFamily",
           "MetricFormat", "MetricKind", "Model", "ModelBatchFlag", "ModelControlMode",
           "ModelIndexFlag", "ModelLoadDeviceLimit", "ModelTxnPropertyFlag", "NotFoundError",
           "Options", "RateLimitMode", "RateLimiterResource", "RequestFlag",
           "ResponseCompleteFlag", "Server", "Tensor", "TritonError", "UnavailableError",
           "UnknownError", "UnsupportedError"]
