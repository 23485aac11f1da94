"""InferenceResponse and the iterators a request's responses arrive on:
``ResponseIterator`` for a blocking caller, ``AsyncResponseIterator`` for an
asyncio one. Both take what the server's ResponseStream calls back with on
its loop thread and hand it over to the caller's thread or loop; the
conversion to the API's types happens on the caller's side."""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import Any, Optional

from pyserver.inprocess.errors import InvalidArgumentError, TritonError, api_error
from pyserver.inprocess.tensor import output_tensor

__all__ = ["AsyncResponseIterator", "InferenceResponse", "ResponseIterator"]


@dataclass
class InferenceResponse:
    """One response: ``outputs`` ({name: Tensor}), ``parameters``,
    ``error`` (a TritonError) and ``final`` (the request's last response;
    a decoupled model's may carry no outputs)."""

    model: Any
    request_id: Optional[str] = None
    parameters: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    error: Optional[TritonError] = None
    classification_label: Optional[str] = None
    final: bool = False

    @staticmethod
    def _from_server(model, request, response, error, final: bool) -> InferenceResponse:
        """From a ResponseStream call: (the server's InferResponse or None,
        its error or None, whether it is the last)."""
        result = InferenceResponse(model, request.request_id, final=final)
        if response is not None:
            result.request_id = response.id or request.request_id
            result.parameters = dict(response.parameters)
            result.outputs = {t.name: output_tensor(t.datatype, t.shape, t.data)
                              for t in response.outputs}
            if response.model_version and str(model.version) != str(response.model_version):
                result.model = model._at_version(int(response.model_version))
        if error is not None:
            result.error = api_error(error)
            result.error.args += (result,)
        if request.output_memory_type is not None and result.outputs:
            try:
                result.outputs = {name: t.to_device(request.output_memory_type)
                                  for name, t in result.outputs.items()}
            except Exception as e:
                raise InvalidArgumentError(
                    f"Memory type {request.output_memory_type} not supported: {e}") from None
        return result


class _Responses:
    """What both iterators share: the stream (for cancel) and the model
    and request the responses belong to."""

    def __init__(self, model, request, raise_on_error: bool):
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._complete = False
        self._stream = None  # set once the server took the request

    def _submit_there(self, server_request) -> None:  # on the server's loop
        # (set there, so the final response, which drops it, always comes after)
        self._stream = self._model._host.server.submit_stream(server_request, self._on_response)

    def _convert(self, item) -> InferenceResponse:
        if isinstance(item, InferenceResponse):
            return item
        return InferenceResponse._from_server(self._model, self._request, *item)

    def _deliver(self, response: InferenceResponse) -> InferenceResponse:
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response

    def cancel(self) -> None:
        """Cancels the request: a queued one ends at once (its final
        response carries the CANCELLED error), a running one sees
        is_cancelled() and ends when its model stops."""
        self._model._host.post(self._cancel_there)

    def _cancel_there(self) -> None:  # on the server's loop, after the submission
        if self._stream is not None:
            self._model._host.server.cancel_stream(self._stream)


class ResponseIterator(_Responses):
    """The responses of one request, for a blocking caller."""

    def __init__(self, model, request, raise_on_error: bool):
        super().__init__(model, request, raise_on_error)
        self._queue = queue.SimpleQueue()
        self._user_queue = request.response_queue

    def _on_response(self, response, error, final) -> None:  # on the server's loop
        if final:
            self._stream = None  # (the stream refers to us: no cycle left for the gc)
        if self._user_queue is None:
            self._queue.put((response, error, final))
            return
        # the user's queue sees each response as it arrives, converted once
        try:
            item = InferenceResponse._from_server(self._model, self._request, response, error,
                                                  final)
        except TritonError as e:
            item = InferenceResponse(self._model, self._request.request_id, error=e, final=final)
        self._queue.put(item)
        self._user_queue.put_nowait(item)

    def __iter__(self):
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        return self._deliver(self._convert(self._queue.get()))


class AsyncResponseIterator(_Responses):
    """The responses of one request, for a caller on an asyncio loop (the
    loop ``async_infer`` was called on)."""

    def __init__(self, model, request, raise_on_error: bool, loop=None):
        super().__init__(model, request, raise_on_error)
        self._loop = loop or asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self._user_queue = request.response_queue

    def _submit_there(self, server_request) -> None:  # on the server's loop
        """The submission, sent without waiting: the caller's loop does not
        block on the server's (what the server refuses at once comes back as
        the first thing the iterator raises)."""
        try:
            super()._submit_there(server_request)
        except Exception as e:  # handed to the caller's loop
            self._loop.call_soon_threadsafe(self._queue.put_nowait, _Refused(e))

    def _on_response(self, response, error, final) -> None:  # on the server's loop
        if final:
            self._stream = None
        self._loop.call_soon_threadsafe(self._arrived, (response, error, final))

    def _arrived(self, item) -> None:  # on the caller's loop
        if self._user_queue is not None:
            try:
                item = self._convert(item)
            except TritonError as e:
                item = InferenceResponse(self._model, self._request.request_id, error=e,
                                         final=item[2])
            self._user_queue.put_nowait(item)
        self._queue.put_nowait(item)

    def __aiter__(self):
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        item = await self._queue.get()
        if type(item) is _Refused:
            self._complete = True
            raise api_error(item.error)
        return self._deliver(self._convert(item))


class _Refused:
    """What the server raised when it was handed the request."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error
