// ResponseCache: Triton's response cache ("local" cache), one per server and
// shared by every model that sets response_cache { enable: true }.
//
// A request is identified by a 128-bit XXH3 hash of the model name and
// version, the requested outputs and every input's name, datatype, shape and
// bytes (RequestHasher, fed with the GIL released). The cached value is the
// serialized response, opaque here. Entries are evicted least recently used
// first to keep the cached bytes within the configured size; a response
// larger than the whole cache is not stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace pyserver {

struct CacheKey {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const CacheKey& other) const {
    return low == other.low && high == other.high;
  }
};

// Incremental XXH3-128 over the pieces of a request.
class RequestHasher {
 public:
  RequestHasher();
  ~RequestHasher();
  RequestHasher(const RequestHasher&) = delete;
  RequestHasher& operator=(const RequestHasher&) = delete;

  void Update(const void* data, size_t n);
  // A length or dimension, fixed-width so "ab"+"c" and "a"+"bc" differ when
  // each piece is preceded by its length.
  void UpdateU64(uint64_t value);
  // Length-prefixed bytes.
  void UpdateField(const void* data, size_t n) {
    UpdateU64(n);
    Update(data, n);
  }
  CacheKey Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

struct ResponseCacheStats {
  size_t capacity = 0;
  size_t bytes = 0;       // cached values plus per-entry overhead
  size_t entries = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t insertions = 0;
  uint64_t evictions = 0;
};

class ResponseCache {
 public:
  // Bookkeeping charged per entry on top of its value.
  static constexpr size_t kEntryOverhead = 64;

  explicit ResponseCache(size_t capacity);

  // The cached response for key (and it becomes the most recently used), or
  // nullptr on a miss. The value stays valid after eviction.
  std::shared_ptr<const std::string> Lookup(const CacheKey& key);
  // Stores the response under key, evicting older entries to make room.
  // False when it cannot fit at all; an existing entry is kept as is (the
  // same request gives the same response).
  bool Insert(const CacheKey& key, std::string response);
  ResponseCacheStats stats() const;
  size_t capacity() const { return capacity_; }

 private:
  struct KeyHash {
    size_t operator()(const CacheKey& k) const { return static_cast<size_t>(k.low); }
  };
  struct Entry {
    CacheKey key;
    std::shared_ptr<const std::string> value;
  };
  static size_t Charge(const std::string& value) { return value.size() + kEntryOverhead; }

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<CacheKey, std::list<Entry>::iterator, KeyHash> index_;
  size_t bytes_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  uint64_t insertions_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace pyserver
