#include "pyserver/response_cache.h"

#define XXH_INLINE_ALL  // header-only xxHash (Debian's libxxhash-dev)
#include <xxhash.h>

#include <new>

namespace pyserver {

RequestHasher::RequestHasher() {
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(state);
  state_ = state;
}

RequestHasher::~RequestHasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void RequestHasher::Update(const void* data, size_t n) {
  if (n > 0) XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}

void RequestHasher::UpdateU64(uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), bytes, sizeof(bytes));
}

CacheKey RequestHasher::Digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return CacheKey{h.low64, h.high64};
}

ResponseCache::ResponseCache(size_t capacity) : capacity_(capacity) {}

std::shared_ptr<const std::string> ResponseCache::Lookup(const CacheKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->value;
}

bool ResponseCache::Insert(const CacheKey& key, std::string response) {
  const size_t charge = Charge(response);
  if (charge > capacity_) return false;
  // Built outside the lock: the copy into shared storage may be large.
  auto value = std::make_shared<const std::string>(std::move(response));
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) != 0) return true;
  while (bytes_ + charge > capacity_ && !lru_.empty()) {
    const Entry& victim = lru_.back();
    bytes_ -= Charge(*victim.value);
    index_.erase(victim.key);
    lru_.pop_back();
    ++evictions_;
  }
  lru_.push_front(Entry{key, std::move(value)});
  index_[key] = lru_.begin();
  bytes_ += charge;
  ++insertions_;
  return true;
}

ResponseCacheStats ResponseCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ResponseCacheStats s;
  s.capacity = capacity_;
  s.bytes = bytes_;
  s.entries = index_.size();
  s.hits = hits_;
  s.misses = misses_;
  s.insertions = insertions_;
  s.evictions = evictions_;
  return s;
}

}  // namespace pyserver
