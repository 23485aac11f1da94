"""Triton's in-process C API for C and C++ programs (tritonserver.h, linked
against pyserver's libtritonserver.so): what TRITONSERVER_ServerNew starts
and what the server's queries and its stop reach.

csrc/src/triton_server_control.cc takes the program's calls;
engine/triton_server.pyx converts them and calls the factory registered
here on import (a program with no Python of its own gets an interpreter that
imports this module: csrc/src/triton_python_boot.cc). Each server is the
in-process API's ``Server`` on its own loop thread, as Triton's Python
binding has it; its TRITONSERVER_Server* is the one C backends of that server
are given, so TRITONSERVER_ServerInferAsync, the model control calls and
TRITONSERVER_ServerModelIsReady go where a backend's BLS goes
(pyserver/backends/triton_bls.py).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from pyserver.backends.triton_bls import server_handle, version_string
from pyserver.engine import triton_server
from pyserver.inprocess.enums import InstanceGroupKind, LogFormat, ModelControlMode, RateLimitMode
from pyserver.inprocess.errors import server_error
from pyserver.inprocess.server import ModelLoadDeviceLimit, Options, RateLimiterResource, Server
from pyserver.kernel.errors import Code, ServerError, not_running

__all__ = ["Controller", "create"]

_INDEX_FLAG_READY = 1  # TRITONSERVER_INDEX_FLAG_READY
_BATCH_UNKNOWN, _BATCH_FIRST_DIM = 1, 2  # TRITONSERVER_BATCH_*


@dataclass(slots=True)
class _CApiOptions(Options):
    """Options with what only the C API sets: the name of the config file
    to load in place of config.pbtxt (the command line's
    --model-config-name)."""

    model_config_name: str = ""

    def _server_arguments(self) -> dict:
        arguments = Options._server_arguments(self)
        arguments["model_config_name"] = self.model_config_name
        return arguments


def _cache_config(given: dict) -> dict:
    """TRITONSERVER_ServerOptionsSetCacheConfig's JSON per cache, with the
    older SetResponseCacheByteSize as the local cache's size."""
    caches = {}
    for name, text in given["cache_config"].items():
        try:
            caches[name] = json.loads(text)
        except ValueError as err:
            raise ServerError(Code.INVALID_ARG,
                              f"failed to parse the '{name}' cache config: {err}") from None
    if given["response_cache_byte_size"] and "local" not in caches:
        caches["local"] = {"size": given["response_cache_byte_size"]}
    return caches


def _options(given: dict) -> Options:
    """The in-process API's Options for the C API's (engine/triton_server.pyx
    names them as Options does): the enums and records as the API's, the
    caches as its cache config; what pyserver has no use for (metrics
    settings, host policies, the repository agents' folder) is taken and
    left alone, and what Options has no field for (CUDA virtual address
    sizes) is dropped."""
    options = dict(given)
    del options["response_cache_byte_size"], options["cuda_virtual_address_size"]
    options.update(
        model_control_mode=ModelControlMode(given["model_control_mode"]),
        rate_limiter_mode=RateLimitMode(given["rate_limiter_mode"]),
        rate_limiter_resources=[RateLimiterResource(*r) for r in given["rate_limiter_resources"]],
        cache_config=_cache_config(given),
        model_load_device_limits=[ModelLoadDeviceLimit(InstanceGroupKind(kind), device, fraction)
                                  for kind, device, fraction
                                  in given["model_load_device_limits"]],
        log_file=given["log_file"] or None,
        log_format=LogFormat(given["log_format"]),
    )
    return _CApiOptions(**options)


class Controller:
    """One server a program made: its state, its queries (answered as JSON
    text, the documents Triton's C API gives) and its stop."""

    def __init__(self, server: Server):
        self._server = server
        self._host = server._host
        self._lock = threading.Lock()  # a stop may come from any of the program's threads
        self._stopped = False

    def _api(self, fn, *args):
        """``fn(*args)``, a method of the in-process API's Server, its
        error as a ServerError (Triton's code)."""
        try:
            return fn(*args)
        except Exception as err:
            raise server_error(err) from None

    def _core(self):
        if self._stopped:
            raise not_running()
        return self._host.server

    def state(self) -> tuple[bool, bool]:
        if self._stopped:
            return False, False
        core = self._host.server
        return self._host.run(lambda: (core.is_live(), core.is_ready()))

    def query(self, name: str, model_name: str, model_version: int, flags: int) -> str:
        core = self._core()
        version = version_string(model_version)
        if name == "metadata":
            doc = self._host.run(core.metadata)
        elif name == "model_metadata":
            doc = self._host.run(core.model_metadata, model_name, version)
        elif name == "model_config":
            doc = self._host.run(core.model_config, model_name, version)
        elif name == "model_statistics":
            doc = self._host.run(core.statistics, model_name, version)
        elif name == "model_index":
            doc = self._host.run(core.repository_index, bool(flags & _INDEX_FLAG_READY))
        elif name == "model_batch_properties":
            config = self._host.run(core.model_config, model_name, version)
            return str(_BATCH_FIRST_DIM if config.get("max_batch_size", 0) > 0
                       else _BATCH_UNKNOWN)
        elif name == "metrics":
            return self._api(self._server.metrics)
        else:
            raise ServerError(Code.INTERNAL, f"unknown server query {name!r}")
        return json.dumps(doc, separators=(",", ":"))

    def poll(self) -> None:
        core = self._core()
        self._host.call(core.poll_repository())

    def set_exit_timeout(self, seconds: int) -> None:
        """TRITONSERVER_ServerSetExitTimeout: the stop's wait from now on."""
        self._core()
        self._server.options.exit_timeout = int(seconds)

    def register_repository(self, path: str, name_mapping: dict) -> None:
        self._core()
        self._api(self._server.register_model_repository, path, name_mapping or None)

    def unregister_repository(self, path: str) -> None:
        self._core()
        self._api(self._server.unregister_model_repository, path)

    def stop(self) -> None:
        """Stops the server (requests in flight finish within its exit
        timeout); a second stop does nothing, as deleting a stopped server
        must not fail."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            self._server.stop()
        except Exception as err:
            raise server_error(err) from None


def create(given: dict):
    """TRITONSERVER_ServerNew: starts a server and loads its models (its
    error, with Triton's code, when that fails); returns its ServerHandle and
    Controller."""
    try:
        server = Server(_options(given)).start()
    except Exception as err:
        raise server_error(err) from None
    core = server._host.server
    return server_handle(core.context), Controller(server)


triton_server.set_factory(create)
