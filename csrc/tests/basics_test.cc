// Status, CompletionQueue, ResponseOrderer, ModelStats, GatherCopy.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "pyserver/completion_queue.h"
#include "pyserver/gather.h"
#include "pyserver/model_stats.h"
#include "pyserver/response_orderer.h"
#include "pyserver/status.h"
#include "test_util.h"

namespace pyserver {
namespace {

TEST(Status, CodesAndText) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s(StatusCode::kUnavailable, "Exceeds maximum queue size");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "UNAVAILABLE: Exceeds maximum queue size");
  EXPECT_STREQ(StatusCodeName(StatusCode::kInvalidArg), "INVALID_ARG");
  EXPECT_STREQ(StatusCodeName(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_EQ(static_cast<int>(StatusCode::kCancelled), 8);
}

TEST(CompletionQueue, SignalsOnlyWhenEmpty) {
  testing::Harness h;
  EXPECT_FALSE(h.completions->WaitReadable(0));
  h.completions->Push({1, StatusCode::kOk, ""});
  h.completions->Push({2, StatusCode::kOk, ""});
  h.completions->Push({3, StatusCode::kInternal, "boom"});
  EXPECT_TRUE(h.completions->WaitReadable(0));
  EXPECT_EQ(h.completions->signal_count(), 1u);  // coalesced into one wake-up
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[2].token, 3u);
  EXPECT_EQ(items[2].code, StatusCode::kInternal);
  EXPECT_EQ(items[2].message, "boom");
  EXPECT_FALSE(h.completions->WaitReadable(0));  // drained re-arms the fd
  h.completions->Push({4, StatusCode::kOk, ""});
  EXPECT_EQ(h.completions->signal_count(), 2u);
  EXPECT_TRUE(h.completions->WaitReadable(0));
}

TEST(CompletionQueue, HeldSignalWaitsForRelease) {
  testing::Harness h;
  h.completions->PushHoldingSignal({1, StatusCode::kOk, ""});
  h.completions->Push({2, StatusCode::kOk, ""});  // not empty: no signal of its own
  EXPECT_FALSE(h.completions->WaitReadable(0));
  EXPECT_EQ(h.completions->signal_count(), 0u);
  h.completions->ReleaseHeldSignal();
  EXPECT_TRUE(h.completions->WaitReadable(0));
  h.completions->ReleaseHeldSignal();  // owed once only
  EXPECT_EQ(h.completions->signal_count(), 1u);
  EXPECT_EQ(h.Drain().size(), 2u);

  // A loop that drained on its own is owed nothing.
  h.completions->PushHoldingSignal({3, StatusCode::kOk, ""});
  EXPECT_EQ(h.Drain().size(), 1u);
  h.completions->ReleaseHeldSignal();
  EXPECT_FALSE(h.completions->WaitReadable(0));
  EXPECT_EQ(h.completions->signal_count(), 1u);

  // Onto a queue already signalled, a held push changes nothing.
  h.completions->Push({4, StatusCode::kOk, ""});
  h.completions->PushHoldingSignal({5, StatusCode::kOk, ""});
  EXPECT_TRUE(h.completions->WaitReadable(0));
  h.completions->ReleaseHeldSignal();
  EXPECT_EQ(h.completions->signal_count(), 2u);
}

TEST(CompletionQueue, ConcurrentProducersLoseNothing) {
  testing::Harness h;
  constexpr int kThreads = 4, kPerThread = 5000;
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&h, t] {
      for (int i = 0; i < kPerThread; ++i) {
        h.completions->Push({static_cast<Token>(t * kPerThread + i), StatusCode::kOk, ""});
      }
    });
  }
  std::vector<Completion> got;
  while (got.size() < static_cast<size_t>(kThreads * kPerThread)) {
    if (h.completions->WaitReadable(1000000000)) h.completions->Drain(&got);
  }
  for (auto& p : producers) p.join();
  h.completions->Drain(&got);
  EXPECT_EQ(got.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<bool> seen(kThreads * kPerThread, false);
  for (auto& c : got) seen[c.token] = true;
  for (bool s : seen) EXPECT_TRUE(s);
}

TEST(ResponseOrderer, ReleasesInSequence) {
  testing::Harness h;
  ResponseOrderer orderer(h.completions.get());
  orderer.Complete(2, {102, StatusCode::kOk, ""});
  orderer.Complete(1, {101, StatusCode::kOk, ""});
  EXPECT_EQ(orderer.HeldCount(), 2u);
  EXPECT_TRUE(h.Drain().empty());
  orderer.Complete(0, {100, StatusCode::kOk, ""});
  auto items = h.Drain();
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].token, 100u);
  EXPECT_EQ(items[1].token, 101u);
  EXPECT_EQ(items[2].token, 102u);
  orderer.Complete(3, {103, StatusCode::kOk, ""});
  EXPECT_EQ(h.Drain().size(), 1u);
}

TEST(ModelStats, CountsAndBatchTable) {
  ModelStats stats;
  stats.RecordSuccess(100, 10, 20, 30, 40);
  stats.RecordSuccess(200, 20, 20, 30, 40);
  stats.RecordFailure(50, FailureReason::kRejected);
  stats.RecordExecution(2, 20, 30, 40);
  stats.RecordExecution(2, 2, 3, 4);
  stats.RecordExecution(8, 1, 1, 1);
  stats.AddPending(3);
  stats.AddPending(-1);
  auto s = stats.Snapshot();
  EXPECT_EQ(s.success.count, 2u);
  EXPECT_EQ(s.success.ns, 300u);
  EXPECT_EQ(s.queue.ns, 30u);
  EXPECT_EQ(s.fail.count, 1u);
  EXPECT_EQ(s.fail_by_reason[static_cast<int>(FailureReason::kRejected)], 1u);
  EXPECT_EQ(s.inference_count, 12u);
  EXPECT_EQ(s.execution_count, 3u);
  EXPECT_EQ(s.pending_count, 2);
  ASSERT_EQ(s.batch_stats.size(), 2u);
  EXPECT_EQ(s.batch_stats[2].compute_infer.count, 2u);
  EXPECT_EQ(s.batch_stats[2].compute_infer.ns, 33u);
  EXPECT_GT(s.last_inference_ms, 0u);
}

TEST(Gather, CopiesBackToBack) {
  const char a[] = "abc", b[] = "", c[] = "defg";
  const void* srcs[] = {a, b, c};
  size_t sizes[] = {3, 0, 4};
  char out[8] = {0};
  EXPECT_EQ(GatherCopy(srcs, sizes, 3, out), 7u);
  EXPECT_EQ(std::string(out, 7), "abcdefg");
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

TEST(LatencySummary, QuantilesOverTheWindow) {
  LatencySummary s(100, 1000);
  for (uint64_t v = 1; v <= 10; ++v) s.Record(500, v * 10);
  uint64_t count, sum;
  auto q = s.Quantiles({0.5, 0.9, 1.0, 0.0}, 600, &count, &sum);
  EXPECT_EQ(count, 10u);
  EXPECT_EQ(sum, 550u);
  EXPECT_EQ(q, (std::vector<uint64_t>{50, 90, 100, 10}));
  // Samples older than max_age leave the quantiles, not the totals.
  q = s.Quantiles({0.5}, 5000, &count, &sum);
  EXPECT_EQ(q[0], 0u);
  EXPECT_EQ(count, 10u);
}

TEST(LatencySummary, RingKeepsTheNewest) {
  LatencySummary s(4, 1000000);
  for (uint64_t v = 1; v <= 8; ++v) s.Record(1, v);
  uint64_t count, sum;
  auto q = s.Quantiles({0.0, 1.0}, 2, &count, &sum);
  EXPECT_EQ(q, (std::vector<uint64_t>{5, 8}));
  EXPECT_EQ(count, 8u);
}

TEST(ModelStats, SummariesOnlyWhenEnabled) {
  ModelStats stats;
  stats.RecordSuccess(100, 10, 1, 2, 3);
  uint64_t count, sum;
  stats.SummaryQuantiles(SummaryKind::kRequest, {0.5}, &count, &sum);
  EXPECT_EQ(count, 0u);
  stats.EnableSummaries();
  stats.RecordSuccess(200, 20, 1, 2, 3);
  stats.RecordSuccess(400, 40, 1, 2, 3);
  auto q = stats.SummaryQuantiles(SummaryKind::kQueue, {0.5, 1.0}, &count, &sum);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(sum, 60u);
  EXPECT_EQ(q, (std::vector<uint64_t>{20, 40}));
}

}  // namespace
}  // namespace pyserver

namespace pyserver {
namespace {

TEST(ModelStatsResponses, PerIndexOutcomes) {
  ModelStats stats;
  stats.RecordResponse(0, ResponseOutcome::kSuccess, 100, 10);
  stats.RecordResponse(0, ResponseOutcome::kSuccess, 200, 20);
  stats.RecordResponse(1, ResponseOutcome::kFail, 50, 5);
  stats.RecordResponse(2, ResponseOutcome::kEmpty, 7, 0);
  ModelStatsSnapshot s = stats.Snapshot();
  ASSERT_EQ(s.response_stats.size(), 3u);
  EXPECT_EQ(s.response_stats[0].success.count, 2u);
  EXPECT_EQ(s.response_stats[0].success.ns, 330u);
  EXPECT_EQ(s.response_stats[0].compute_infer.ns, 300u);
  EXPECT_EQ(s.response_stats[0].compute_output.ns, 30u);
  EXPECT_EQ(s.response_stats[1].fail.count, 1u);
  EXPECT_EQ(s.response_stats[1].success.count, 0u);
  EXPECT_EQ(s.response_stats[2].empty_response.count, 1u);
  EXPECT_EQ(s.response_stats[2].cancel.count, 0u);
}

}  // namespace
}  // namespace pyserver

TEST(LatencyHistogram, BucketsAreInclusiveUpperBounds) {
  pyserver::LatencyHistogram h({100, 500, 2000, 5000});
  for (uint64_t ms : {0, 100, 101, 500, 4999, 5000, 5001, 90000}) h.Observe(ms);
  uint64_t count = 0, sum = 0;
  std::vector<uint64_t> buckets = h.Counts(&count, &sum);
  ASSERT_EQ(buckets.size(), 5u);  // four bounds and +Inf
  EXPECT_EQ(buckets[0], 2u);      // 0, 100
  EXPECT_EQ(buckets[1], 2u);      // 101, 500
  EXPECT_EQ(buckets[2], 0u);
  EXPECT_EQ(buckets[3], 2u);      // 4999, 5000
  EXPECT_EQ(buckets[4], 2u);      // past the last bound
  EXPECT_EQ(count, 8u);
  EXPECT_EQ(sum, 0u + 100 + 101 + 500 + 4999 + 5000 + 5001 + 90000);
}

TEST(ModelStats, FirstResponseHistogramFromCompletions) {
  pyserver::ModelStats stats;
  stats.RecordSuccess(3000000000ull, 0, 0, 0, 0);  // before it is enabled: not seen
  EXPECT_EQ(stats.first_response_histogram(), nullptr);
  stats.EnableFirstResponseHistogram({100, 500}, false);
  stats.RecordSuccess(150999999ull, 0, 0, 0, 0);   // 150 ms, floored
  stats.RecordFailure(20000000ull, pyserver::FailureReason::kRejected);
  stats.RecordCacheHit(700000000ull, 1000);
  uint64_t count = 0, sum = 0;
  std::vector<uint64_t> buckets = stats.first_response_histogram()->Counts(&count, &sum);
  EXPECT_EQ(buckets, (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(sum, 150u + 20 + 700);
}

TEST(ModelStats, FirstResponseHistogramFromTheCaller) {
  pyserver::ModelStats stats;
  stats.EnableFirstResponseHistogram({10}, true);
  stats.RecordSuccess(50000000ull, 0, 0, 0, 0);  // a decoupled request's end: not its first response
  stats.ObserveFirstResponse(5000000ull);
  uint64_t count = 0, sum = 0;
  std::vector<uint64_t> buckets = stats.first_response_histogram()->Counts(&count, &sum);
  EXPECT_EQ(buckets, (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(sum, 5u);
}
