// Custom batching: the dynamic batcher under a BatchStrategy (a fake here),
// and LibraryBatchStrategy over tests/backends_c/volume_batching.c, a
// library built for Triton's custom batching API.
#include "pyserver/triton/batch_strategy.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include "pyserver/dynamic_batch_scheduler.h"
#include "test_util.h"

namespace pyserver {
namespace {

using testing::Harness;
using testing::Req;
using testing::Tokens;

// At most `per_batch` requests per batch; counts the calls it gets.
class CountingStrategy : public BatchStrategy {
 public:
  explicit CountingStrategy(int per_batch) : per_batch_(per_batch) {}
  void BeginBatch() override {
    EXPECT_FALSE(open_);
    open_ = true;
    taken_ = 0;
    ++begun;
  }
  bool Include(const QueuedRequest& request) override {
    EXPECT_TRUE(open_);
    asked.push_back(request.token);
    if (taken_ >= per_batch_) return false;
    ++taken_;
    return true;
  }
  void EndBatch() override {
    EXPECT_TRUE(open_);
    open_ = false;
    ++ended;
  }
  int begun = 0;
  int ended = 0;
  std::vector<Token> asked;

 private:
  const int per_batch_;
  int taken_ = 0;
  bool open_ = false;
};

std::unique_ptr<Scheduler> Make(Harness& h, std::shared_ptr<BatchStrategy> strategy,
                                uint64_t delay_us = 0) {
  DynamicBatcherConfig c;
  c.max_batch_size = 8;
  c.max_queue_delay_us = delay_us;
  c.strategy = std::move(strategy);
  std::unique_ptr<Scheduler> s;
  EXPECT_TRUE(DynamicBatchScheduler::Create(c, h.stats, h.completions, &s).ok());
  return s;
}

void Enqueue(Scheduler* s, RequestInfo info) {
  uint64_t id;
  ASSERT_TRUE(s->Enqueue(info, &id).ok());
}

TEST(CustomBatching, StrategyEndsBatches) {
  Harness h;
  auto strategy = std::make_shared<CountingStrategy>(2);
  auto s = Make(h, strategy);
  for (Token t = 1; t <= 5; ++t) Enqueue(s.get(), Req(t));
  Batch b;
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  EXPECT_TRUE(b.saturated);
  EXPECT_EQ(s->TopUp(&b), 0u);  // the strategy's batch is kept as it chose
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{3, 4}));
  ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{5}));
  EXPECT_EQ(strategy->begun, strategy->ended);
  // asked in queue order, the refused one again at the head of the next batch
  EXPECT_EQ(strategy->asked, (std::vector<Token>{1, 2, 3, 3, 4, 5, 5}));
  s->Stop();
}

TEST(CustomBatching, RefusalSendsAtOnceDespiteTheDelay) {
  Harness h;
  auto s = Make(h, std::make_shared<CountingStrategy>(2), 10 * 1000 * 1000);
  Enqueue(s.get(), Req(1));
  Enqueue(s.get(), Req(2));
  Batch b;
  uint64_t due = 0;
  EXPECT_FALSE(s->TryNextBatch(&b, &due));  // within the delay, nothing refused yet
  EXPECT_NE(due, 0u);
  Enqueue(s.get(), Req(3));
  ASSERT_TRUE(s->TryNextBatch(&b, &due));
  EXPECT_EQ(Tokens(b), (std::vector<Token>{1, 2}));
  s->Stop();
}

TEST(CustomBatching, StopLetsTheStrategyGo) {
  Harness h;
  auto strategy = std::make_shared<CountingStrategy>(2);
  auto s = Make(h, strategy);
  EXPECT_EQ(strategy.use_count(), 2);
  s->Stop();  // the library is finalized once its model lets go too
  EXPECT_EQ(strategy.use_count(), 1);
  Batch b;
  EXPECT_FALSE(s->TryNextBatch(&b, nullptr));
}

TEST(CustomBatching, ARefusedFirstRequestRunsAlone) {
  Harness h;
  auto s = Make(h, std::make_shared<CountingStrategy>(0));
  for (Token t = 1; t <= 3; ++t) Enqueue(s.get(), Req(t));
  Batch b;
  for (Token t = 1; t <= 3; ++t) {
    ASSERT_TRUE(s->TryNextBatch(&b, nullptr));
    EXPECT_EQ(Tokens(b), (std::vector<Token>{t}));
  }
  s->Stop();
}

// ---- LibraryBatchStrategy over volume_batching.c --------------------------

const char kVolumeConfig[] =
    R"({"name":"m","parameters":{"MAX_BATCH_VOLUME_BYTES":{"string_value":"16"}}})";

int Counter(const char* symbol) {
  return testing::LibraryCounter<int>(VOLUME_BATCHING_PATH, symbol, -1);
}

// A request whose one input holds `bytes` bytes.
std::unique_ptr<TRITONBACKEND_Request> View(uint64_t bytes) {
  auto r = std::make_unique<TRITONBACKEND_Request>();
  TRITONBACKEND_Input input;
  input.name = "IN";
  input.datatype = TRITONSERVER_TYPE_UINT8;
  input.shape = {static_cast<int64_t>(bytes)};
  input.byte_size = bytes;
  r->inputs.push_back(input);
  return r;
}

TEST(CustomBatching, LibraryNeedsAllFiveFunctions) {
  std::shared_ptr<triton::LibraryBatchStrategy> s;
  Status st = triton::LibraryBatchStrategy::Create(FAKE_CUDART_PATH, "m", 1, "/tmp", "{}", &s);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArg);
  EXPECT_EQ(st.message(), std::string(FAKE_CUDART_PATH) +
                              " does not define all required custom batching functions for model m");
  st = triton::LibraryBatchStrategy::Create("/nonexistent/batchstrategy.so", "m", 1, "/tmp", "{}",
                                            &s);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
}

TEST(CustomBatching, LibraryBatcherErrorFailsTheLoad) {
  std::shared_ptr<triton::LibraryBatchStrategy> s;
  Status st = triton::LibraryBatchStrategy::Create(VOLUME_BATCHING_PATH, "m", 1, "/tmp",
                                                   R"({"name":"m"})", &s);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "Unable to find MAX_BATCH_VOLUME_BYTES parameter in model config");
  EXPECT_EQ(s, nullptr);
}

TEST(CustomBatching, LibraryDecidesByVolume) {
  {
    std::shared_ptr<triton::LibraryBatchStrategy> strategy;
    ASSERT_TRUE(triton::LibraryBatchStrategy::Create(VOLUME_BATCHING_PATH, "m", 1, "/tmp",
                                                     kVolumeConfig, &strategy)
                    .ok());
    EXPECT_EQ(Counter("volume_batching_live"), 1);  // the batcher
    const int asked_before = Counter("volume_batching_includes");
    std::vector<std::unique_ptr<TRITONBACKEND_Request>> views;
    Harness h;
    auto s = Make(h, strategy);
    // 16 bytes per batch: 8 + 8 | 12 + 4 | 4 + 8
    for (uint64_t bytes : {8, 8, 12, 4, 4, 8}) {
      views.push_back(View(bytes));
      RequestInfo info = Req(views.size());
      info.view = views.back().get();
      Enqueue(s.get(), info);
    }
    std::vector<std::vector<Token>> batches;
    Batch b;
    while (s->TryNextBatch(&b, nullptr)) batches.push_back(Tokens(b));
    EXPECT_EQ(batches, (std::vector<std::vector<Token>>{{1, 2}, {3, 4}, {5, 6}}));
    EXPECT_EQ(Counter("volume_batching_includes") - asked_before, 8);
    EXPECT_EQ(Counter("volume_batching_live"), 1);  // every batch record finalized
    s->Stop();
    s.reset();
    // The test's own handle keeps the library loaded for the last check.
    void* handle = dlopen(VOLUME_BATCHING_PATH, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(handle, nullptr);
    strategy.reset();
    auto live = reinterpret_cast<int (*)()>(dlsym(handle, "volume_batching_live"));
    EXPECT_EQ(live(), 0);  // ModelBatcherFinalize ran
    dlclose(handle);
  }
}

}  // namespace
}  // namespace pyserver
