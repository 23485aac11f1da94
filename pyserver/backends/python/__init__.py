"""Triton's Python backend: `backend: "python"` models (a model.py with
``class TritonPythonModel`` that imports ``triton_python_backend_utils``) run
unchanged, each instance in its own worker process.

backend.py                      server side: PythonBackend (start, feed, supervise workers)
stub.py                         the worker process (run as a script, imports no pyserver)
channel.py                      messages and shared memory regions, used by both sides
triton_python_backend_utils.py  the module models import as pb_utils (top level in workers)
"""

from pyserver.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
