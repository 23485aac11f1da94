// RequestHasher and ResponseCache: hashing that separates fields, LRU order,
// the byte budget, and concurrent use.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "pyserver/model_stats.h"
#include "pyserver/response_cache.h"

namespace pyserver {
namespace {

CacheKey HashOf(const std::vector<std::string>& fields) {
  RequestHasher h;
  for (const std::string& f : fields) h.UpdateField(f.data(), f.size());
  return h.Digest();
}

CacheKey KeyOf(int i) { return HashOf({"model", std::to_string(i)}); }

TEST(RequestHasher, SameInputSameKeyAndFieldsAreSeparated) {
  EXPECT_EQ(HashOf({"add_sub", "1", "INPUT0"}), HashOf({"add_sub", "1", "INPUT0"}));
  EXPECT_FALSE(HashOf({"ab", "c"}) == HashOf({"a", "bc"}));
  EXPECT_FALSE(HashOf({"add_sub", "1"}) == HashOf({"add_sub", "2"}));
  RequestHasher a, b;
  a.UpdateU64(1);
  b.UpdateU64(256);
  EXPECT_FALSE(a.Digest() == b.Digest());
  // Digest does not consume the state: the same key twice.
  EXPECT_EQ(a.Digest(), a.Digest());
}

TEST(ResponseCache, HitsMissesAndStats) {
  ResponseCache cache(1 << 20);
  EXPECT_EQ(cache.Lookup(KeyOf(1)), nullptr);
  EXPECT_TRUE(cache.Insert(KeyOf(1), "response-1"));
  auto hit = cache.Lookup(KeyOf(1));
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(*hit, "response-1");
  EXPECT_TRUE(cache.Insert(KeyOf(1), "other"));  // kept as first stored
  EXPECT_EQ(*cache.Lookup(KeyOf(1)), "response-1");
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.insertions, 1u);
  EXPECT_EQ(s.bytes, 10 + ResponseCache::kEntryOverhead);
}

TEST(ResponseCache, EvictsLeastRecentlyUsed) {
  const size_t entry = 100 + ResponseCache::kEntryOverhead;
  ResponseCache cache(3 * entry);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(cache.Insert(KeyOf(i), std::string(100, 'a' + i)));
  ASSERT_NE(cache.Lookup(KeyOf(0)), nullptr);  // 0 becomes the most recent
  EXPECT_TRUE(cache.Insert(KeyOf(3), std::string(100, 'd')));  // evicts 1
  EXPECT_NE(cache.Lookup(KeyOf(0)), nullptr);
  EXPECT_EQ(cache.Lookup(KeyOf(1)), nullptr);
  EXPECT_NE(cache.Lookup(KeyOf(2)), nullptr);
  EXPECT_NE(cache.Lookup(KeyOf(3)), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.stats().bytes, cache.capacity());
  // A value held by a reader survives its eviction.
  auto held = cache.Lookup(KeyOf(0));
  EXPECT_TRUE(cache.Insert(KeyOf(9), std::string(3 * 100 + 2 * ResponseCache::kEntryOverhead, 'z')));
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(*held, std::string(100, 'a'));
}

TEST(ResponseCache, TooLargeIsNotStored) {
  ResponseCache cache(1000);
  EXPECT_FALSE(cache.Insert(KeyOf(1), std::string(1000, 'x')));
  EXPECT_EQ(cache.stats().entries, 0u);
  ResponseCache none(0);
  EXPECT_FALSE(none.Insert(KeyOf(1), ""));
}

TEST(ResponseCache, ConcurrentReadersAndWriters) {
  ResponseCache cache(64 * (32 + ResponseCache::kEntryOverhead));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 5000; ++i) {
        CacheKey key = KeyOf((i * 7 + t) % 200);
        auto value = cache.Lookup(key);
        if (value == nullptr) {
          cache.Insert(key, std::string(32, static_cast<char>('a' + (i % 26))));
        } else {
          ASSERT_EQ(value->size(), 32u);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ResponseCacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, 20000u);
  EXPECT_LE(s.bytes, s.capacity);
  EXPECT_LE(s.entries, 64u);
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

TEST(ModelStatsCache, HitIsASuccessWithoutAnInference) {
  ModelStats stats;
  stats.RecordCacheHit(5000, 1200);
  stats.RecordCacheMiss(800);
  ModelStatsSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.success.count, 1u);
  EXPECT_EQ(s.success.ns, 5000u);
  EXPECT_EQ(s.queue.count, 1u);
  EXPECT_EQ(s.cache_hit.count, 1u);
  EXPECT_EQ(s.cache_hit.ns, 1200u);
  EXPECT_EQ(s.cache_miss.count, 1u);
  EXPECT_EQ(s.cache_miss.ns, 800u);
  EXPECT_EQ(s.inference_count, 0u);
  EXPECT_EQ(s.execution_count, 0u);
  EXPECT_GT(s.last_inference_ms, 0u);
}

}  // namespace
}  // namespace pyserver
