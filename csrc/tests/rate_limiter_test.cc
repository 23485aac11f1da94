// RateLimiter: default and explicit resource copies, Triton's errors,
// blocking until resources free up, priority turns, and Stop.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "pyserver/rate_limiter.h"

namespace pyserver {
namespace {

using namespace std::chrono_literals;

void WaitForWaiters(const RateLimiter& limiter, size_t n) {
  for (int i = 0; i < 2000 && limiter.WaitingCount() < n; ++i) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(limiter.WaitingCount(), n);
}

TEST(RateLimiter, CopiesAreTheLargestNeedAndHolderBlocksOthers) {
  RateLimiter limiter({});
  uint64_t a = 0, b = 0, free_one = 0;
  ASSERT_TRUE(limiter.AddInstance({{"R1", false, 2}}, 0, 1, &a).ok());
  ASSERT_TRUE(limiter.AddInstance({{"R1", false, 1}}, 0, 1, &b).ok());
  ASSERT_TRUE(limiter.AddInstance({}, 0, 1, &free_one).ok());
  EXPECT_EQ(limiter.Capacity("R1", 0), 2u);
  EXPECT_EQ(limiter.Capacity("R1", 1), 0u);  // per device
  ASSERT_TRUE(limiter.Acquire(a));
  EXPECT_EQ(limiter.InUse("R1", 0), 2u);
  EXPECT_TRUE(limiter.Acquire(free_one));  // needs nothing: never held back
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    got = limiter.Acquire(b);
  });
  WaitForWaiters(limiter, 1);
  EXPECT_FALSE(got.load());
  limiter.Release(a);
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(limiter.InUse("R1", 0), 1u);
  limiter.Release(b);
  EXPECT_EQ(limiter.InUse("R1", 0), 0u);
}

TEST(RateLimiter, ExplicitCopiesAndTritonsErrors) {
  RateLimiter limiter({{"R1", RateLimiter::kAnyDevice, 3}, {"R2", 1, 5}, {"G", 0, 4}});
  uint64_t id = 0;
  EXPECT_TRUE(limiter.AddInstance({{"R1", false, 3}}, 1, 1, &id).ok());
  EXPECT_EQ(limiter.Capacity("R1", 7), 3u);  // given for every device
  EXPECT_EQ(limiter.Capacity("R2", 1), 5u);
  EXPECT_EQ(limiter.Capacity("R2", 0), 0u);
  EXPECT_TRUE(limiter.AddInstance({{"G", true, 2}}, 3, 1, &id).ok());
  EXPECT_EQ(limiter.Capacity("G", RateLimiter::kGlobal), 4u);  // any device's count
  Status too_few = limiter.AddInstance({{"R2", false, 2}}, 0, 1, &id);
  EXPECT_EQ(too_few.code(), StatusCode::kInvalidArg);
  EXPECT_EQ(too_few.message(),
            "Resource count for \"R2\" is limited to 0 which will prevent scheduling of one or "
            "more model instances, the minimum required count is 2");
  Status both = limiter.AddInstance({{"G", false, 1}}, 0, 1, &id);
  EXPECT_EQ(both.message(),
            "Resource \"G\" is present as both global and device-specific resource in the "
            "model configuration.");
}

TEST(RateLimiter, LowerExecutionsTimesPriorityGoesFirst) {
  RateLimiter limiter({});
  uint64_t holder = 0, fast = 0, slow = 0;
  ASSERT_TRUE(limiter.AddInstance({{"R", false, 1}}, 0, 1, &holder).ok());
  ASSERT_TRUE(limiter.AddInstance({{"R", false, 1}}, 0, 1, &fast).ok());
  ASSERT_TRUE(limiter.AddInstance({{"R", false, 1}}, 0, 2, &slow).ok());
  std::vector<std::string> firsts;
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(limiter.Acquire(holder));
    std::mutex order_mu;
    std::vector<std::string> order;
    auto run = [&](uint64_t id, const char* name) {
      ASSERT_TRUE(limiter.Acquire(id));
      {
        std::lock_guard<std::mutex> lock(order_mu);
        order.push_back(name);
      }
      limiter.Release(id);
    };
    // The slower-priority instance asks first: in a tie it would win.
    std::thread s(run, slow, "slow");
    WaitForWaiters(limiter, 1);
    std::thread f(run, fast, "fast");
    WaitForWaiters(limiter, 2);
    limiter.Release(holder);
    s.join();
    f.join();
    ASSERT_EQ(order.size(), 2u);
    firsts.push_back(order[0]);
  }
  // Round 1: both at 0 executions, the earlier waiter first; then slow's
  // score (executions x 2) is always above fast's.
  EXPECT_EQ(firsts, (std::vector<std::string>{"slow", "fast", "fast", "fast", "fast"}));
}

TEST(RateLimiter, TurnsAreStrictSoLargeNeedsAreNotStarved) {
  RateLimiter limiter({});
  uint64_t small_holder = 0, big = 0, small = 0;
  ASSERT_TRUE(limiter.AddInstance({{"R", false, 1}}, 0, 1, &small_holder).ok());
  ASSERT_TRUE(limiter.AddInstance({{"R", false, 2}}, 0, 1, &big).ok());
  ASSERT_TRUE(limiter.AddInstance({{"R", false, 1}}, 0, 1, &small).ok());
  ASSERT_TRUE(limiter.Acquire(small_holder));  // 1 of 2 copies held
  std::atomic<bool> big_got{false}, small_got{false};
  std::thread b([&] { big_got = limiter.Acquire(big); });
  WaitForWaiters(limiter, 1);
  std::thread s([&] { small_got = limiter.Acquire(small); });
  WaitForWaiters(limiter, 2);
  // One copy is free, enough for `small`, but `big` asked first.
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(small_got.load());
  limiter.Release(small_holder);
  b.join();
  EXPECT_TRUE(big_got.load());
  limiter.Release(big);
  s.join();
  EXPECT_TRUE(small_got.load());
  limiter.Release(small);
}

TEST(RateLimiter, StopWakesWaiters) {
  RateLimiter limiter({});
  uint64_t a = 0, b = 0;
  ASSERT_TRUE(limiter.AddInstance({{"R", true, 1}}, 0, 1, &a).ok());
  ASSERT_TRUE(limiter.AddInstance({{"R", true, 1}}, 1, 1, &b).ok());  // global: one copy
  ASSERT_TRUE(limiter.Acquire(a));
  std::atomic<int> result{-1};
  std::thread waiter([&] { result = limiter.Acquire(b) ? 1 : 0; });
  WaitForWaiters(limiter, 1);
  limiter.Stop();
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_FALSE(limiter.Acquire(a));
  limiter.Release(a);
  limiter.RemoveInstance(a);
  limiter.RemoveInstance(b);
}

}  // namespace
}  // namespace pyserver
