"""Triton's Python backend: `backend: "python"` models (a model.py with
``class TritonPythonModel`` that imports ``triton_python_backend_utils``) run
unchanged, each instance in its own worker process (or, where the config asks,
on a thread of the server process).

backend.py                      server side: PythonBackend (start, feed, supervise workers)
in_process.py                   ThreadPythonBackend: a model in the server process, on its
                                instance threads (pyserver_execution_mode "thread")
stub.py                         the worker process (run as a script)
channel.py                      messages and shared memory regions, used by both sides
triton_python_backend_utils.py  the module models import as pb_utils (top level in workers)
"""

from pyserver.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]
