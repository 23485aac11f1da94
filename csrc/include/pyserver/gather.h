// Gather: copies the inputs of a batch's requests into one contiguous buffer
// (the batched input tensor). Called with the GIL released.
#pragma once

#include <cstddef>

namespace pyserver {

// Copies n source buffers back to back into dst; returns bytes written.
size_t GatherCopy(const void* const* sources, const size_t* sizes, size_t n, void* dst);

}  // namespace pyserver
