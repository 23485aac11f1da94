# cython: language_level=3
"""DLPack both ways for the in-process API's Tensor (pyserver.inprocess):
``describe`` reads what a producer's capsule says of its memory, ``export``
hands a block of memory out as a capsule whose consumer keeps a Python
object (the owner) alive until it lets go.

Plain C over the ABI in dlpack.pxd, so a capsule costs one malloc and the
consumer's deleter may run on any thread (it takes the GIL only to drop the
owner)."""

from cpython.pycapsule cimport (
    PyCapsule_GetPointer,
    PyCapsule_IsValid,
    PyCapsule_New,
)
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc

from pyserver.engine.dlpack cimport DLManagedTensor, DLTensor

cdef const char* _NAME = b"dltensor"


def describe(obj, stream=None):
    """What ``obj.__dlpack__()`` points at: (data address, device type,
    device id, dtype code, bits, lanes, shape, contiguous, byte size). The
    capsule is read and dropped unconsumed, so its producer frees its side
    at once; the caller keeps ``obj`` for as long as it uses the memory."""
    capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
    if not PyCapsule_IsValid(capsule, _NAME):
        raise ValueError("__dlpack__ did not return an unconsumed 'dltensor' capsule")
    cdef DLManagedTensor* managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, _NAME)
    cdef DLTensor* t = &managed.dl_tensor
    cdef int i
    shape = tuple(t.shape[i] for i in range(t.ndim))
    cdef int64_t count = 1
    for i in range(t.ndim):
        count *= t.shape[i]
    cdef bint contiguous = True
    cdef int64_t expected = 1
    if t.strides != NULL and count > 0:
        for i in range(t.ndim - 1, -1, -1):
            if t.shape[i] != 1 and t.strides[i] != expected:  # size-1 dims stride freely
                contiguous = False
                break
            expected *= t.shape[i]
    byte_size = count * ((t.dtype.bits * t.dtype.lanes + 7) // 8)
    return (<size_t>t.data + t.byte_offset, t.device.device_type, t.device.device_id,
            t.dtype.code, t.dtype.bits, t.dtype.lanes, shape, contiguous, byte_size)


cdef void _release(DLManagedTensor* managed) noexcept nogil:
    # The consumer is done: drop the owner (under the GIL, from whatever
    # thread the consumer frees on) and the block (one malloc).
    with gil:
        Py_DECREF(<object>managed.manager_ctx)
    free(managed)


cdef void _capsule_destructor(object capsule) noexcept:
    # A capsule nobody consumed (still named "dltensor") frees its tensor;
    # a consumed one was renamed and belongs to its consumer.
    if PyCapsule_IsValid(capsule, _NAME):
        _release(<DLManagedTensor*>PyCapsule_GetPointer(capsule, _NAME))


def export(owner, size_t data, int device_type, int device_id, int code, int bits, shape):
    """A "dltensor" capsule over ``data`` (compact, row-major), keeping
    ``owner`` alive until the consumer's deleter runs."""
    cdef int ndim = len(shape)
    # the shape lives in the same block, after the struct
    cdef DLManagedTensor* managed = <DLManagedTensor*>malloc(
        sizeof(DLManagedTensor) + ndim * sizeof(int64_t))
    if managed == NULL:
        raise MemoryError()
    cdef int64_t* dims = <int64_t*>(<char*>managed + sizeof(DLManagedTensor))
    cdef int i
    for i in range(ndim):
        dims[i] = shape[i]
    managed.dl_tensor.data = <void*>data
    managed.dl_tensor.device.device_type = device_type
    managed.dl_tensor.device.device_id = device_id
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype.code = code
    managed.dl_tensor.dtype.bits = bits
    managed.dl_tensor.dtype.lanes = 1
    managed.dl_tensor.shape = dims
    managed.dl_tensor.strides = NULL
    managed.dl_tensor.byte_offset = 0
    Py_INCREF(owner)
    managed.manager_ctx = <PyObject*>owner
    managed.deleter = _release
    try:
        return PyCapsule_New(managed, _NAME, <void(*)(object) noexcept>_capsule_destructor)
    except BaseException:
        _release(managed)
        raise
