"""The in-process API's enums, with the values of tritonserver.h's (the
names are the API's: DataType is TRITONSERVER_DataType, and so on)."""

from __future__ import annotations

import enum

__all__ = ["DLDeviceType", "DataType", "InstanceGroupKind", "LogFormat", "LogLevel",
           "MemoryType", "MetricFormat", "MetricKind", "ModelBatchFlag", "ModelControlMode",
           "ModelIndexFlag", "ModelTxnPropertyFlag", "RateLimitMode", "RequestFlag",
           "ResponseCompleteFlag"]


class DataType(enum.IntEnum):
    INVALID = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FP16 = 10
    FP32 = 11
    FP64 = 12
    BYTES = 13
    BF16 = 14


class MemoryType(enum.IntEnum):
    CPU = 0
    CPU_PINNED = 1
    GPU = 2


class ModelControlMode(enum.IntEnum):
    NONE = 0
    POLL = 1
    EXPLICIT = 2


class RateLimitMode(enum.IntEnum):
    OFF = 0
    EXEC_COUNT = 1


class LogFormat(enum.IntEnum):
    DEFAULT = 0
    ISO8601 = 1


class LogLevel(enum.IntEnum):
    INFO = 0
    WARN = 1
    ERROR = 2
    VERBOSE = 3


class MetricFormat(enum.IntEnum):
    PROMETHEUS = 0


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class InstanceGroupKind(enum.IntEnum):
    AUTO = 0
    CPU = 1
    GPU = 2
    MODEL = 3


class ModelBatchFlag(enum.IntEnum):
    UNKNOWN = 1
    FIRST_DIM = 2


class ModelIndexFlag(enum.IntEnum):
    READY = 1


class ModelTxnPropertyFlag(enum.IntEnum):
    ONE_TO_ONE = 1
    DECOUPLED = 2


class RequestFlag(enum.IntFlag):
    SEQUENCE_START = 1
    SEQUENCE_END = 2


class ResponseCompleteFlag(enum.IntEnum):
    FINAL = 1


class DLDeviceType(enum.IntEnum):
    """dlpack.h's device types."""

    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
