#include "pyserver/memory_pool.h"

namespace pyserver {

MemoryPool::MemoryPool(size_t capacity, std::unique_ptr<BlockAllocator> pooled,
                       std::unique_ptr<BlockAllocator> overflow)
    : capacity_(capacity), pooled_(std::move(pooled)), overflow_(std::move(overflow)), free_(64) {}

MemoryPool::~MemoryPool() { Trim(); }

size_t MemoryPool::ClassSize(size_t bytes) {
  size_t size = kMinBlock;
  while (size < bytes) size <<= 1;
  return size;
}

int MemoryPool::ClassIndex(size_t class_size) { return __builtin_ctzll(class_size); }

void MemoryPool::Describe(const BlockAllocator& allocator, MemoryBlock* block) const {
  block->pinned = allocator.kind() == MemoryKind::kPinnedHost;
  block->device = allocator.device();
}

void MemoryPool::EvictFor(size_t needed) {
  // Largest classes first: fewest frees for the room.
  for (int i = static_cast<int>(free_.size()) - 1; i >= 0; --i) {
    std::vector<void*>& list = free_[i];
    while (!list.empty() && in_use_ + cached_ + needed > capacity_) {
      pooled_->Free(list.back());
      list.pop_back();
      cached_ -= size_t{1} << i;
    }
  }
}

Status MemoryPool::Allocate(size_t bytes, MemoryBlock* block) {
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
      block->pooled = true;
      Describe(*pooled_, block);
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
    Status status = pooled_->Allocate(size, &block->data);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= size;
      --allocations_;
      block->data = nullptr;
      return status;
    }
    block->capacity = size;
    Describe(*pooled_, block);
    return Status::Ok();
  }
  block->capacity = bytes;
  Describe(*overflow_, block);
  Status status = overflow_->Allocate(bytes, &block->data);
  if (!status.ok()) block->data = nullptr;
  return status;
}

void MemoryPool::Release(const MemoryBlock& block) {
  if (block.data == nullptr) return;
  if (!block.pooled) {
    overflow_->Free(block.data);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  in_use_ -= block.capacity;
  free_[ClassIndex(block.capacity)].push_back(block.data);
  cached_ += block.capacity;
}

void MemoryPool::Trim() {
  std::vector<void*> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::vector<void*>& list : free_) {
      doomed.insert(doomed.end(), list.begin(), list.end());
      list.clear();
    }
    cached_ = 0;
  }
  for (void* p : doomed) pooled_->Free(p);
}

MemoryPoolStats MemoryPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryPoolStats s;
  s.capacity = capacity_;
  s.in_use_bytes = in_use_;
  s.cached_bytes = cached_;
  s.reuses = reuses_;
  s.allocations = allocations_;
  s.unpooled = unpooled_;
  s.pinned = pooled_->kind() == MemoryKind::kPinnedHost;
  s.device = pooled_->device();
  return s;
}

}  // namespace pyserver
