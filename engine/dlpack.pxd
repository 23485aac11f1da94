# The DLPack ABI (dlpack.h, version 0.8 layout: the unversioned
# "dltensor" capsule every producer still hands out when asked with no
# max_version), declared here from the specification.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t


cdef struct DLDevice:
    int device_type  # DLDeviceType: kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, ...
    int32_t device_id

cdef struct DLDataType:
    uint8_t code  # DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
    uint8_t bits
    uint16_t lanes

cdef struct DLTensor:
    void* data
    DLDevice device
    int32_t ndim
    DLDataType dtype
    int64_t* shape
    int64_t* strides  # NULL: compact and row-major
    uint64_t byte_offset

cdef struct DLManagedTensor:
    DLTensor dl_tensor
    void* manager_ctx
    void (*deleter)(DLManagedTensor*) noexcept nogil
