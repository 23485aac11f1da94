#include "pyserver/gather.h"

#include <cstring>

namespace pyserver {

size_t GatherCopy(const void* const* sources, const size_t* sizes, size_t n, void* dst) {
  char* out = static_cast<char*>(dst);
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (sizes[i] != 0) std::memcpy(out + offset, sources[i], sizes[i]);
    offset += sizes[i];
  }
  return offset;
}

}  // namespace pyserver
