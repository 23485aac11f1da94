# Triton's in-process server API for C and C++ programs: the hooks
# csrc/src/triton_server_control.cc calls for TRITONSERVER_ServerNew, the
# server's queries and its stop. This module only converts: the options
# object into a dict for the factory pyserver/inprocess/c_api.py registers,
# and each later call on a TRITONSERVER_Server* into a call on the
# controller the factory made for it, which the server's ServerHandle (the
# pointer's owner) holds.
# cython: language_level=3
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.map cimport map as cmap
from libcpp.pair cimport pair
from libcpp.string cimport string
from libcpp.vector cimport vector

from pyserver.engine.triton_bls cimport (ServerHandle, TRITONSERVER_Error, TRITONSERVER_Server,
                                         server_error)
from pyserver.engine.triton_parameters cimport Parameter, parameter_value

from pyserver.kernel.errors import Code, ServerError


cdef extern from "pyserver/triton/server_control.h" nogil:
    cdef cppclass RateLimiterResource "pyserver::triton::RateLimiterResource":
        string name
        size_t count
        int device

    cdef cppclass ModelLoadDeviceLimit "pyserver::triton::ModelLoadDeviceLimit":
        int kind
        int device
        double fraction

    cdef cppclass TRITONSERVER_ServerOptions:
        string server_id
        vector[string] model_repositories
        int model_control_mode
        vector[string] startup_models
        cbool strict_model_config
        string model_config_name
        int rate_limit_mode
        vector[RateLimiterResource] rate_limiter_resources
        uint64_t pinned_memory_pool_byte_size
        cmap[int, uint64_t] cuda_memory_pool_byte_size
        cmap[int, size_t] cuda_virtual_address_size
        uint64_t response_cache_byte_size
        cmap[string, string] cache_config
        string cache_directory
        double min_supported_compute_capability
        cbool exit_on_error
        cbool strict_readiness
        unsigned int exit_timeout_s
        unsigned int buffer_manager_thread_count
        unsigned int model_load_thread_count
        unsigned int model_load_retry_count
        cbool model_namespacing
        cbool enable_peer_access
        vector[ModelLoadDeviceLimit] model_load_device_limits
        string log_file
        cbool log_info
        cbool log_warn
        cbool log_error
        int log_format
        int log_verbose
        cbool metrics
        cbool gpu_metrics
        cbool cpu_metrics
        uint64_t metrics_interval_ms
        string backend_directory
        string repoagent_directory
        cmap[string, vector[pair[string, string]]] backend_config
        cmap[string, vector[pair[string, string]]] host_policies
        cmap[string, vector[pair[string, string]]] metrics_config

    ctypedef enum ServerQuery "pyserver::triton::ServerQuery":
        kMetadata "pyserver::triton::ServerQuery::kMetadata"
        kModelMetadata "pyserver::triton::ServerQuery::kModelMetadata"
        kModelConfig "pyserver::triton::ServerQuery::kModelConfig"
        kModelStatistics "pyserver::triton::ServerQuery::kModelStatistics"
        kModelIndex "pyserver::triton::ServerQuery::kModelIndex"
        kModelBatchProperties "pyserver::triton::ServerQuery::kModelBatchProperties"
        kMetrics "pyserver::triton::ServerQuery::kMetrics"

    ctypedef TRITONSERVER_Error* (*CreateFn)(const TRITONSERVER_ServerOptions*,
                                             TRITONSERVER_Server**)
    ctypedef TRITONSERVER_Error* (*StopFn)(TRITONSERVER_Server*, cbool)
    ctypedef TRITONSERVER_Error* (*StateFn)(TRITONSERVER_Server*, cbool*, cbool*)
    ctypedef TRITONSERVER_Error* (*QueryFn)(TRITONSERVER_Server*, ServerQuery, const char*,
                                            int64_t, uint32_t, string*)
    ctypedef TRITONSERVER_Error* (*PollFn)(TRITONSERVER_Server*)
    ctypedef TRITONSERVER_Error* (*ExitTimeoutFn)(TRITONSERVER_Server*, unsigned int)
    ctypedef TRITONSERVER_Error* (*RepositoryFn)(TRITONSERVER_Server*, const char*, cbool,
                                                 const vector[const Parameter*]&)

    cdef cppclass ServerControlHooks "pyserver::triton::ServerControlHooks":
        CreateFn create
        StopFn stop
        StateFn state
        QueryFn query
        PollFn poll
        ExitTimeoutFn set_exit_timeout
        RepositoryFn repository

    void SetServerControlHooks "pyserver::triton::SetServerControlHooks"(
        const ServerControlHooks& hooks)


_QUERY_NAMES = {kMetadata: "metadata", kModelMetadata: "model_metadata",
                kModelConfig: "model_config", kModelStatistics: "model_statistics",
                kModelIndex: "model_index", kModelBatchProperties: "model_batch_properties",
                kMetrics: "metrics"}

_factory = None


def set_factory(factory):
    """``factory(options: dict) -> (ServerHandle, controller)`` starts a
    server for TRITONSERVER_ServerNew (raising ServerError on failure). The
    controller answers ``stop()`` (a second does nothing), ``state() -> (live, ready)``,
    ``poll()``, ``set_exit_timeout(seconds)``, ``register_repository(path,
    name_mapping)``, ``unregister_repository(path)`` and ``query(name,
    model_name, model_version, flags) -> str`` where name is metadata,
    model_metadata, model_config, model_statistics, model_index (each a
    JSON document), model_batch_properties (a TRITONSERVER_BATCH_* flag in
    decimal) or metrics (Prometheus text)."""
    global _factory
    _factory = factory


cdef str _text(const string& s):
    return s.decode("utf-8", "replace")


cdef dict _settings(cmap[string, vector[pair[string, string]]]& groups):
    out = {}
    for group in groups:
        out[_text(group.first)] = {_text(kv.first): _text(kv.second) for kv in group.second}
    return out


cdef dict _options(TRITONSERVER_ServerOptions* o):
    # (not const: Cython iterates containers with non-const iterators)
    return {
        "server_id": _text(o.server_id),
        "model_repository": [_text(p) for p in o.model_repositories],
        "model_control_mode": o.model_control_mode,
        "startup_models": [_text(m) for m in o.startup_models],
        "strict_model_config": o.strict_model_config,
        "model_config_name": _text(o.model_config_name),
        "rate_limiter_mode": o.rate_limit_mode,
        "rate_limiter_resources": [(_text(r.name), r.count, r.device)
                                   for r in o.rate_limiter_resources],
        "pinned_memory_pool_size": o.pinned_memory_pool_byte_size,
        "cuda_memory_pool_sizes": {kv.first: kv.second for kv in o.cuda_memory_pool_byte_size},
        "cuda_virtual_address_size": {kv.first: kv.second
                                      for kv in o.cuda_virtual_address_size},
        "response_cache_byte_size": o.response_cache_byte_size,
        "cache_config": {_text(kv.first): _text(kv.second) for kv in o.cache_config},
        "cache_directory": _text(o.cache_directory),
        "min_supported_compute_capability": o.min_supported_compute_capability,
        "exit_on_error": o.exit_on_error,
        "strict_readiness": o.strict_readiness,
        "exit_timeout": o.exit_timeout_s,
        "buffer_manager_thread_count": o.buffer_manager_thread_count,
        "model_load_thread_count": o.model_load_thread_count,
        "model_load_retry_count": o.model_load_retry_count,
        "model_namespacing": o.model_namespacing,
        "enable_peer_access": o.enable_peer_access,
        "model_load_device_limits": [(d.kind, d.device, d.fraction)
                                     for d in o.model_load_device_limits],
        "log_file": _text(o.log_file),
        "log_info": o.log_info,
        "log_warn": o.log_warn,
        "log_error": o.log_error,
        "log_format": o.log_format,
        "log_verbose": o.log_verbose,
        "metrics": o.metrics,
        "gpu_metrics": o.gpu_metrics,
        "cpu_metrics": o.cpu_metrics,
        "metrics_interval": o.metrics_interval_ms,
        "backend_directory": _text(o.backend_directory),
        "repo_agent_directory": _text(o.repoagent_directory),
        "backend_configuration": _settings(o.backend_config),
        "host_policies": _settings(o.host_policies),
        "metrics_configuration": _settings(o.metrics_config),
    }


cdef object _controller(TRITONSERVER_Server* server):
    # owner is the server's ServerHandle (triton_bls.pxd), which the
    # program's pointer keeps alive from ServerNew to ServerDelete.
    control = None if server.owner == NULL else (<ServerHandle>server.owner).control
    if control is None:
        raise ServerError(Code.INVALID_ARG, "the server was not made by TRITONSERVER_ServerNew")
    return control


cdef TRITONSERVER_Error* _create(const TRITONSERVER_ServerOptions* options,
                                 TRITONSERVER_Server** server) noexcept with gil:
    cdef ServerHandle handle
    try:
        if _factory is None:
            raise ServerError(Code.UNAVAILABLE, "pyserver's in-process C API is not set up")
        handle, controller = _factory(_options(<TRITONSERVER_ServerOptions*>options))
        handle.control = controller
        Py_INCREF(handle)  # the program's reference, until ServerDelete
        server[0] = &handle.server
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _stop(TRITONSERVER_Server* server, cbool forget) noexcept with gil:
    cdef ServerHandle handle
    try:
        controller = _controller(server)
        if not forget:
            controller.stop()
            return NULL
        # Let go first: a failed stop still ends the program's server.
        handle = <ServerHandle>server.owner
        handle.control = None
        Py_DECREF(handle)
        controller.stop()
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _state(TRITONSERVER_Server* server, cbool* live,
                                cbool* ready) noexcept with gil:
    try:
        is_live, is_ready = _controller(server).state()
        live[0] = is_live
        ready[0] = is_ready
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _query(TRITONSERVER_Server* server, ServerQuery query,
                                const char* model_name, int64_t model_version, uint32_t flags,
                                string* json) noexcept with gil:
    try:
        text = _controller(server).query(_QUERY_NAMES[query],
                                         model_name.decode("utf-8", "replace"),
                                         model_version, flags)
        json[0] = text.encode("utf-8")
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _poll(TRITONSERVER_Server* server) noexcept with gil:
    try:
        _controller(server).poll()
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _set_exit_timeout(TRITONSERVER_Server* server,
                                           unsigned int timeout_s) noexcept with gil:
    try:
        _controller(server).set_exit_timeout(timeout_s)
        return NULL
    except BaseException as err:
        return server_error(err)


cdef TRITONSERVER_Error* _repository(TRITONSERVER_Server* server, const char* path, cbool add,
                                     const vector[const Parameter*]& mapping) noexcept with gil:
    cdef size_t i
    try:
        controller = _controller(server)
        text = path.decode("utf-8", "replace")
        if add:
            controller.register_repository(
                text, {mapping[i].name.decode("utf-8", "replace"): parameter_value(mapping[i][0])
                       for i in range(mapping.size())})
        else:
            controller.unregister_repository(text)
        return NULL
    except BaseException as err:
        return server_error(err)


cdef ServerControlHooks _hooks
_hooks.create = _create
_hooks.stop = _stop
_hooks.state = _state
_hooks.query = _query
_hooks.poll = _poll
_hooks.set_exit_timeout = _set_exit_timeout
_hooks.repository = _repository
SetServerControlHooks(_hooks)
