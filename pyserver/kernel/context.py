"""What the server hands down to each model version, instance and backend:
its services, passed in rather than looked up (there is no registry of
running servers to search).

The fields are the server's own objects; a layer holds the context and
reads what it needs from it, so adding a service never changes a signature
between the server and a backend.
"""

from __future__ import annotations


class ServerContext:
    """The services of one server.

    loop            the asyncio event loop the server runs on (None until it starts)
    completions     the engine's CompletionQueue the loop drains (batches done on threads)
    answer          ``answer(batch_or_request, code, message)``: answers a batch the event
                    loop finished itself, without the queue (Server.resolve_now); None
                    when no server reads ``completions`` (tools, tests)
    answer_late     ``answer_late(pending request, response or exception)``, from any thread:
                    answers a request its batch left to its backend (ANSWERED_LATER,
                    backends/base.py); None without a server
    tracer          request tracing (pyserver.runtime.tracing.Tracer), or None
    rate_limiter    the engine's RateLimiter under --rate-limit=execution_count, or None
    host_memory     the pinned host memory pool (HostMemory), or None: a backend makes its own
    device_memory   the per-GPU device memory pools (DeviceMemory), or None: likewise
    custom_metrics  the store of models' own metrics (pb_utils.MetricFamily), or None
    host_policies   --host-policy's {policy name: {setting: value}} (runtime/host_policy.py)
    requests        what a model may ask of the server while it runs (BLS, model control):
                    ``submit``, ``submit_stream``, ``cancel_stream``, ``is_decoupled``,
                    ``model_ready``, ``load_model``, ``unload_model``, ``inflight`` (requests
                    accepted and not yet answered); None without a server
    """

    __slots__ = ("loop", "completions", "answer", "answer_late", "tracer", "rate_limiter", "host_memory",
                 "device_memory", "custom_metrics", "requests", "host_policies")

    def __init__(self, completions, *, loop=None, answer=None, answer_late=None, tracer=None,
                 rate_limiter=None, host_memory=None, device_memory=None, custom_metrics=None, requests=None,
                 host_policies=None):
        self.completions = completions
        self.loop = loop
        self.answer = answer
        self.answer_late = answer_late
        self.tracer = tracer
        self.rate_limiter = rate_limiter
        self.host_memory = host_memory
        self.device_memory = device_memory
        self.custom_metrics = custom_metrics
        self.requests = requests
        self.host_policies = host_policies or {}
