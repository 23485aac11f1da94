# cython: language_level=3
"""The objects a Python model handles per request, compiled: pb_utils'
Tensor and InferenceResponse, the core of its InferenceRequest (which
pb_utils subclasses with BLS, the response sender and cancellation), the
errors they raise and get_input_tensor_by_name. Triton binds the same
classes from C++; here a model's ``Tensor(name, array)`` and
``InferenceResponse(output_tensors=[...])`` cost a C call, not a Python
frame (a Python subclass would put one back: type calls with keywords on a
heap type build their arguments' dict and tuple).

Loaded by a worker by its file (channel.engine_module) before pb_utils and
worker_io, which makes and reads these objects through their fields.
"""

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer

from pyserver.engine.dlpack cimport DLManagedTensor


cdef extern from *:
    """
    // base.__new__(cls) as a C call: base's tp_new for its subtype cls (for
    // a Python subclass, Cython makes RequestBase.__new__(cls) a Python
    // method call, which new_request would make per request)
    static PyObject* pyserver_new_as(PyObject* base, PyObject* cls, PyObject* args) {
        return ((PyTypeObject*)base)->tp_new((PyTypeObject*)cls, args, NULL);
    }
    """
    object pyserver_new_as(object base, object cls, object args)

import enum
import json

import numpy as np

cnp.import_array()

_BYTES = 13  # TRITONSERVER_DataType's TYPE_BYTES


# -- errors ---------------------------------------------------------------------------

class TritonModelException(Exception):
    """Raise from initialize, execute or finalize to fail them with a message."""


class _ErrorCode(enum.IntEnum):
    # TRITONSERVER_Error_Code numbering.
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError(Exception):
    """An error for one response: ``TritonError(message, code=TritonError.INTERNAL)``.

    Give it to ``InferenceResponse(error=...)``; the client receives the
    message with the status the code maps to (INVALID_ARG -> HTTP 400 ...).
    """

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    def __init__(self, message, code=_ErrorCode.INTERNAL):
        if message is None:
            raise TypeError("TritonError(): message must be a string, not None")
        if code is None:
            raise TypeError("TritonError(): code must be a TritonError code, not None")
        try:
            code = _ErrorCode(int(code))
        except (TypeError, ValueError):
            raise TypeError(f"TritonError(): unknown error code {code!r}") from None
        super().__init__(str(message))
        self._message = str(message)
        self._code = code

    def code(self):
        return self._code

    def message(self):
        return self._message

    def __str__(self):
        return self._message

    def __repr__(self):
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"


def parameters_json(parameters, bint compact=False):
    """A request's or response's parameters (a dict of str to bool, int or
    str) as JSON text; TritonModelException for anything else."""
    if not parameters:
        if parameters is None or isinstance(parameters, dict):
            return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}")
    if compact:
        return json.dumps(parameters, separators=(",", ":"))
    return json.dumps(parameters)


# -- data types -----------------------------------------------------------------------

cdef int _code_of_num(int num, int size):
    """The TRITONSERVER_DataType of numpy type number ``num`` (items of
    ``size`` bytes, native order), 0 when Triton has none."""
    if num == cnp.NPY_FLOAT:
        return 11
    if num == cnp.NPY_BOOL:
        return 1
    if num == cnp.NPY_OBJECT:
        return _BYTES
    if num == cnp.NPY_BYTE or num == cnp.NPY_SHORT or num == cnp.NPY_INT \
            or num == cnp.NPY_LONG or num == cnp.NPY_LONGLONG:
        return 6 if size == 1 else 7 if size == 2 else 8 if size == 4 else 9 if size == 8 else 0
    if num == cnp.NPY_UBYTE or num == cnp.NPY_USHORT or num == cnp.NPY_UINT \
            or num == cnp.NPY_ULONG or num == cnp.NPY_ULONGLONG:
        return 2 if size == 1 else 3 if size == 2 else 4 if size == 4 else 5 if size == 8 else 0
    if num == cnp.NPY_FLOAT16:
        return 10
    if num == cnp.NPY_DOUBLE:
        return 12
    return 0


def dtype_code(dtype):
    """The TRITONSERVER_DataType of a numpy dtype (bytes_ of any length:
    BYTES), 0 when Triton has none (other byte orders included)."""
    dtype = np.dtype(dtype)
    if dtype.type is np.bytes_:
        return _BYTES
    if not dtype.isnative:
        return 0
    return _code_of_num(dtype.num, dtype.itemsize)


cdef inline int _array_code(cnp.ndarray array) except -1:
    cdef int code = 0
    if cnp.PyArray_ISNOTSWAPPED(array):
        code = _code_of_num(cnp.PyArray_TYPE(array), cnp.PyArray_ITEMSIZE(array))
    if code == 0:
        code = dtype_code(array.dtype)
        if code == 0:
            raise TritonModelException("NumPy dtype is not supported.")
    return code


# TRITONSERVER_DataType numbers -> wire datatype names (KServe v2); pb_utils
# takes its tables from here.
CODE_TO_WIRE = {1: "BOOL", 2: "UINT8", 3: "UINT16", 4: "UINT32", 5: "UINT64", 6: "INT8",
                7: "INT16", 8: "INT32", 9: "INT64", 10: "FP16", 11: "FP32", 12: "FP64",
                13: "BYTES", 14: "BF16"}


# -- tensors --------------------------------------------------------------------------

cdef class Tensor:
    """A named tensor: ``Tensor(name, numpy_array)``.

    ``as_numpy()`` gives the array (BYTES tensors as object arrays of bytes);
    ``to_dlpack()`` / ``Tensor.from_dlpack(name, obj)`` exchange CPU tensors
    with other frameworks without a copy.
    """

    def __init__(self, name, numpy_array):
        if name is None or name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = numpy_array if type(numpy_array) is np.ndarray else np.asarray(numpy_array)
        self._dtype = _array_code(<cnp.ndarray>array)
        if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>array):
            array = np.ascontiguousarray(array)
        self._name = name
        self._array = array

    @staticmethod
    def _wrap(name, array, int dtype):
        # A tensor built by the server's side: no checks, no copy.
        return new_tensor(name, array, dtype)

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def triton_dtype(self):
        return self._dtype

    def shape(self):
        return list(self._array.shape)

    def is_cpu(self):
        return True

    def to_dlpack(self):
        if self._dtype == _BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._array.__dlpack__()

    def __dlpack__(self, stream=None):
        return self.to_dlpack()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name, dlpack_tensor):
        """A Tensor over a DLPack capsule or an object with ``__dlpack__``
        (torch, cupy, jax, numpy ...), sharing its memory. CPU tensors only
        in this version; they must be contiguous in C order."""
        if name is None or name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        source = dlpack_tensor
        if type(dlpack_tensor).__name__ == "PyCapsule":
            source = _CapsuleSource(dlpack_tensor)
        device = source.__dlpack_device__() if hasattr(source, "__dlpack_device__") else (1, 0)
        if int(device[0]) not in (1, 3):  # kDLCPU, kDLCUDAHost
            raise TritonModelException(
                "Tensor.from_dlpack: only CPU tensors are supported by this pyserver version "
                f"(got DLPack device type {int(device[0])})")
        try:
            array = np.from_dlpack(source)
        except (TypeError, BufferError, RuntimeError) as err:
            raise TritonModelException(f"Tensor.from_dlpack: {err}") from None
        if not array.flags.c_contiguous:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are "
                "stored in C-Order are supported.")
        return Tensor(name, array)

    def __repr__(self):
        return (f"Tensor({self._name!r}, dtype={CODE_TO_WIRE.get(self._dtype)}, "
                f"shape={self.shape()})")


cdef Tensor new_tensor(object name, object array, int code):
    """A tensor the worker built: no checks, no copy."""
    cdef Tensor t = Tensor.__new__(Tensor)
    t._name = name
    t._array = array
    t._dtype = code
    return t


class _CapsuleSource:
    """Lets numpy.from_dlpack read a bare DLPack capsule (it wants an object
    with __dlpack__ and __dlpack_device__)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **_kwargs):
        return self._capsule

    def __dlpack_device__(self):
        cdef DLManagedTensor* managed = <DLManagedTensor*>PyCapsule_GetPointer(
            self._capsule, b"dltensor")
        return (managed.dl_tensor.device.device_type, managed.dl_tensor.device.device_id)


# -- requests and responses -----------------------------------------------------------

cdef class RequestBase:
    """The fields and plain accessors of pb_utils.InferenceRequest, which
    adds what needs the server (BLS, the response sender, cancellation)."""

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = flags

    def timeout(self):
        return self._timeout

    def parameters(self):
        return self._parameters

    def requested_output_names(self):
        return self._requested_output_names

    def model_name(self):
        return self._model_name

    def set_release_flags(self, flags):
        self._release_flags = flags

    def release_flags(self):
        return self._release_flags


cpdef RequestBase new_request(type cls, Py_ssize_t index, object request_id,
                              object correlation_id, object flags, object timeout,
                              object parameters_json, object requested_output_names,
                              object inputs, object model_name, object model_version, object key,
                              object trace):
    """A request of ``cls`` (pb_utils.InferenceRequest) handed to execute():
    built by the worker (worker_io, or pb_utils' InferenceRequest._incoming),
    no checks; ``index`` its place in the batch."""
    if not issubclass(cls, RequestBase):
        raise TypeError(f"{cls.__name__} is not a pb_utils.InferenceRequest")
    cdef RequestBase r = <RequestBase>pyserver_new_as(RequestBase, cls, ())
    r._request_id = request_id
    r._correlation_id = correlation_id
    r._inputs = inputs
    r._requested_output_names = requested_output_names
    r._model_name = model_name
    r._model_version = model_version
    r._flags = flags
    r._timeout = timeout
    r._preferred_memory = None
    r._trace = trace
    r._parameters = parameters_json
    r._release_flags = 1  # TRITONSERVER_REQUEST_RELEASE_ALL
    r._index = index
    r._key = key
    r._sender = None
    return r



cdef class InferenceResponse:
    """The response to one request: ``InferenceResponse(output_tensors=[...],
    error=None, parameters=None)``. With an error, the tensors are ignored."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"InferenceResponse(): error must be a pb_utils.TritonError, "
                            f"got {type(error)}")
        cdef list tensors = [] if output_tensors is None else list(output_tensors)
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"InferenceResponse(): output_tensors must hold pb_utils.Tensor "
                                f"objects, got {type(t)}")
        self._output_tensors = tensors
        self._error = error
        if parameters is None:
            self._parameters = "{}"
            self._parameters_dict = None
        else:
            self._parameters = parameters_json(parameters)
            self._parameters_dict = dict(parameters) if parameters else None

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return self._parameters


def get_input_tensor_by_name(inference_request, name):
    """The input Tensor called ``name`` of a request, or None."""
    if isinstance(inference_request, RequestBase) \
            and type(inference_request).inputs is RequestBase.inputs:
        for tensor in (<RequestBase>inference_request)._inputs:
            if type(tensor) is Tensor:
                if (<Tensor>tensor)._name == name:
                    return tensor
            elif tensor.name() == name:
                return tensor
        return None
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None
