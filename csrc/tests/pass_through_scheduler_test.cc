#include "pyserver/pass_through_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "test_util.h"

namespace pyserver {
namespace {

using testing::Harness;
using testing::Req;
using testing::Tokens;

TEST(PassThrough, OneRequestPerBatchInArrivalOrder) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(1, 3), &id).ok());
  ASSERT_TRUE(s.Enqueue(Req(2), &id).ok());
  Batch b;
  ASSERT_TRUE(s.NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{1});
  EXPECT_EQ(b.batch_size, 3u);
  ASSERT_TRUE(s.NextBatch(&b));
  EXPECT_EQ(Tokens(b), std::vector<Token>{2});
}

TEST(PassThrough, TryNextBatchNeverWaits) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  Batch b;
  EXPECT_FALSE(s.TryNextBatch(&b, nullptr));  // empty: returns at once
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(4, 2), &id).ok());
  ASSERT_TRUE(s.Enqueue(Req(5), &id).ok());
  EXPECT_EQ(h.stats->Snapshot().pending_count, 2);
  ASSERT_TRUE(s.TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), std::vector<Token>{4});
  EXPECT_EQ(b.batch_size, 2u);
  EXPECT_EQ(h.stats->Snapshot().pending_count, 1);
  s.Stop();  // what is still queued fails; nothing more is handed out
  EXPECT_FALSE(s.TryNextBatch(&b, nullptr));
  EXPECT_EQ(s.QueuedCount(), 0u);
}

TEST(PassThrough, RecordBatchCountsWithoutCompleting) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(7), &id).ok());
  Batch b;
  ASSERT_TRUE(s.TryNextBatch(&b, nullptr));
  BatchTimes t;
  t.compute_start_ns = b.dequeue_ns + 10;
  t.compute_input_end_ns = b.dequeue_ns + 20;
  t.compute_output_start_ns = b.dequeue_ns + 30;
  t.compute_end_ns = b.dequeue_ns + 40;
  s.RecordBatch(b, t, Status::Ok());
  ModelStatsSnapshot snap = h.stats->Snapshot();
  EXPECT_EQ(snap.success.count, 1u);
  EXPECT_EQ(snap.execution_count, 1u);
  EXPECT_EQ(snap.compute_infer.ns, 10u);
  EXPECT_TRUE(h.Drain().empty());  // the caller answers the requests itself
}

TEST(PassThrough, CompleteAndNextHoldsTheWakeWhileWorkIsReady) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(1), &id).ok());
  ASSERT_TRUE(s.Enqueue(Req(2), &id).ok());
  Batch first, next;
  ASSERT_TRUE(s.NextBatch(&first));
  BatchTimes t;
  bool held = false;
  // Request 2 is ready: the wake-up for token 10 waits for the caller.
  ASSERT_TRUE(s.CompleteAndNext(first, t, 10, Status::Ok(), &next, &held));
  EXPECT_TRUE(held);
  EXPECT_EQ(Tokens(next), std::vector<Token>{2});
  EXPECT_FALSE(h.completions->WaitReadable(0));
  h.completions->ReleaseHeldSignal();
  EXPECT_TRUE(h.completions->WaitReadable(0));
  auto done = h.Drain();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].token, 10u);
  EXPECT_EQ(h.stats->Snapshot().success.count, 1u);

  // Nothing ready: the loop is woken before the instance blocks.
  std::promise<bool> got;
  std::thread instance([&] {
    Batch last;
    bool held2 = true;
    got.set_value(s.CompleteAndNext(next, t, 11, Status::Ok(), &last, &held2) || held2);
  });
  EXPECT_TRUE(h.completions->WaitReadable(5000000000ull));
  done = h.Drain();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].token, 11u);
  s.Stop();
  instance.join();
  EXPECT_FALSE(got.get_future().get());  // stopped: no batch, nothing held
}

TEST(PassThrough, CompleteAndNextLeavesParkedBatchesToTheLoop) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(1), &id).ok());
  Batch first;
  ASSERT_TRUE(s.NextBatch(&first));
  ASSERT_TRUE(s.Enqueue(Req(2), &id).ok());
  s.ParkInstances(true);
  std::thread instance([&] {
    Batch next;
    bool held = true;
    EXPECT_FALSE(s.CompleteAndNext(first, BatchTimes{}, 10, Status::Ok(), &next, &held));
    EXPECT_FALSE(held);
  });
  EXPECT_TRUE(h.completions->WaitReadable(5000000000ull));  // signalled, not held
  Batch taken;
  ASSERT_TRUE(s.TryNextBatch(&taken, nullptr));  // request 2 was left to the loop
  EXPECT_EQ(Tokens(taken), std::vector<Token>{2});
  s.Stop();
  instance.join();
}

TEST(PassThrough, ParkedInstanceLeavesBatchesToTryNextBatch) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  s.ParkInstances(true);
  std::atomic<int> taken{0};
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    bool got = s.NextBatch(&b);
    if (got) taken.fetch_add(1);
    return got ? Tokens(b)[0] : Token(0);
  });
  testing::SleepMs(20);
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(1), &id).ok());
  testing::SleepMs(50);
  EXPECT_EQ(taken.load(), 0);  // parked: the arrival did not go to the instance
  Batch b;
  ASSERT_TRUE(s.TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), std::vector<Token>{1});
  ASSERT_TRUE(s.Enqueue(Req(2), &id).ok());
  s.ParkInstances(false);  // the instance wakes for what is queued
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), 2u);
}

TEST(PassThrough, StopReleasesParkedInstance) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  s.ParkInstances(true);
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    return s.NextBatch(&b);
  });
  testing::SleepMs(20);
  s.Stop();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(fut.get());
}

TEST(PassThrough, WaitingInstanceWakesOnEnqueue) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  auto fut = std::async(std::launch::async, [&] {
    Batch b;
    return s.NextBatch(&b) ? Tokens(b)[0] : Token(0);
  });
  testing::SleepMs(20);
  uint64_t id;
  ASSERT_TRUE(s.Enqueue(Req(9), &id).ok());
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fut.get(), 9u);
}

TEST(PassThrough, CancelAndStop) {
  Harness h;
  PassThroughScheduler s(h.stats, h.completions, false);
  uint64_t id1, id2;
  ASSERT_TRUE(s.Enqueue(Req(1), &id1).ok());
  ASSERT_TRUE(s.Enqueue(Req(2), &id2).ok());
  EXPECT_TRUE(s.Cancel(id1));
  s.Stop();
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].code, StatusCode::kCancelled);
  EXPECT_EQ(items[1].code, StatusCode::kUnavailable);
  Batch b;
  EXPECT_FALSE(s.NextBatch(&b));
  EXPECT_EQ(h.stats->Snapshot().pending_count, 0);
}

}  // namespace
}  // namespace pyserver
