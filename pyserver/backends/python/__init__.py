"""Triton's Python backend: `backend: "python"` models (a model.py with
``class TritonPythonModel`` that imports ``triton_python_backend_utils``) run
unchanged, each instance in its own worker process (or, where the config asks,
on a thread of the server process).

instance.py                     ServedInstance: what both kinds of instance share
backend.py                      ProcessPythonBackend: start, feed, supervise workers
loop_driver.py                  the event loop's driver of worker instances (their IPC)
in_process.py                   ThreadPythonBackend: a model in the server process, on its
                                instance threads (pyserver_execution_mode "thread")
services.py                     what a model asks of the server (BLS, metrics, model control)
stub.py                         the worker process (run as a script)
channel.py                      messages and shared memory regions, used by both sides
runner.py                       the worker's model runner (requests in, responses out)
triton_python_backend_utils.py  the module models import as pb_utils: Triton's API only
"""

import functools

from pyserver.backends.python.backend import ProcessPythonBackend
from pyserver.backends.python.in_process import ThreadPythonBackend, execution_mode


class PythonBackend:
    """The registry's entry for ``backend: "python"``: which class runs a
    config's instances (``instance_class``), and the config completion both
    kinds share."""

    auto_complete_config = staticmethod(ProcessPythonBackend.auto_complete_config)

    @staticmethod
    def instance_class(config):
        if execution_mode(config) == "thread":
            return ThreadPythonBackend
        return ProcessPythonBackend


@functools.cache
def python_based_backend(runtime_model: str):
    """The backend of Triton's Python-based backends: ``runtime_model``
    (BACKEND_DIR/NAME/model.py) runs every model whose config names NAME,
    with the Python backend, each model's own folder its model_repository.
    One class per backend file."""
    attributes = {"runtime_model": runtime_model}
    process = type("ProcessPythonBasedBackend", (ProcessPythonBackend,), attributes)
    thread = type("ThreadPythonBasedBackend", (ThreadPythonBackend,), attributes)

    class PythonBasedBackend:
        # the model's version folders need no model file of their own
        model_file_required = False

        @staticmethod
        def auto_complete_config(config, model_path: str, default_max_batch_size: int) -> None:
            ProcessPythonBackend.auto_complete_config(config, model_path, default_max_batch_size,
                                                      runtime_model=runtime_model)

        @staticmethod
        def instance_class(config):
            return thread if execution_mode(config) == "thread" else process

    return PythonBasedBackend


__all__ = ["ProcessPythonBackend", "PythonBackend", "ThreadPythonBackend", "python_based_backend"]
