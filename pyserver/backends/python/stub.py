"""The worker process of one Python-model instance (Triton's "stub").

Started by pyserver.backends.python.backend as
``python stub.py <mode> <main_fds> <ctrl_fds> <in_fd> <out_fd> <crash_fd> <region_size>
<up_fd> <down_fd> <async_size>`` with the descriptors inherited (a channel's
two as "read,write"). Of pyserver it
loads only this folder's channel.py and triton_python_backend_utils.py (by path)
and the engine's small IPC extensions, so it starts as fast as the
interpreter and numpy allow.

mode ``instance``: imports the model, builds ``TritonPythonModel``, calls
``initialize(args)``, answers ``ready``, then serves ``exec`` messages (one
batch of requests at a time, on the main thread) until ``finalize``.
mode ``autocomplete``: runs the model's ``auto_complete_config`` staticmethod
on the config it is sent, answers the completed config, and exits.

Two channels (each a socket per direction): ``main`` carries the
request/response exchange the server's
instance thread drives (plus the questions a model asks while it executes,
such as ``is_cancelled``); ``ctrl`` carries what may happen at any time
(``is_ready`` checks, log records, and the model's own requests: decoupled
responses, BLS calls, custom metrics, model control, each answered by a
``("reply", seq, payload, final)``). Batch tensors travel through the two
main shared regions; the asynchronous traffic through two more ("up",
written here block by block through a channel.Arena, and "down", written
by the server), see channel.py. Fatal signals (SIGSEGV ...) write a
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
# Run by a model's own environment (EXECUTION_ENV_PATH): its packages come
# first, pyserver's folder last (for the engine's IPC helpers).
_HOME = os.environ.get("PYSERVER_HOME")
if _HOME and _HOME not in sys.path:
    sys.path.append(_HOME)

import faulthandler  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402


def _load_module(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, filename))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


channel = _load_module("_pyserver_python_channel", "channel.py")
# The compiled core of pb_utils' per-request objects, which pb_utils and
# worker_io find loaded (engine/pb_objects.pyx), then the per-request work of
# a batch (engine/worker_io.pyx).
channel.engine_module("pb_objects")
_worker_io = channel.engine_module("worker_io")
# What models import as pb_utils: Triton's API alone.
pb_utils = _load_module("triton_python_backend_utils", "triton_python_backend_utils.py")
# What running a model takes, here and in the server's in-process runner
# (describing errors, checking execute()'s answer, the instance's asyncio loop).
runner = _load_module("_pyserver_python_runner", "runner.py")
describe = runner.describe


class _Runtime:
    """What pb_utils reaches the server through (pb_utils._runtime)."""

    def __init__(self, main, ctrl, model_dir, up, down, pb):
        self.main = main
        self.ctrl = ctrl
        self.model_dir = model_dir
        self.up = up  # Arena over the region we write for the server
        self.down = down  # the region the server writes for us
        self.pb = pb
        self.decoupled = False
        # Questions to the server go over the main channel, which only works
        # while the server waits for this batch: `executing` says so.
        self.lock = threading.Lock()
        self.executing = False
        # Requests to the server over the control channel, answered by
        # ("reply", seq, payload, final) messages the control thread routes.
        self._calls = {}
        self._calls_lock = threading.Lock()
        self._seq = 0
        # Decoupled responses go out without waiting for the server; acks
        # come back in the order sent. flush_responses() waits for them.
        self._resp_lock = threading.Lock()
        self._resp_sent = 0
        self._resp_acked = 0
        self._resp_cv = threading.Condition()

    # -- control-channel calls -----------------------------------------------

    def call(self, msg, on_reply):
        """Sends ``(kind, seq, *rest)`` for ``msg = (kind, *rest)``;
        ``on_reply(payload, final)`` runs on the control thread."""
        with self._calls_lock:
            self._seq += 1
            seq = self._seq
            self._calls[seq] = on_reply
        try:
            self.ctrl.send((msg[0], seq) + tuple(msg[1:]))
        except OSError:
            with self._calls_lock:
                self._calls.pop(seq, None)
            raise self.pb.TritonModelException("the server is not reachable") from None
        return seq

    def ask(self, msg):
        """A call answered once; waits for the answer."""
        return runner.one_reply(lambda on_reply: self.call(msg, on_reply))

    def dispatch(self, seq, payload, final):
        with self._calls_lock:
            handler = self._calls.pop(seq, None) if final else self._calls.get(seq)
        if handler is not None:
            handler(payload, final)

    # -- requests and responses ----------------------------------------------------

    def for_request(self, request):
        """The runtime a request's sender answers through: this one."""
        return self

    def is_cancelled(self, index, key=None):
        if self.decoupled and key is not None:
            return bool(self.ask(("cancelled", key)))
        with self.lock:
            if not self.executing:
                return False  # its batch is answered: nobody waits for it
            self.main.send(("query", "cancelled", index))
            reply = self.main.recv()
        return bool(reply[1])

    def send_response(self, request, response, flags):
        """A decoupled model's response: tensors into the shared region and
        a message to the server. It does not wait for the server (Triton's
        sender does): the server takes responses in the order sent, frees
        their blocks with its ack, and execute() returns only once every
        response sent before it was taken (flush_responses), so a batch's
        error never overtakes them. The sender's own state (closed after
        the final flag or a failed execute) raises here, as in Triton."""
        pb = self.pb
        encoded = None
        offsets = ()
        params = None
        error = None
        if response is not None:
            if response._error is not None:
                error = (response._error.code().name, response._error.message())
            else:
                tensors = runner.response_tensors(response, request._requested_output_names)
                encoded, offsets = self.up.write(tensors)
                params = response._parameters_dict
        final = flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL

        def on_ack(problem, _final):
            if offsets:
                self.up.free(offsets)
            with self._resp_cv:
                self._resp_acked += 1
                self._resp_cv.notify_all()
            if problem:  # its request ended meanwhile (the server gave up on it)
                sys.stderr.write(f"response for request '{request._request_id}' not "
                                 f"delivered: {problem}\n")

        try:
            with self._resp_lock:  # acks come back in this order
                self.call(("resp", request._key, self.up.region.size, encoded, params, error,
                           final), on_ack)
                self._resp_sent += 1
        except BaseException:
            if offsets:
                self.up.free(offsets)
            raise

    def flush_responses(self):
        """Waits until the server has taken every response sent so far."""
        with self._resp_lock:
            target = self._resp_sent
        with self._resp_cv:
            self._resp_cv.wait_for(lambda: self._resp_acked >= target)

    # -- BLS ------------------------------------------------------------------------

    def _bls_send(self, request, decoupled, on_reply):
        """Sends a BLS request; ``on_reply(response or None, final)`` runs on
        the control thread with the decoded pb_utils.InferenceResponse.
        Returns the function that cancels it."""
        encoded, offsets = self.up.write(runner.bls_inputs(request))
        desc = runner.bls_description(request)

        def handler(payload, final):
            response = self._bls_response(payload)
            if final and offsets:
                self.up.free(offsets)
            on_reply(response, final)

        try:
            seq = self.call(("bls", self.up.region.size, desc, encoded, decoupled), handler)
        except BaseException:
            self.up.free(offsets)
            raise
        return lambda: self._bls_cancel(seq)

    def _bls_response(self, payload):
        """A reply's pb_utils.InferenceResponse (None: the final flag alone)."""
        pb = self.pb
        failed = runner.bls_failure(payload)
        if failed is not None:
            return failed
        _, size, encoded, params, _error = payload
        if encoded is None:
            return None
        arrays = channel.read_tensors(self.down, size, encoded, _NUMPY_OF, copy=True)
        freed = [e[3] for e in encoded if e[5] is None]
        if freed:
            try:
                self.ctrl.send(("free", freed))
            except OSError:
                pass
        tensors = [pb.Tensor._wrap(e[0], arrays[e[0]], e[1]) for e in encoded]
        response = pb.InferenceResponse(output_tensors=tensors, parameters=params)
        return response

    def bls_exec(self, request, decoupled):
        return runner.bls_exec(self._bls_send, request, decoupled)

    def bls_async_exec(self, request, decoupled):
        return runner.bls_async_exec(self._bls_send, request, decoupled)

    def _bls_cancel(self, seq):
        try:
            self.ctrl.send(("bls_cancel", seq))
        except OSError:
            pass

    # -- logs ---------------------------------------------------------------------------

    def log(self, level, message, filename, line):
        try:
            self.ctrl.send(("log", level, message, filename, line))
        except OSError:
            sys.stderr.write(f"{filename}:{line}] {message}\n")


class Worker:
    def __init__(self, mode, main, ctrl, regions, crash_fd, async_regions):
        self.mode = mode
        self.main = main
        self.ctrl = ctrl
        self.inp, self.out = regions
        self.up, self.down = async_regions
        self.decoupled = False
        self.crash_fd = crash_fd
        self.runner = runner.AsyncRunner()
        self.model = None
        self.pb = None
        self.instance_name = ""
        self._out_end = 0  # the end of the outputs written for this message

    # -- start ---------------------------------------------------------------

    def import_model(self, info):
        model_path = info["model_path"]
        runtime_model = info.get("runtime_model") or ""
        source = runtime_model or model_path
        if not source.endswith(".py"):
            raise ImportError(f"Model name must end with '.py'. Model name is \"{source}\".")
        version_dir = os.path.dirname(model_path)
        self.pb = pb_utils
        self.pb._runtime = _Runtime(self.main, self.ctrl, version_dir, self.up, self.down, self.pb)
        stem = os.path.basename(source)[:-3]
        if runtime_model:
            # A Python-based backend, as Triton's stub runs one: its own
            # folder on the path, its model.py imported by its bare name.
            sys.path.append(os.path.dirname(runtime_model))
            sys.path.append(_HERE)
            return importlib.import_module(stem).TritonPythonModel
        # As Triton's stub: the version folder and the model folder, then the
        # backend folder; the model is imported as "<version>.<file>".
        sys.path.append(version_dir)
        sys.path.append(os.path.dirname(version_dir))
        sys.path.append(_HERE)
        module = importlib.import_module(f"{os.path.basename(version_dir)}.{stem}")
        return module.TritonPythonModel

    def start(self, info):
        self.instance_name = info.get("instance_name", "")
        self.decoupled = bool(info.get("decoupled", False))
        cls = self.import_model(info)
        self.pb._runtime.decoupled = self.decoupled
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
            if runner.awaitable(result):
                self.runner.run(result)
        return ("ready", hasattr(self.model, "is_ready"), os.getpid())

    # -- serving ----------------------------------------------------------------

    def serve(self):
        main = self.main
        spin_ns = pay_ns = None  # the channel's own spin, any catch paying
        while True:
            try:
                msg = main.recv(spin_ns, pay_ns)
            except EOFError:
                return  # the server is gone
            kind = msg[0]
            if kind == "exec":
                self.execute_group(msg)
                spin_ns, pay_ns = channel.spin_after(msg[5], main.spin_ns, _LOW_LOAD_SPIN_NS)
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
            kind = msg[0]
            if kind == "reply":
                try:
                    self.pb._runtime.dispatch(msg[1], msg[2], msg[3])
                except Exception:
                    sys.stderr.write("pyserver worker: a reply handler failed\n"
                                     + traceback.format_exc())
            elif kind == "is_ready":
                # On its own thread: a slow is_ready() must not hold up the
                # replies this thread routes (a BLS call waiting on one).
                threading.Thread(target=self._answer_is_ready, args=(msg[1],),
                                 daemon=True).start()

    def _answer_is_ready(self, seq):
        reply = self._is_ready() if self.model is not None else (False, "not initialized")
        try:
            self.ctrl.send(("is_ready", seq) + reply)
        except OSError:
            pass

    def _is_ready(self):
        try:
            result = self.model.is_ready()
            if runner.awaitable(result):
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
            if runner.awaitable(result):
                self.runner.run(result)
        except Exception as err:
            return describe(err)
        return None

    def execute_group(self, msg):
        """Runs the batches of one "exec" message in order, each its own
        execute() call, and answers each as it ends. Their outputs lie one
        after the other in the output region, which the server reads before
        it sends the next message."""
        _, in_size, groups, model_name, model_version, _load = msg
        self.inp.follow(in_size)
        self._out_end = 0
        main = self.main
        for items in groups:
            started = time.monotonic_ns()
            answer = self.execute(items, model_name, model_version)
            if answer[0] == "result":
                main.send_result(answer[1], answer[2], started)
            else:
                main.send(answer + (started,))

    def execute(self, items, model_name, model_version):
        pb = self.pb
        requests = _worker_io.requests_in(items, self.inp.mm, _DTYPE_OF, self.decoupled,
                                          pb.InferenceRequest, pb.InferenceTrace,
                                          model_name, model_version)
        decoupled = self.decoupled
        runtime = pb._runtime
        with runtime.lock:
            runtime.executing = True
        try:
            result = self.model.execute(requests)
            if decoupled:
                runner.decoupled_result(result, self.runner, self.instance_name)
                runtime.flush_responses()
                return ("result", 0, [_AGAIN if runner.rescheduled(r) else None for r in requests])
            if type(result) is not list and runner.awaitable(result):
                result = self.runner.run(result)
            if not _worker_io.answers_fit(result, requests,  # else all is well
                                          pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
                runner.check_responses(result, requests)
            return ("result",) + self._encode(result, requests)
        except Exception as err:
            if decoupled:
                # The server ends each open request with this error; nothing
                # more may be sent for them.
                for request in requests:
                    request.get_response_sender()._close()
                runtime.flush_responses()
            return ("fail", runner.execute_failure(self.instance_name, err))
        finally:
            with runtime.lock:
                runtime.executing = False
            if not decoupled:
                for request in requests:
                    if request._sender is not None:
                        request._sender._close()

    def _encode(self, responses, requests):
        self._out_end, encoded = _worker_io.responses_out(
            responses, requests, self.out, self._out_end, _BYTES,
            self.pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, _AGAIN, runner.MISSING_RESPONSE,
            runner.bytes_array)
        return (self.out.size, encoded)


_BYTES = 13
_AGAIN = ("again",)  # a request released to run again (region_io.read_results)
_LOW_LOAD_SPIN_NS = int(os.environ.get("PYSERVER_PYTHON_LOW_LOAD_SPIN_US", "300")) * 1000
_NUMPY_OF = {1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8,
             7: np.int16, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32,
             12: np.float64, 14: np.uint16}
_DTYPE_OF = {code: np.dtype(numpy_type) for code, numpy_type in _NUMPY_OF.items()}


def main(argv):
    mode = argv[1]
    # Each channel is two sockets, one read, one written: "read,write".
    main_fds, ctrl_fds = ([int(fd) for fd in a.split(",")] for a in argv[2:4])
    in_fd, out_fd, crash_fd = (int(a) for a in argv[4:7])
    region_size = int(argv[7])
    up_fd, down_fd, async_size = (int(a) for a in argv[8:11])
    # Ctrl-C in a terminal reaches the whole process group: the server
    # finalizes its workers itself (as Triton's stub ignores these too).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # SCHED_BATCH: a worker woken by a message does not preempt the thread
    # that sent it (the event loop) but takes a free core or waits for the
    # next tick. Without it, on 2 cores the loop was preempted at ~1 of 4
    # sends and relayed 10-20 % fewer requests per second (add_sub, 2
    # instances, 16 in flight). PYSERVER_PYTHON_SCHED=normal keeps SCHED_OTHER;
    # under "auto" (the default) the server moves a worker whose groups wait
    # for a core too often back to SCHED_OTHER (backend.py StartDelayWatch).
    if os.environ.get("PYSERVER_PYTHON_SCHED", "auto") in ("auto", "batch") and \
            hasattr(os, "SCHED_BATCH"):
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass
    faulthandler.enable(file=crash_fd, all_threads=True)
    # The server asks for the stacks of a worker it is about to stop as
    # hung (pyserver_execute_timeout_seconds): written from the signal
    # handler, so a thread stuck with the GIL held does not keep them back.
    faulthandler.register(signal.SIGUSR1, file=crash_fd, all_threads=True)
    # Between batches the worker spins briefly for the next one: under load
    # it often comes within microseconds, and a wake-up costs tens. How long
    # is the server's decision (backend._worker_env sets it);
    # PYSERVER_PYTHON_EXEC_SPIN_US=0 turns it off.
    main_ch = channel.Channel(socket.socket(fileno=main_fds[0]),
                              spin_ns=int(os.environ.get("PYSERVER_PYTHON_EXEC_SPIN_US", "0")) * 1000,
                              send_sock=socket.socket(fileno=main_fds[1]))
    ctrl_ch = channel.Channel(socket.socket(fileno=ctrl_fds[0]),
                              send_sock=socket.socket(fileno=ctrl_fds[1]))
    regions = (channel.Region(in_fd, region_size, reserve=False),
               channel.Region(out_fd, region_size, reserve=False))
    async_regions = (channel.Arena(channel.Region(up_fd, async_size, reserve=False)),
                     channel.Region(down_fd, async_size, reserve=False))
    worker = Worker(mode, main_ch, ctrl_ch, regions, crash_fd, async_regions)
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
