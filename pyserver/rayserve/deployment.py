"""The Ray Serve deployment: each replica holds a started
``tritonserver.Server`` (Triton's in-process API, served by pyserver) over
a model repository, and answers

- KServe v2 over HTTP through Ray's proxy (``__call__``: the routes in
  kserve.py), so tritonclient.http works against Ray's HTTP port;
- Python callers through a ``DeploymentHandle``: ``infer``, ``ready``,
  ``models``, ``metadata``, ``model_config``, ``where``.

Imports Ray; ``pyserver.rayserve`` imports this module only when asked for
what it defines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from pyserver.rayserve.kserve import KServeRoutes, api, error_message, response_arrays

__all__ = ["PyServerDeployment", "app", "build_app"]

# Response headers that say which replica answered (and on which node).
NODE_HEADER = "x-pyserver-node-id"
REPLICA_HEADER = "x-pyserver-replica"


def _control_mode(tritonserver, mode):
    if isinstance(mode, str):
        try:
            return tritonserver.ModelControlMode[mode.upper()]
        except KeyError:
            raise ValueError(f"unknown model control mode '{mode}' (none, explicit or "
                             "poll)") from None
    return mode


def _repository(model_repository) -> str | list[str]:
    if isinstance(model_repository, (list, tuple)):
        return [str(Path(p).absolute()) for p in model_repository]
    return str(Path(model_repository).absolute())


@serve.deployment(name="pyserver")
class PyServerDeployment:
    """One replica: an in-process server over ``model_repository`` (a path,
    or a list of them, that every node of the cluster sees).

    ``model_control_mode``: "none" (every model of the repository is
    loaded), "explicit" (only ``startup_models``, and what ``load`` asks
    for) or "poll". ``server_options``: further ``tritonserver.Options``
    fields (``strict_model_config``, ``exit_timeout``, ``log_verbose``...).
    """

    def __init__(self, model_repository, model_control_mode: str = "none",
                 startup_models: Sequence[str] = (), server_options: Optional[dict] = None):
        tritonserver = api()
        self._api = tritonserver
        self._server = tritonserver.Server(
            model_repository=_repository(model_repository),
            model_control_mode=_control_mode(tritonserver, model_control_mode),
            startup_models=list(startup_models), **(server_options or {}))
        self._server.start(wait_until_ready=True)
        self._routes = KServeRoutes(self._server)
        self._where = self._placement()

    @staticmethod
    def _placement() -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        where = {"node_id": context.get_node_id(), "pid": os.getpid(),
                 "actor_id": context.get_actor_id(), "actor_name": None, "replica_id": None}
        try:
            where["actor_name"] = context.get_actor_name()
        except Exception:  # noqa: BLE001 (older Ray has no get_actor_name)
            pass
        try:
            where["replica_id"] = serve.get_replica_context().replica_id.unique_id
        except Exception:  # noqa: BLE001
            pass
        return where

    # -- KServe v2 over HTTP -------------------------------------------------------

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        root = request.scope.get("root_path") or ""
        if root and root != "/" and path.startswith(root):
            path = path[len(root):] or "/"
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        status, answer_headers, answer = await self._routes.handle(request.method, path, headers,
                                                                   body)
        out = {k: v for k, v in answer_headers if k.lower() != "content-type"}
        media_type = next((v for k, v in answer_headers if k.lower() == "content-type"), None)
        out[NODE_HEADER] = self._where["node_id"]
        out[REPLICA_HEADER] = f"{self._where['replica_id']} {self._where['pid']}"
        return Response(content=answer, status_code=status, headers=out, media_type=media_type)

    # -- the Python handle API -------------------------------------------------------

    async def infer(self, model: str, inputs: dict[str, Any], *, version: int = -1,
                    outputs: Optional[Iterable[str]] = None, parameters: Optional[dict] = None,
                    request_id: Optional[str] = None) -> dict[str, np.ndarray]:
        """One inference: ``inputs`` {name: numpy array (or list)}; gives
        {output name: numpy array} (BYTES as object arrays of bytes), only
        ``outputs`` when named. An error is the API's (InvalidArgumentError,
        NotFoundError...) with its message."""
        try:
            arrays: dict[str, np.ndarray] = {}
            async for response in self._server.model(model, version).async_infer(
                    inputs=inputs, parameters=parameters or {}, request_id=request_id):
                arrays.update(response_arrays(response))
        except self._api.TritonError as e:
            # a response's error carries the response (and through it the
            # server), which does not travel: the same class, its message only
            raise type(e)(error_message(e)) from None
        if outputs is not None:
            wanted = list(outputs)
            missing = [n for n in wanted if n not in arrays]
            if missing:
                raise self._api.InvalidArgumentError(
                    f"unexpected inference output '{missing[0]}' for model '{model}'")
            arrays = {n: arrays[n] for n in wanted}
        return arrays

    def ready(self) -> bool:
        return self._server.ready()

    def live(self) -> bool:
        return self._server.live()

    def metadata(self) -> dict:
        return self._server.metadata()

    def models(self) -> dict[str, dict]:
        """{name: {"version": ..., "state": ...}} of the repository's models."""
        return {name: {"version": version, "state": model.state, "reason": model.reason}
                for (name, version), model in self._server.models().items()}

    def model_config(self, model: str, version: int = -1) -> dict:
        return self._server.model(model, version).config()

    def model_metadata(self, model: str, version: int = -1) -> dict:
        return self._server.model(model, version).metadata()

    def load(self, model: str) -> None:
        """Loads (or reloads) a model on this replica (explicit mode)."""
        self._server.load(model)

    def where(self) -> dict[str, Any]:
        """Which replica this is: node id, pid, Ray actor id and name, Serve
        replica id."""
        return dict(self._where)

    # -- what Ray Serve calls ------------------------------------------------------------

    def check_health(self) -> None:
        """Ray Serve's periodic check: a server no longer live gets the
        replica replaced."""
        if not self._server.live():
            raise RuntimeError("the replica's in-process server is not live")

    def __del__(self):
        server = getattr(self, "_server", None)
        self._server = None
        if server is not None:
            try:
                server.stop()
            except Exception:  # noqa: BLE001 (stopping at exit; nothing to report to)
                pass


def app(model_repository, *, model_control_mode: str = "none",
        startup_models: Sequence[str] = (), server_options: Optional[dict] = None,
        name: str = "pyserver", num_replicas: Optional[int | str] = None,
        autoscaling_config: Optional[dict] = None, ray_actor_options: Optional[dict] = None,
        max_ongoing_requests: Optional[int] = None, **deployment_options):
    """A bound application for ``serve.run``: PyServerDeployment over
    ``model_repository`` with the given Ray Serve options (``num_replicas``
    or ``autoscaling_config``, ``ray_actor_options`` such as num_cpus,
    ``max_ongoing_requests``, and any other ``serve.deployment`` option:
    ``max_replicas_per_node``, ``health_check_period_s``...)."""
    options = dict(deployment_options, name=name)
    if num_replicas is not None:
        options["num_replicas"] = num_replicas
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    if ray_actor_options is not None:
        options["ray_actor_options"] = ray_actor_options
    if max_ongoing_requests is not None:
        options["max_ongoing_requests"] = max_ongoing_requests
    return PyServerDeployment.options(**options).bind(
        _repository(model_repository), model_control_mode=model_control_mode,
        startup_models=list(startup_models), server_options=dict(server_options or {}))


def build_app(args: dict):
    """The application builder for Ray's CLI, which hands over its
    ``key=value`` arguments as strings:

        serve run pyserver.rayserve:build_app model_repository=models/ \\
            min_replicas=1 max_replicas=4 target_ongoing_requests=2 num_cpus=1

    ``model_repository`` (required; several separated by commas),
    ``model_control_mode``, ``startup_models`` (comma-separated),
    ``num_replicas`` or ``min_replicas`` / ``max_replicas`` /
    ``target_ongoing_requests`` (autoscaling), ``num_cpus``,
    ``max_ongoing_requests``, ``name``."""
    args = dict(args)
    known = {"model_repository", "model_control_mode", "startup_models", "num_replicas",
             "min_replicas", "max_replicas", "target_ongoing_requests", "num_cpus",
             "max_ongoing_requests", "name"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"unknown argument(s) {unknown}; known: {sorted(known)}")
    if "model_repository" not in args:
        raise ValueError("model_repository=PATH is required")
    repositories = [p for p in str(args["model_repository"]).split(",") if p]
    options: dict[str, Any] = {}
    if "num_replicas" in args:
        value = str(args["num_replicas"])
        options["num_replicas"] = value if value == "auto" else int(value)
    autoscaling = {key: float(args[key]) if key == "target_ongoing_requests" else int(args[key])
                   for key in ("min_replicas", "max_replicas", "target_ongoing_requests")
                   if key in args}
    if autoscaling:
        options["autoscaling_config"] = autoscaling
    if "num_cpus" in args:
        options["ray_actor_options"] = {"num_cpus": float(args["num_cpus"])}
    if "max_ongoing_requests" in args:
        options["max_ongoing_requests"] = int(args["max_ongoing_requests"])
    startup = [m for m in str(args.get("startup_models", "")).split(",") if m]
    return app(repositories if len(repositories) > 1 else repositories[0],
               model_control_mode=str(args.get("model_control_mode", "none")),
               startup_models=startup, name=str(args.get("name", "pyserver")), **options)
