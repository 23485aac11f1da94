"""pyserver as a Ray Serve deployment (``pip install "pyserver[ray]"``):
each replica holds an in-process server on Triton's Python API
(``tritonserver``) and answers KServe v2 over HTTP through Ray's proxy and
Python callers through a DeploymentHandle.

    from ray import serve
    import pyserver.rayserve

    handle = serve.run(pyserver.rayserve.app("models/", autoscaling_config={
        "min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2}))
    handle.infer.remote("add_sub", {"INPUT0": a, "INPUT1": b}).result()

or from Ray's CLI: ``serve run pyserver.rayserve:build_app model_repository=models/``.

Modules: deployment (PyServerDeployment, app, build_app; imports Ray), kserve (the
KServe v2 routes over a ``tritonserver.Server``; knows nothing of Ray).
Ray is imported on first use of what deployment defines, so importing this
package needs no Ray.
"""

from __future__ import annotations

__all__ = ["PyServerDeployment", "app", "build_app"]


def __getattr__(name: str):
    if name in __all__:
        try:
            from pyserver.rayserve import deployment
        except ImportError as e:
            raise ImportError(f"pyserver.rayserve.{name} needs Ray Serve: pip install "
                              f"'pyserver[ray]' ({e})") from e
        return getattr(deployment, name)
    raise AttributeError(f"module 'pyserver.rayserve' has no attribute '{name}'")
