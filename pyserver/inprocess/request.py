"""InferenceRequest: what one inference asks of a model, as the in-process
API spells it, and its translation to the server's InferRequest."""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import Any, Optional

from pyserver.inprocess.enums import RequestFlag
from pyserver.inprocess.errors import InvalidArgumentError
from pyserver.inprocess.tensor import input_array, parse_device_or_memory_type
from pyserver.kernel.types import InferRequest, InferTensor

__all__ = ["InferenceRequest"]

# The parameter value types a request carries (Triton's string, int,
# double and bool parameters); bool is checked by exact type, not as an int.
_PARAMETER_TYPES = (str, int, float, bool)


@dataclass
class InferenceRequest:
    """One request to ``model``: inputs ({name: numpy array, list, Tensor or
    any DLPack object}), parameters, and what Triton's request carries
    besides (request id, sequence correlation id and flags, priority,
    timeout in microseconds, the memory type outputs are wanted in).
    ``response_queue`` (a queue.SimpleQueue for ``infer``, an asyncio.Queue
    for ``async_infer``) gets every response as it comes, besides the
    iterator."""

    model: Any
    request_id: Optional[str] = None
    flags: int = 0
    correlation_id: Optional[int | str] = None
    priority: int = 0
    timeout: int = 0
    inputs: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    output_memory_type: Any = None
    response_queue: Optional[queue.SimpleQueue | asyncio.Queue] = None

    def _server_request(self) -> InferRequest:
        """The server's request; InvalidArgumentError for what the API
        itself refuses (a parameter or input it cannot convert, an unknown
        memory type)."""
        if self.output_memory_type is not None:
            parse_device_or_memory_type(self.output_memory_type)
        parameters = {}
        for key, value in self.parameters.items():
            if type(value) not in _PARAMETER_TYPES:
                raise InvalidArgumentError(f"Unsupported Value. Can't convert {type(value)} to "
                                           "Request Parameter")
            parameters[key] = value
        if self.correlation_id is not None and self.correlation_id != 0:
            parameters["sequence_id"] = self.correlation_id
        if self.flags & RequestFlag.SEQUENCE_START:
            parameters["sequence_start"] = True
        if self.flags & RequestFlag.SEQUENCE_END:
            parameters["sequence_end"] = True
        tensors = []
        for name, value in self.inputs.items():
            datatype, array = input_array(value)
            tensors.append(InferTensor(name, datatype, array.shape, array))
        model = self.model
        return InferRequest(model.name, "" if model.version == -1 else str(model.version),
                            self.request_id or "", tensors, [], parameters,
                            int(self.priority), int(self.timeout))
