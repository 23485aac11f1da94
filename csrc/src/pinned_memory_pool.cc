#include "pyserver/pinned_memory_pool.h"

#include <cstdlib>

#include "pyserver/cuda_runtime.h"

namespace pyserver {

PinnedMemoryPool::PinnedMemoryPool(size_t capacity, const CudaRuntime* runtime)
    : capacity_(capacity),
      runtime_(runtime != nullptr && runtime->available() ? runtime : nullptr),
      free_(64) {}

PinnedMemoryPool::~PinnedMemoryPool() { Trim(); }

size_t PinnedMemoryPool::ClassSize(size_t bytes) {
  size_t size = kMinBlock;
  while (size < bytes) size <<= 1;
  return size;
}

int PinnedMemoryPool::ClassIndex(size_t class_size) { return __builtin_ctzll(class_size); }

Status PinnedMemoryPool::RawAllocate(size_t bytes, bool pin, void** ptr) const {
  if (pin) return runtime_->HostAlloc(ptr, bytes);
  // Page alignment: what cudaHostRegister would need, and what DMA likes.
  size_t rounded = (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
  *ptr = std::aligned_alloc(kMinBlock, rounded == 0 ? kMinBlock : rounded);
  if (*ptr == nullptr) {
    return Status(StatusCode::kUnavailable,
                  "out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
  return Status::Ok();
}

void PinnedMemoryPool::RawFree(void* ptr, bool pin) const {
  if (pin) {
    runtime_->FreeHost(ptr);  // nothing useful to do with a failure here
  } else {
    std::free(ptr);
  }
}

void PinnedMemoryPool::EvictFor(size_t needed) {
  // Largest classes first: fewest frees for the room.
  for (int i = static_cast<int>(free_.size()) - 1; i >= 0; --i) {
    std::vector<void*>& list = free_[i];
    while (!list.empty() && in_use_ + cached_ + needed > capacity_) {
      RawFree(list.back(), pinned());
      list.pop_back();
      cached_ -= size_t{1} << i;
    }
  }
}

Status PinnedMemoryPool::Allocate(size_t bytes, MemoryBlock* block) {
  const size_t size = ClassSize(bytes);
  const int index = ClassIndex(size);
  block->size = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<void*>& list = free_[index];
    if (!list.empty()) {
      block->data = list.back();
      list.pop_back();
      cached_ -= size;
      in_use_ += size;
      ++reuses_;
      block->capacity = size;
      block->pinned = pinned();
      block->pooled = true;
      return Status::Ok();
    }
    if (size <= capacity_ && in_use_ + cached_ + size > capacity_) EvictFor(size);
    if (size <= capacity_ && in_use_ + cached_ + size <= capacity_) {
      in_use_ += size;  // reserve, then allocate outside the lock
      ++allocations_;
      block->pooled = true;
    } else {
      ++unpooled_;
      block->pooled = false;
    }
  }
  if (block->pooled) {
    Status status = RawAllocate(size, pinned(), &block->data);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= size;
      --allocations_;
      return status;
    }
    block->capacity = size;
    block->pinned = pinned();
    return Status::Ok();
  }
  block->capacity = bytes;
  block->pinned = false;
  return RawAllocate(bytes, false, &block->data);
}

void PinnedMemoryPool::Release(const MemoryBlock& block) {
  if (block.data == nullptr) return;
  if (!block.pooled) {
    RawFree(block.data, false);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= block.capacity;
  free_[ClassIndex(block.capacity)].push_back(block.data);
  cached_ += block.capacity;
}

void PinnedMemoryPool::Trim() {
  std::vector<void*> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::vector<void*>& list : free_) {
      doomed.insert(doomed.end(), list.begin(), list.end());
      list.clear();
    }
    cached_ = 0;
  }
  for (void* p : doomed) RawFree(p, pinned());
}

PinnedMemoryPoolStats PinnedMemoryPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PinnedMemoryPoolStats s;
  s.capacity = capacity_;
  s.in_use_bytes = in_use_;
  s.cached_bytes = cached_;
  s.reuses = reuses_;
  s.allocations = allocations_;
  s.unpooled = unpooled_;
  s.pinned = pinned();
  return s;
}

}  // namespace pyserver
