# cython: language_level=3
"""numpy arrays made through its C API, where the Python constructors
(np.empty, np.frombuffer + reshape) cost microseconds per call on the
request path. A module that cimports this calls ``cnp.import_array()``."""
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int64_t

cimport numpy as cnp


cdef extern from "numpy/arrayobject.h":
    PyTypeObject PyArray_Type
    # Steals a reference to ``descr``.
    object PyArray_NewFromDescr(PyTypeObject* subtype, cnp.dtype descr, int nd,
                                cnp.npy_intp* dims, cnp.npy_intp* strides, void* data,
                                int flags, PyObject* obj)
    # Steals a reference to ``base``.
    int PyArray_SetBaseObject(cnp.ndarray arr, object base) except -1


cdef enum:
    NDARRAY_MAX_DIMS = 64  # numpy's own limit (NPY_MAXDIMS: 64 since 2.0, 32 before)


cdef inline cnp.ndarray new_array(cnp.dtype dtype, int nd, const int64_t* shape):
    """np.empty(shape, dtype): its own, row-major, uninitialized memory."""
    cdef cnp.npy_intp dims[NDARRAY_MAX_DIMS]
    cdef int i
    if nd > NDARRAY_MAX_DIMS:
        raise ValueError(f"{nd} dimensions, more than numpy's {NDARRAY_MAX_DIMS}")
    for i in range(nd):
        dims[i] = <cnp.npy_intp>shape[i]
    Py_INCREF(dtype)
    return <cnp.ndarray>PyArray_NewFromDescr(&PyArray_Type, dtype, nd, dims, NULL, NULL, 0, NULL)
