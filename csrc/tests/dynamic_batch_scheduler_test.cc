// The dynamic batcher's rules, one test each. Requests are queued before an
// instance asks for a batch (as with TRITONSERVER_DELAY_SCHEDULER), so the
// outcome is deterministic; timing checks use generous margins.
#include "pyserver/dynamic_batch_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "pyserver/clock.h"
#include "pyserver/pass_through_scheduler.h"
#include "test_util.h"

namespace pyserver {
namespace {

using testing::Harness;
using testing::Req;
using testing::SleepMs;
using testing::Tokens;

constexpr uint64_t kLongDelayUs = 10 * 1000 * 1000;  // never reached in a test

std::unique_ptr<Scheduler> Make(Harness& h, DynamicBatcherConfig config) {
  std::unique_ptr<Scheduler> s;
  Status st = DynamicBatchScheduler::Create(config, h.stats, h.completions, &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

void Enqueue(Scheduler* s, RequestInfo info, uint64_t* id = nullptr) {
  uint64_t ignored;
  Status st = s->Enqueue(info, id ? id : &ignored);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

double SecondsSince(uint64_t start_ns) { return (NowNs() - start_ns) / 1e9; }

TEST(DynamicBatcher, RejectsBadConfig) {
  Harness h;
  std::unique_ptr<Scheduler> s;
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  c.preferred_batch_sizes = {8};
  EXPECT_EQ(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).code(),
            StatusCode::kInvalidArg);
  c.preferred_batch_sizes = {2};
  c.priority_levels = 3;
  c.default_priority_level = 4;
  EXPECT_EQ(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).code(),
            StatusCode::kInvalidArg);
}

TEST(DynamicBatcher, PreferredSizeIsSentAtOnce) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  for (Token t = 1; t <= 5; ++t) Enqueue(s.get(), Req(t));
  uint64_t start = NowNs();
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2, 3, 4}));
  EXPECT_EQ(b.batch_size, 4u);
  EXPECT_EQ(s->QueuedCount(), 1u);
}

TEST(DynamicBatcher, LargestReachablePreferredSizeWins) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {2, 6};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  for (Token t = 1; t <= 6; ++t) Enqueue(s.get(), Req(t));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 6u);
}

TEST(DynamicBatcher, PreferredCountsRequestBatchSizes) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1, 3));
  Enqueue(s.get(), Req(2, 1));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  EXPECT_EQ(b.batch_size, 4u);
}

TEST(DynamicBatcher, CompleteAndNextHoldsTheWakeOnlyForAReadyBatch) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {2};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  for (Token t = 1; t <= 3; ++t) Enqueue(s.get(), Req(t));
  Batch first, next;
  ASSERT_TRUE(s->NextBatch(&first));
  EXPECT_EQ(Tokens(first), (std::vector<Token>{1, 2}));
  // Request 3 alone is no batch yet (its delay runs): the loop is woken
  // for token 10 before the instance waits.
  std::thread instance([&] {
    bool held = true;
    EXPECT_TRUE(s->CompleteAndNext(first, BatchTimes{}, 10, Status::Ok(), &next, &held));
    EXPECT_FALSE(held);
  });
  EXPECT_TRUE(h.completions->WaitReadable(5000000000ull));
  EXPECT_EQ(h.Drain().size(), 1u);
  Enqueue(s.get(), Req(4));  // the preferred size: sent at once
  instance.join();
  EXPECT_EQ(Tokens(next), (std::vector<Token>{3, 4}));

  // A ready batch: the wake for token 11 waits for ReleaseHeldSignal.
  Enqueue(s.get(), Req(5));
  Enqueue(s.get(), Req(6));
  Batch third;
  bool held = false;
  ASSERT_TRUE(s->CompleteAndNext(next, BatchTimes{}, 11, Status::Ok(), &third, &held));
  EXPECT_TRUE(held);
  EXPECT_EQ(Tokens(third), (std::vector<Token>{5, 6}));
  EXPECT_FALSE(h.completions->WaitReadable(0));
  h.completions->ReleaseHeldSignal();
  EXPECT_TRUE(h.completions->WaitReadable(0));
}

TEST(DynamicBatcher, WaitsForDelayThenSendsWhatIsQueued) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = 100 * 1000;  // 100 ms
  auto s = Make(h, c);
  uint64_t start = NowNs();
  for (Token t = 1; t <= 3; ++t) Enqueue(s.get(), Req(t));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  double waited = SecondsSince(start);
  EXPECT_GE(waited, 0.095);
  EXPECT_LT(waited, 2.0);
  EXPECT_EQ(b.batch_size, 3u);
}

TEST(DynamicBatcher, SendsLargerThanPreferredOnceDelayExceeded) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {2};
  c.max_queue_delay_us = 20 * 1000;
  auto s = Make(h, c);
  for (Token t = 1; t <= 5; ++t) Enqueue(s.get(), Req(t));
  SleepMs(40);
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 5u);
}

TEST(DynamicBatcher, BeforeDelayPreferredSizeIsPreferred) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {2};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  for (Token t = 1; t <= 5; ++t) Enqueue(s.get(), Req(t));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 2u);
}

TEST(DynamicBatcher, NoDelayTakesEverythingUpToMaxBatchSize) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  auto s = Make(h, c);
  for (Token t = 1; t <= 12; ++t) Enqueue(s.get(), Req(t));
  Batch b1, b2;
  ASSERT_TRUE(s->NextBatch(&b1));
  ASSERT_TRUE(s->NextBatch(&b2));
  EXPECT_EQ(b1.batch_size, 8u);
  EXPECT_EQ(b2.batch_size, 4u);
}

TEST(DynamicBatcher, RequestsAreNeverSplit) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1, 5));
  Enqueue(s.get(), Req(2, 5));
  Batch b1, b2;
  ASSERT_TRUE(s->NextBatch(&b1));
  ASSERT_TRUE(s->NextBatch(&b2));
  EXPECT_EQ(Tokens(b1), std::vector<Token>{1});
  EXPECT_EQ(Tokens(b2), std::vector<Token>{2});
}

TEST(DynamicBatcher, ArrivalReachingPreferredWakesWaitingInstance) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    s->NextBatch(&b);
    return b.batch_size;
  });
  SleepMs(30);
  EXPECT_EQ(fut.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  uint64_t start = NowNs();
  for (Token t = 2; t <= 4; ++t) Enqueue(s.get(), Req(t));
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(fut.get(), 4u);
}

TEST(DynamicBatcher, PriorityLevelsServeLowestLevelFirst) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.priority_levels = 3;
  c.default_priority_level = 3;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1, 1, 0));   // default -> level 3
  Enqueue(s.get(), Req(2, 1, 2));
  Enqueue(s.get(), Req(3, 1, 1));
  Enqueue(s.get(), Req(4, 1, 9));   // out of range -> default level
  Enqueue(s.get(), Req(5, 1, 1));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{3, 5, 2, 1, 4}));
}

TEST(DynamicBatcher, MaxQueueSizeRejectsWithUnavailable) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.default_policy.max_queue_size = 2;
  auto s = Make(h, c);
  uint64_t id;
  EXPECT_TRUE(s->Enqueue(Req(1), &id).ok());
  EXPECT_TRUE(s->Enqueue(Req(2), &id).ok());
  Status st = s->Enqueue(Req(3), &id);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "Exceeds maximum queue size");
  EXPECT_EQ(h.stats->Snapshot().pending_count, 2);
}

TEST(DynamicBatcher, PerLevelPolicyAppliesToItsLevel) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.priority_levels = 2;
  c.default_priority_level = 2;
  QueuePolicy small;
  small.max_queue_size = 1;
  c.priority_policies[1] = small;
  auto s = Make(h, c);
  uint64_t id;
  EXPECT_TRUE(s->Enqueue(Req(1, 1, 1), &id).ok());
  EXPECT_EQ(s->Enqueue(Req(2, 1, 1), &id).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(s->Enqueue(Req(3, 1, 2), &id).ok());
  EXPECT_TRUE(s->Enqueue(Req(4, 1, 2), &id).ok());
}

TEST(DynamicBatcher, ExpiredRequestIsRejected) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  c.default_policy.default_timeout_us = 30 * 1000;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(7));
  std::thread instance([&] {
    Batch b;
    EXPECT_FALSE(s->NextBatch(&b));  // nothing to run; released by Stop()
  });
  ASSERT_TRUE(h.completions->WaitReadable(3000000000ull));
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].token, 7u);
  EXPECT_EQ(items[0].code, StatusCode::kUnavailable);
  EXPECT_EQ(items[0].message, "Request timeout expired");
  auto snap = h.stats->Snapshot();
  EXPECT_EQ(snap.fail_by_reason[static_cast<int>(FailureReason::kRejected)], 1u);
  EXPECT_EQ(snap.pending_count, 0);
  s->Stop();
  instance.join();
}

TEST(DynamicBatcher, RequestExpiresWhileEveryInstanceIsBusy) {
  // Triton's batcher fails a request when its own timeout passes, not when
  // an instance next asks for work: here no instance ever asks again.
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 1;
  c.default_policy.allow_timeout_override = true;
  c.default_policy.default_timeout_us = 60 * 1000 * 1000;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  Batch running;
  ASSERT_TRUE(s->NextBatch(&running));  // the one instance is now busy
  RequestInfo own = Req(2);
  own.timeout_us = 50 * 1000;  // shorter than the policy's default
  const uint64_t start = NowNs();
  Enqueue(s.get(), own);
  Enqueue(s.get(), Req(3));  // the policy's default: still queued at the end
  ASSERT_TRUE(h.completions->WaitReadable(3000000000ull));
  const double waited = SecondsSince(start);
  EXPECT_GE(waited, 0.045);
  EXPECT_LT(waited, 2.0);
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].token, 2u);
  EXPECT_EQ(items[0].message, "Request timeout expired");
  EXPECT_EQ(s->QueuedCount(), 1u);
  EXPECT_EQ(h.stats->Snapshot().pending_count, 1);
  s->Stop();
}

TEST(DynamicBatcher, ExpiredRequestUnderDelayPolicyGoesBehind) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 1;
  c.default_policy.timeout_action = QueuePolicy::TimeoutAction::kDelay;
  c.default_policy.default_timeout_us = 10 * 1000;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  SleepMs(30);
  Enqueue(s.get(), Req(2));
  Batch b1, b2;
  ASSERT_TRUE(s->NextBatch(&b1));
  ASSERT_TRUE(s->NextBatch(&b2));
  EXPECT_EQ(Tokens(b1), std::vector<Token>{2});
  EXPECT_EQ(Tokens(b2), std::vector<Token>{1});
  EXPECT_TRUE(h.Drain().empty());  // delayed, never rejected
}

TEST(DynamicBatcher, TimeoutOverrideOnlyShortens) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.default_policy.allow_timeout_override = true;  // default timeout 0
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1, 1, 0, 1000));  // 1 ms asked, but no default: ignored
  SleepMs(20);
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{1});

  Harness h2;
  c.default_policy.default_timeout_us = 5 * 1000 * 1000;
  auto s2 = Make(h2, c);
  Enqueue(s2.get(), Req(2, 1, 0, 1000));  // shortens 5 s to 1 ms
  Enqueue(s2.get(), Req(3, 1, 0, 0));     // keeps 5 s
  SleepMs(20);
  ASSERT_TRUE(s2->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{3});
  auto items = h2.Drain();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].token, 2u);

  Harness h3;
  c.default_policy.allow_timeout_override = false;
  auto s3 = Make(h3, c);
  Enqueue(s3.get(), Req(4, 1, 0, 1000));  // override not allowed: 5 s applies
  SleepMs(20);
  ASSERT_TRUE(s3->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{4});
}

TEST(DynamicBatcher, DifferentShapesNeverShareABatch) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.enforce_equal_shapes = true;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1, 1, 0, 0, 11));
  Enqueue(s.get(), Req(2, 1, 0, 0, 11));
  Enqueue(s.get(), Req(3, 1, 0, 0, 22));
  Enqueue(s.get(), Req(4, 1, 0, 0, 11));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{3});
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{4});
}

TEST(DynamicBatcher, RaggedBatchIgnoresShapes) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.enforce_equal_shapes = false;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1, 1, 0, 0, 11));
  Enqueue(s.get(), Req(2, 1, 0, 0, 22));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 2u);
}

TEST(DynamicBatcher, CancelRemovesQueuedRequest) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  auto s = Make(h, c);
  uint64_t id1, id2;
  Enqueue(s.get(), Req(1), &id1);
  Enqueue(s.get(), Req(2), &id2);
  EXPECT_TRUE(s->Cancel(id1));
  EXPECT_FALSE(s->Cancel(id1));
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].token, 1u);
  EXPECT_EQ(items[0].code, StatusCode::kCancelled);
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{2});
  EXPECT_FALSE(s->Cancel(id2));  // already taken by an instance
  EXPECT_EQ(h.stats->Snapshot().fail_by_reason[static_cast<int>(FailureReason::kCanceled)], 1u);
}

TEST(DynamicBatcher, CancelFlagsARunningRequestThatIsWatched) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  auto s = Make(h, c);
  uint64_t id1, id2;
  Enqueue(s.get(), Req(1), &id1);
  Enqueue(s.get(), Req(2), &id2);
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  auto running = std::make_shared<std::atomic<bool>>(false);
  auto unwatched = std::make_shared<std::atomic<bool>>(false);
  s->WatchRunning(id1, running);
  EXPECT_FALSE(s->Cancel(id1));  // not queued: nothing completes, its flag is set
  EXPECT_TRUE(running->load());
  s->WatchRunning(id2, unwatched);
  s->UnwatchRunning(id2);
  EXPECT_FALSE(s->Cancel(id2));
  EXPECT_FALSE(unwatched->load());  // let go before the cancel: untouched
  EXPECT_TRUE(h.Drain().empty());
}

TEST(DynamicBatcher, StopFailsQueuedAndReleasesInstances) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  std::vector<std::thread> instances;
  std::atomic<int> released{0};
  for (int i = 0; i < 3; ++i) {
    instances.emplace_back([&] {
      Batch b;
      if (!s->NextBatch(&b)) released++;
    });
  }
  SleepMs(30);
  s->Stop();
  for (auto& t : instances) t.join();
  EXPECT_EQ(released.load(), 3);
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].code, StatusCode::kUnavailable);
  uint64_t id;
  Status st = s->Enqueue(Req(2), &id);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("Server is stopping"), std::string::npos);
}

TEST(DynamicBatcher, DelaySchedulerHookWaitsForCount) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.delay_scheduler_count = 3;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    s->NextBatch(&b);
    return b.batch_size;
  });
  SleepMs(50);
  EXPECT_EQ(fut.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  Enqueue(s.get(), Req(2));
  Enqueue(s.get(), Req(3));
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), 3u);
  // The hook holds only once: the next request goes straight through.
  Enqueue(s.get(), Req(4));
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 1u);
}

TEST(DynamicBatcher, EagerPolicyTakesQueuedWorkAtOnce) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  c.eager = true;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  uint64_t start = NowNs();
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(b.batch_size, 1u);
  for (Token t = 2; t <= 11; ++t) Enqueue(s.get(), Req(t));
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 8u);  // under load it still batches
}

TEST(DynamicBatcher, ManyInstancesEachRequestExactlyOnce) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  c.max_queue_delay_us = 200;
  auto s = Make(h, c);
  std::mutex mu;
  std::multiset<Token> seen;
  std::vector<std::thread> instances;
  for (int i = 0; i < 4; ++i) {
    instances.emplace_back([&] {
      Batch b;
      while (s->NextBatch(&b)) {
        EXPECT_LE(b.batch_size, 4u);
        std::lock_guard<std::mutex> lock(mu);
        for (auto t : Tokens(b)) seen.insert(t);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < 500; ++i) Enqueue(s.get(), Req(p * 1000 + i + 1));
    });
  }
  for (auto& t : producers) t.join();
  for (int i = 0; i < 500 && s->QueuedCount() > 0; ++i) SleepMs(2);
  SleepMs(20);
  s->Stop();
  for (auto& t : instances) t.join();
  EXPECT_EQ(seen.size(), 2000u);
  for (int p = 0; p < 4; ++p)
    for (int i = 0; i < 500; ++i) EXPECT_EQ(seen.count(p * 1000 + i + 1), 1u);
}

TEST(DynamicBatcher, CompleteBatchRecordsStatsAndPreservesOrder) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 2;
  c.preserve_ordering = true;
  auto s = Make(h, c);
  for (Token t = 1; t <= 4; ++t) Enqueue(s.get(), Req(t));
  EXPECT_EQ(h.stats->Snapshot().pending_count, 4);
  Batch b1, b2;
  ASSERT_TRUE(s->NextBatch(&b1));
  ASSERT_TRUE(s->NextBatch(&b2));
  EXPECT_EQ(h.stats->Snapshot().pending_count, 0);
  BatchTimes t;
  t.compute_start_ns = NowNs();
  t.compute_input_end_ns = t.compute_start_ns + 10;
  t.compute_output_start_ns = t.compute_start_ns + 30;
  t.compute_end_ns = t.compute_start_ns + 60;
  s->CompleteBatch(b2, t, 200, Status::Ok());
  EXPECT_TRUE(h.Drain().empty());  // held until the first batch completes
  s->CompleteBatch(b1, t, 100, Status(StatusCode::kInternal, "model failed"));
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].token, 100u);
  EXPECT_EQ(items[0].code, StatusCode::kInternal);
  EXPECT_EQ(items[1].token, 200u);
  auto snap = h.stats->Snapshot();
  EXPECT_EQ(snap.success.count, 2u);
  EXPECT_EQ(snap.fail.count, 2u);
  EXPECT_EQ(snap.execution_count, 1u);
  EXPECT_EQ(snap.inference_count, 2u);
  EXPECT_EQ(snap.compute_infer.ns, 40u);
  EXPECT_EQ(snap.batch_stats[2].compute_output.ns, 30u);
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

using testing::Harness;
using testing::Req;
using testing::Tokens;

std::unique_ptr<Scheduler> MakeTopUp(Harness& h, bool preserve) {
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  c.preserve_ordering = preserve;
  c.enforce_equal_shapes = true;
  std::unique_ptr<Scheduler> s;
  EXPECT_TRUE(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  return s;
}

TEST(DynamicBatcher, TopUpGrowsATakenBatchUpToMaxBatchSize) {
  Harness h;
  auto s = MakeTopUp(h, false);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Req(1), &id).ok());
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  EXPECT_EQ(b.batch_size, 1u);
  ASSERT_TRUE(s->Enqueue(Req(2, 2), &id).ok());
  ASSERT_TRUE(s->Enqueue(Req(3, 2), &id).ok());  // would exceed 4
  EXPECT_EQ(s->TopUp(&b), 1u);
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  EXPECT_EQ(b.batch_size, 3u);
  EXPECT_EQ(s->QueuedCount(), 1u);
  EXPECT_EQ(h.stats->Snapshot().pending_count, 1);
}

TEST(DynamicBatcher, TopUpRespectsShapesAndOrdering) {
  Harness h;
  auto s = MakeTopUp(h, false);
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(Req(1, 1, 0, 0, 7), &id).ok());
  Batch b;
  ASSERT_TRUE(s->NextBatch(&b));
  ASSERT_TRUE(s->Enqueue(Req(2, 1, 0, 0, 8), &id).ok());
  EXPECT_EQ(s->TopUp(&b), 0u);  // different shape

  Harness h2;
  auto s2 = MakeTopUp(h2, true);
  ASSERT_TRUE(s2->Enqueue(Req(1), &id).ok());
  ASSERT_TRUE(s2->NextBatch(&b));
  ASSERT_TRUE(s2->Enqueue(Req(2), &id).ok());
  EXPECT_EQ(s2->TopUp(&b), 0u);  // preserve_ordering: never
}

TEST(DynamicBatcher, TryNextBatchSendsWhatIsQueuedWithNoDelay) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  auto s = Make(h, c);
  Batch b;
  EXPECT_FALSE(s->TryNextBatch(&b, nullptr));  // empty: returns at once
  for (Token t = 1; t <= 6; ++t) Enqueue(s.get(), Req(t));
  EXPECT_EQ(h.stats->Snapshot().pending_count, 6);
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2, 3, 4}));
  EXPECT_EQ(b.batch_size, 4u);
  EXPECT_TRUE(b.saturated);
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{5, 6}));
  EXPECT_EQ(h.stats->Snapshot().pending_count, 0);
  EXPECT_FALSE(s->TryNextBatch(&b, nullptr));
}

TEST(DynamicBatcher, TryNextBatchKeepsTheBatchingDelay) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  for (Token t = 1; t <= 3; ++t) Enqueue(s.get(), Req(t));
  Batch b;
  EXPECT_FALSE(s->TryNextBatch(&b, nullptr));  // below the preferred size: it waits
  Enqueue(s.get(), Req(4));
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));  // preferred size reached
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2, 3, 4}));
}

TEST(DynamicBatcher, TryNextBatchSaysWhenTheDelayEnds) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.max_queue_delay_us = 2000;
  auto s = Make(h, c);
  Batch b;
  uint64_t due = 7;
  EXPECT_FALSE(s->TryNextBatch(&b, &due));
  EXPECT_EQ(due, 0u);  // empty: only an arrival makes a batch
  const uint64_t before = NowNs();
  Enqueue(s.get(), Req(1));
  Enqueue(s.get(), Req(2));
  EXPECT_FALSE(s->TryNextBatch(&b, &due));
  // the oldest request's enqueue time plus the delay
  EXPECT_GE(due, before + 2000 * 1000);
  EXPECT_LE(due, NowNs() + 2000 * 1000);
  while (NowNs() < due) {
  }
  ASSERT_TRUE(s->TryNextBatch(&b, &due));  // due: the delay is over
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  EXPECT_EQ(due, 0u);
}

// Whether the wait the loop was told of still holds once `token` is queued.
bool WaitHoldsAfter(Scheduler* s, Token token) {
  uint64_t id;
  bool holds = true;
  Status st = s->EnqueueForTaker(Req(token), &id, &holds);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return holds;
}

// The loop's driver is asked after an enqueue only when the request can
// end the wait TryNextBatch() reported: reaching the next preferred or the
// maximum size, or carrying a deadline. Any other evaluation of the queue
// ends what the taker was told.
TEST(DynamicBatcher, EnqueueSaysWhenTheTakersWaitStillHolds) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.preferred_batch_sizes = {4};
  c.max_queue_delay_us = kLongDelayUs;
  auto s = Make(h, c);
  uint64_t due = 0;
  EXPECT_FALSE(WaitHoldsAfter(s.get(), 1));  // nobody was told to wait yet
  Batch b;
  EXPECT_FALSE(s->TryNextBatch(&b, &due));
  EXPECT_NE(due, 0u);
  EXPECT_TRUE(WaitHoldsAfter(s.get(), 2));  // 2 of the preferred 4: the wait stands
  EXPECT_TRUE(WaitHoldsAfter(s.get(), 3));
  EXPECT_FALSE(WaitHoldsAfter(s.get(), 4));  // the preferred size: a batch forms now
  ASSERT_TRUE(s->TryNextBatch(&b, &due));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2, 3, 4}));

  EXPECT_FALSE(WaitHoldsAfter(s.get(), 5));  // that evaluation sent a batch: no wait told
  EXPECT_FALSE(s->TryNextBatch(&b, &due));
  EXPECT_FALSE(s->TryNextBatch(&b, nullptr));  // asked without a due time
  EXPECT_FALSE(WaitHoldsAfter(s.get(), 6));    // a caller that arms no timer is not waiting
}

TEST(DynamicBatcher, EnqueueNeverHoldsAWaitForSchedulersWithoutOne) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 8;  // no delay: TryNextBatch sends what is queued
  auto s = Make(h, c);
  uint64_t due = 0;
  Batch b;
  EXPECT_FALSE(s->TryNextBatch(&b, &due));
  EXPECT_FALSE(WaitHoldsAfter(s.get(), 1));
  // requests with a deadline (a queue policy's timeout) may expire first
  Harness h_timed;
  c.max_queue_delay_us = kLongDelayUs;
  c.default_policy.default_timeout_us = kLongDelayUs;
  auto timed = Make(h_timed, c);
  Enqueue(timed.get(), Req(1));
  EXPECT_FALSE(timed->TryNextBatch(&b, &due));
  EXPECT_NE(due, 0u);
  EXPECT_FALSE(WaitHoldsAfter(timed.get(), 2));
  timed->Stop();
  std::unique_ptr<Scheduler> plain(new PassThroughScheduler(h.stats, h.completions, false));
  EXPECT_FALSE(WaitHoldsAfter(plain.get(), 2));
  plain->Stop();
}

TEST(DynamicBatcher, TryNextBatchRejectsExpiredRequests) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  c.default_policy.default_timeout_us = 1000;
  auto s = Make(h, c);
  Enqueue(s.get(), Req(1));
  SleepMs(20);
  Batch b;
  EXPECT_FALSE(s->TryNextBatch(&b, nullptr));
  std::vector<Completion> done = h.Drain();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].token, 1u);
  EXPECT_EQ(done[0].code, StatusCode::kUnavailable);
}

TEST(DynamicBatcher, ParkedLeaderLeavesBatchesToTheLoop) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  auto s = Make(h, c);
  s->ParkInstances(true);
  std::atomic<int> taken{0};
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    bool got = s->NextBatch(&b);
    if (got) taken.fetch_add(1);
    return got ? Tokens(b) : std::vector<Token>{};
  });
  SleepMs(20);
  Enqueue(s.get(), Req(1));
  Enqueue(s.get(), Req(2));
  SleepMs(50);
  EXPECT_EQ(taken.load(), 0);
  Batch b;
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  Enqueue(s.get(), Req(3));
  s->ParkInstances(false);
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), (std::vector<Token>{3}));
}

TEST(DynamicBatcher, StopReleasesParkedLeader) {
  Harness h;
  DynamicBatcherConfig c;
  c.max_batch_size = 4;
  auto s = Make(h, c);
  s->ParkInstances(true);
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    return s->NextBatch(&b);
  });
  SleepMs(20);
  s->Stop();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(fut.get());
}

}  // namespace
}  // namespace pyserver
