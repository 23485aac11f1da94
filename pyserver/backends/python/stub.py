"""The worker process of one Python-model instance (Triton's "stub").

Started by pyserver.backends.python.backend as
``python stub.py <mode> <main_fd> <ctrl_fd> <in_fd> <out_fd> <crash_fd> <region_size>``
with the descriptors inherited; it imports nothing from pyserver, so it
starts as fast as the interpreter and numpy allow.

mode ``instance``: imports the model, builds ``TritonPythonModel``, calls
``initialize(args)``, answers ``ready``, then serves ``exec`` messages (one
batch of requests at a time, on the main thread) until ``finalize``.
mode ``autocomplete``: runs the model's ``auto_complete_config`` staticmethod
on the config it is sent, answers the completed config, and exits.

Two sockets: ``main`` carries the request/response exchange the server's
instance thread drives (plus the questions a model asks while it executes,
such as ``is_cancelled``); ``ctrl`` carries what may happen at any time
(``is_ready`` checks, log records). Tensor data travels through the two
shared regions described in channel.py. Fatal signals (SIGSEGV ...) write a
Python traceback to the crash descriptor, which the server reads to explain
the crash.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# Run as a script, this folder is sys.path[0]: take it out so its files do not
# shadow a model's own modules; it is appended last below, for
# `import triton_python_backend_utils`.
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _HERE:
    del sys.path[0]

import faulthandler  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402


def _load_channel_module():
    name = "_pyserver_python_channel"
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, "channel.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


channel = _load_channel_module()
_OUR_FILES = {os.path.join(_HERE, "stub.py"), os.path.join(_HERE, "channel.py"),
              os.path.join(_HERE, "triton_python_backend_utils.py")}


def describe(err: BaseException) -> str:
    """An exception as Triton's stub reports it: "Type: message", then the
    model's frames, innermost first."""
    text = f"{type(err).__name__}: {err}"
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if os.path.abspath(f.filename) not in _OUR_FILES]
    if frames:
        text += "\n\nAt:\n" + "".join(f"  {f.filename}({f.lineno}): {f.name}\n"
                                      for f in reversed(frames))
    return text


def _awaitable(obj) -> bool:
    # What `async def` methods return; asyncio itself is imported only by
    # models that use it (it costs ~60 ms of worker start).
    return hasattr(obj, "__await__")


async def _await(awaitable):
    return await awaitable


class _AsyncRunner:
    """The instance's asyncio loop, on a daemon thread as in Triton, so
    tasks a model starts keep running between executes."""

    def __init__(self):
        self.loop = None
        self._lock = threading.Lock()

    def run(self, awaitable, timeout=None):
        import asyncio

        with self._lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="model-asyncio",
                                 daemon=True).start()
                asyncio.set_event_loop(loop)
                self.loop = loop
        if not asyncio.iscoroutine(awaitable):
            awaitable = _await(awaitable)
        return asyncio.run_coroutine_threadsafe(awaitable, self.loop).result(timeout)


class _Runtime:
    """What pb_utils reaches the server through (pb_utils._runtime)."""

    def __init__(self, main, ctrl, model_dir):
        self.main = main
        self.ctrl = ctrl
        self.model_dir = model_dir
        # Questions to the server go over the main channel, which only works
        # while the server waits for this batch: `executing` says so.
        self.lock = threading.Lock()
        self.executing = False

    def is_cancelled(self, index):
        with self.lock:
            if not self.executing:
                return False  # its batch is answered: nobody waits for it
            self.main.send(("query", "cancelled", index))
            reply = self.main.recv()
        return bool(reply[1])

    def log(self, level, message, filename, line):
        try:
            self.ctrl.send(("log", level, message, filename, line))
        except OSError:
            sys.stderr.write(f"{filename}:{line}] {message}\n")


class Worker:
    def __init__(self, mode, main, ctrl, regions, crash_fd):
        self.mode = mode
        self.main = main
        self.ctrl = ctrl
        self.inp, self.out = regions
        self.crash_fd = crash_fd
        self.runner = _AsyncRunner()
        self.model = None
        self.pb = None
        self.instance_name = ""

    # -- start ---------------------------------------------------------------

    def import_model(self, info):
        model_path = info["model_path"]
        if not model_path.endswith(".py"):
            raise ImportError(f"Model name must end with '.py'. Model name is \"{model_path}\".")
        version_dir = os.path.dirname(model_path)
        model_dir = os.path.dirname(version_dir)
        # As Triton's stub: the version folder and the model folder, then the
        # backend folder; the model is imported as "<version>.<file>".
        sys.path.append(version_dir)
        sys.path.append(model_dir)
        sys.path.append(_HERE)
        self.pb = importlib.import_module("triton_python_backend_utils")
        self.pb._runtime = _Runtime(self.main, self.ctrl, version_dir)
        stem = os.path.basename(model_path)[:-3]
        module = importlib.import_module(f"{os.path.basename(version_dir)}.{stem}")
        return module.TritonPythonModel

    def start(self, info):
        self.instance_name = info.get("instance_name", "")
        cls = self.import_model(info)
        if self.mode == "autocomplete":
            pb = self.pb
            config = pb.ModelConfig(info["config_json"])
            if hasattr(cls, "auto_complete_config"):
                config = cls.auto_complete_config(config)
            if not isinstance(config, pb.ModelConfig):
                raise pb.TritonModelException(
                    f"auto_complete_config function in model '{info['model_name']}' must return "
                    "a valid pb.ModelConfig object.")
            return ("config", json.dumps(config.as_dict()))
        self.model = cls()
        init = getattr(self.model, "initialize", None)
        if init is not None:
            result = init(dict(info["args"]))
            if _awaitable(result):
                self.runner.run(result)
        return ("ready", hasattr(self.model, "is_ready"), os.getpid())

    # -- serving ----------------------------------------------------------------

    def serve(self):
        main = self.main
        while True:
            try:
                msg = main.recv()
            except EOFError:
                return  # the server is gone
            kind = msg[0]
            if kind == "exec":
                main.send(self.execute(msg))
            elif kind == "finalize":
                main.send(("finalized", self.finalize()))
                return

    def _control_loop(self):
        while True:
            try:
                msg = self.ctrl.recv()
            except EOFError:
                # The server process is gone (its end closes when it exits,
                # however it exits): nothing left to serve.
                os._exit(1)
            if msg[0] == "is_ready":
                reply = self._is_ready() if self.model is not None else (False, "not initialized")
                self.ctrl.send(("is_ready", msg[1]) + reply)

    def _is_ready(self):
        try:
            result = self.model.is_ready()
            if _awaitable(result):
                result = self.runner.run(result, timeout=5.0)
            if not isinstance(result, (bool, np.bool_)):
                return (False, "is_ready() must return a boolean, got "
                               f"{type(result).__name__}")
            return (bool(result), None)
        except Exception as err:
            return (False, describe(err))

    def finalize(self):
        fin = getattr(self.model, "finalize", None)
        if fin is None:
            return None
        try:
            result = fin()
            if _awaitable(result):
                self.runner.run(result)
        except Exception as err:
            return describe(err)
        return None

    def execute(self, msg):
        pb = self.pb
        Tensor, Request = pb.Tensor, pb.InferenceRequest
        _, in_size, items, model_name, model_version = msg
        self.inp.follow(in_size)
        mm = self.inp.mm
        requests = []
        numpy_of = _NUMPY_OF
        for index, (rid, corr, flags, timeout, params, wanted, inputs) in enumerate(items):
            tensors = []
            for name, code, shape, offset, count, data in inputs:
                if data is None:
                    data = np.frombuffer(mm, numpy_of[code], count, offset).reshape(shape)
                tensors.append(Tensor._wrap(name, data, code))
            requests.append(Request._incoming(index, rid, corr, flags, timeout, params, wanted,
                                              tensors, model_name, model_version))
        runtime = self.pb._runtime
        with runtime.lock:
            runtime.executing = True
        try:
            result = self.model.execute(requests)
            if type(result) is not list and _awaitable(result):
                result = self.runner.run(result)
            self._check(result, len(requests))
            return ("result",) + self._encode(result, requests)
        except Exception as err:
            return ("fail", f"Failed to process the request(s) for model '{self.instance_name}', "
                            f"message: {describe(err) if not isinstance(err, _Reported) else err}")
        finally:
            with runtime.lock:
                runtime.executing = False

    def _check(self, responses, count):
        Response = self.pb.InferenceResponse
        if type(responses) is not list:
            raise _Reported(f"Expected a list in the execute return, found type "
                            f"'{type(responses)}'.")
        if len(responses) != count:
            raise _Reported(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{count}, and "
                f"InferenceResponse(s) size is:{len(responses)}\n")
        for r in responses:
            if r is not None and not isinstance(r, Response):
                raise _Reported("Expected an 'InferenceResponse' object in the execute function "
                                f"return list, found type '{type(r)}'.")

    def _encode(self, responses, requests):
        region = self.out
        offset = 0
        encoded = []
        bytes_code = _BYTES
        for response, request in zip(responses, requests):
            if response is None:
                encoded.append(("err", "INTERNAL",
                                "Expected an 'InferenceResponse' object in the execute function "
                                "return list, found type '<class 'NoneType'>'."))
                continue
            error = response._error
            if error is not None:
                encoded.append(("err", error.code().name, error.message()))
                continue
            wanted = request._requested_output_names
            outputs = []
            for t in response._output_tensors:
                name = t._name
                if name not in wanted:
                    continue  # Triton prunes outputs the request did not ask for
                array = t._array
                if t._dtype == bytes_code:
                    items = self.pb._bytes_items(array)
                    data = np.empty(len(items), dtype=np.object_)
                    data[:] = items
                    outputs.append((name, bytes_code, array.shape, -1, 0, data.reshape(array.shape)))
                    continue
                if not array.flags.c_contiguous:
                    array = np.ascontiguousarray(array)
                size = array.nbytes
                start = (offset + 63) & ~63
                if size:
                    region.ensure(start + size)
                    region.mm[start:start + size] = array.reshape(-1).view(np.uint8)
                    offset = start + size
                outputs.append((name, t._dtype, array.shape, start, size, None))
            encoded.append(("ok", outputs, response._parameters_dict))
        return (region.size, encoded)


class _Reported(Exception):
    """A contract violation reported with Triton's own text (no type name)."""


_BYTES = 13
_NUMPY_OF = {1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8,
             7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32,
             12: np.float64, 14: np.uint16}


def main(argv):
    mode = argv[1]
    main_fd, ctrl_fd, in_fd, out_fd, crash_fd = (int(a) for a in argv[2:7])
    region_size = int(argv[7])
    # Ctrl-C in a terminal reaches the whole process group: the server
    # finalizes its workers itself (as Triton's stub ignores these too).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    faulthandler.enable(file=crash_fd, all_threads=True)
    main_ch = channel.Channel(socket.socket(fileno=main_fd))
    ctrl_ch = channel.Channel(socket.socket(fileno=ctrl_fd))
    regions = (channel.Region(in_fd, region_size, reserve=False),
               channel.Region(out_fd, region_size, reserve=False))
    worker = Worker(mode, main_ch, ctrl_ch, regions, crash_fd)
    # From here on the worker ends with the server, even in a long initialize.
    threading.Thread(target=worker._control_loop, name="control", daemon=True).start()
    try:
        msg = main_ch.recv()
    except EOFError:
        return 1
    try:
        reply = worker.start(msg[1])
    except BaseException as err:  # noqa: B036 - any failure to start is reported
        main_ch.send(("error", describe(err)))
        return 1
    main_ch.send(reply)
    if mode != "instance":
        return 0
    try:
        worker.serve()
    except BaseException:
        os.write(crash_fd, traceback.format_exc().encode("utf-8", "replace"))
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
