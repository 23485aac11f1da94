"""Model: one model (a version of it, or -1 for the one its version policy
picks) of an in-process Server: inference, metadata, config, statistics and
readiness."""

from __future__ import annotations

from typing import Any, Optional

from pyserver.inprocess.enums import ModelBatchFlag, ModelTxnPropertyFlag
from pyserver.inprocess.errors import InvalidArgumentError, api_error
from pyserver.inprocess.request import InferenceRequest
from pyserver.inprocess.response import AsyncResponseIterator, ResponseIterator
from pyserver.kernel.errors import ServerError

__all__ = ["Model"]


class Model:
    """Obtained from ``Server.model()``, ``Server.models()`` or
    ``Server.load()``; not validated until used."""

    def __init__(self, server, name: str, version: int = -1, state: Optional[str] = None,
                 reason: Optional[str] = None):
        host = getattr(server, "_host", None)
        if host is None:
            raise InvalidArgumentError("Server not started")
        self._server = server
        self._host = host
        self.name = name
        self.version = version
        self.state = state
        self.reason = reason
        self._versioned: dict[int, Model] = {}

    def _at_version(self, version: int) -> Model:
        """This model at the version that answered (made once per version,
        not once per response)."""
        model = self._versioned.get(version)
        if model is None:
            model = self._versioned[version] = Model(self._server, self.name, version)
        return model

    @property
    def _version(self) -> str:
        return "" if self.version == -1 else str(self.version)

    def _ask(self, fn, *args):
        """``fn(*args)`` on the server's loop, its ServerError as the API's."""
        try:
            return self._host.run(fn, *args)
        except ServerError as e:
            raise api_error(e) from None

    # -- inference -----------------------------------------------------------------

    def create_request(self, **kwargs) -> InferenceRequest:
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def infer(self, inference_request: Optional[InferenceRequest] = None,
              raise_on_error: bool = True, **kwargs) -> ResponseIterator:
        """Sends the request (or one made of ``kwargs``); its responses come
        through the returned iterator: one for most models, 0..N then a
        final one for a decoupled model. What the server refuses at once
        (an unknown model, a missing input) raises here."""
        request = inference_request if inference_request is not None \
            else InferenceRequest(model=self, **kwargs)
        responses = ResponseIterator(request.model, request, raise_on_error)
        self._ask(responses._submit_there, request._server_request())
        return responses

    def async_infer(self, inference_request: Optional[InferenceRequest] = None,
                    raise_on_error: bool = True, **kwargs) -> AsyncResponseIterator:
        """As ``infer``, the responses on an async iterator of the running
        loop, which never blocks on the server: what the server refuses at
        once (an unknown model, a missing input) raises from the first
        ``__anext__`` (Triton raises it here; what the API itself refuses,
        such as a parameter of an unsupported type, still does)."""
        request = inference_request if inference_request is not None \
            else InferenceRequest(model=self, **kwargs)
        responses = AsyncResponseIterator(request.model, request, raise_on_error)
        self._host.post(responses._submit_there, request._server_request())
        return responses

    # -- what the model is ---------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        return self._ask(self._host.server.model_metadata, self.name, self._version)

    def ready(self) -> bool:
        return self._ask(self._host.server.model_ready, self.name, self._version)

    def config(self, config_version: int = 1) -> dict[str, Any]:
        if config_version != 1:
            raise InvalidArgumentError(f"model configuration version {config_version} not "
                                       "supported, supported versions are: 1")
        return self._ask(self._host.server.model_config, self.name, self._version)

    def statistics(self) -> dict[str, Any]:
        return self._ask(self._host.server.statistics, self.name, self._version)

    def batch_properties(self) -> ModelBatchFlag:
        config = self.config()
        return ModelBatchFlag.FIRST_DIM if int(config.get("max_batch_size", 0)) > 0 \
            else ModelBatchFlag.UNKNOWN

    def transaction_properties(self) -> ModelTxnPropertyFlag:
        decoupled = self._ask(self._host.server.is_decoupled, self.name, self._version)
        return ModelTxnPropertyFlag.DECOUPLED if decoupled else ModelTxnPropertyFlag.ONE_TO_ONE

    def __repr__(self):
        return str(self)

    def __str__(self):
        return str({"name": self.name, "version": self.version, "state": self.state})
