// ResponseSink (csrc/src/triton_response_sink.cc) through the C API calls
// that drive it: responses a backend sends from its own threads after
// Execute returned reach the late hook in order, a request released
// without the final flag is reported once, the last releaser frees a
// handed-off request, and WaitDone wakes on the release.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "pyserver/triton/objects.h"

namespace pyserver::triton {
namespace {

struct Seen {
  std::vector<int> values;  // -1: the final flag alone; -2: no final flag
  int lasts = 0;
  int done = 0;
};

bool Deliver(void* owner, SentResponse* sent, bool last) {
  auto* seen = static_cast<Seen*>(owner);
  if (sent == nullptr) {
    seen->values.push_back(-2);
  } else if (sent->has_response) {
    seen->values.push_back(*reinterpret_cast<int32_t*>(sent->outputs[0]->data.data()));
  } else {
    seen->values.push_back(-1);
  }
  seen->lasts += last ? 1 : 0;
  return seen->values.size() == 3;  // "cancelled" after the third
}

void Done(void* owner) { ++static_cast<Seen*>(owner)->done; }

void SendValue(TRITONBACKEND_ResponseFactory* factory, int32_t value) {
  TRITONBACKEND_Response* response;
  ASSERT_EQ(TRITONBACKEND_ResponseNewFromFactory(&response, factory), nullptr);
  TRITONBACKEND_Output* output;
  const int64_t shape[1] = {1};
  ASSERT_EQ(TRITONBACKEND_ResponseOutput(response, &output, "OUT", TRITONSERVER_TYPE_INT32,
                                         shape, 1),
            nullptr);
  void* buffer;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  ASSERT_EQ(TRITONBACKEND_OutputBuffer(output, &buffer, sizeof(value), &mem, &mem_id), nullptr);
  *static_cast<int32_t*>(buffer) = value;
  ASSERT_EQ(TRITONBACKEND_ResponseSend(response, 0, nullptr), nullptr);
}

TEST(ResponseSink, LateResponsesFromAThreadArriveInOrderAndTheReleaserFreesTheRequest) {
  Seen seen;
  auto* request = new TRITONBACKEND_Request();
  std::shared_ptr<ResponseSink> sink = request->sink;
  TRITONBACKEND_ResponseFactory* factory;
  ASSERT_EQ(TRITONBACKEND_ResponseFactoryNew(&factory, request), nullptr);
  SendValue(factory, 1);  // during "Execute": queued
  sink->GoLate(Deliver, Done, &seen);
  EXPECT_EQ(seen.values, (std::vector<int>{1}));
  ASSERT_TRUE(sink->HandOff());  // the request is now the releaser's
  std::thread backend([&] {
    for (int32_t v = 2; v <= 50; ++v) SendValue(factory, v);
    TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    TRITONBACKEND_ResponseFactoryDelete(factory);
    TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);  // frees it
  });
  backend.join();
  EXPECT_TRUE(sink->IsCancelled());  // the hook said so at the third
  ASSERT_EQ(seen.values.size(), 51u);
  for (int v = 1; v <= 50; ++v) EXPECT_EQ(seen.values[v - 1], v);
  EXPECT_EQ(seen.values.back(), -1);
  EXPECT_EQ(seen.lasts, 1);
  EXPECT_EQ(seen.done, 1);
}

TEST(ResponseSink, DetachedAfterAFailedExecuteItCallsNoHookAgain) {
  Seen seen;
  TRITONBACKEND_Request request;
  std::shared_ptr<ResponseSink> sink = request.sink;
  TRITONBACKEND_ResponseFactory* factory;
  ASSERT_EQ(TRITONBACKEND_ResponseFactoryNew(&factory, &request), nullptr);
  sink->GoLate(Deliver, Done, &seen);  // before Execute: streamed as sent
  SendValue(factory, 1);
  EXPECT_EQ(seen.values, (std::vector<int>{1}));
  EXPECT_TRUE(sink->Detach());  // Execute failed: the owner is the caller's again
  SendValue(factory, 2);        // a backend that sends anyway reaches no hook
  TRITONBACKEND_ResponseFactoryDelete(factory);
  ASSERT_EQ(TRITONBACKEND_RequestRelease(&request, TRITONSERVER_REQUEST_RELEASE_ALL), nullptr);
  EXPECT_EQ(seen.values, (std::vector<int>{1}));
  EXPECT_EQ(seen.done, 0);
  EXPECT_FALSE(sink->Detach());  // once
}

TEST(ResponseSink, ARequestReleasedWithoutTheFinalFlagIsReportedOnce) {
  Seen seen;
  TRITONBACKEND_Request request;
  TRITONBACKEND_ResponseFactory* factory;
  ASSERT_EQ(TRITONBACKEND_ResponseFactoryNew(&factory, &request), nullptr);
  request.sink->GoLate(Deliver, Done, &seen);
  SendValue(factory, 7);
  ASSERT_EQ(TRITONBACKEND_RequestRelease(&request, TRITONSERVER_REQUEST_RELEASE_ALL), nullptr);
  EXPECT_EQ(seen.lasts, 0);  // the factory may still send the final flag
  EXPECT_FALSE(request.sink->IsCancelled());
  TRITONBACKEND_ResponseFactoryDelete(factory);
  EXPECT_EQ(seen.values, (std::vector<int>{7, -2}));
  EXPECT_EQ(seen.lasts, 1);
  EXPECT_EQ(seen.done, 1);
  SentResponse late;  // after the last: dropped
  late.final = true;
  request.sink->Push(std::move(late));
  EXPECT_EQ(seen.values.size(), 2u);
}

TEST(ResponseSink, WaitDoneWakesWhenABackendThreadAnswersAndReleases) {
  TRITONBACKEND_Request request;
  std::thread backend([&] {
    TRITONBACKEND_Response* response;
    TRITONBACKEND_ResponseNew(&response, &request);
    TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, nullptr);
    TRITONBACKEND_RequestRelease(&request, TRITONSERVER_REQUEST_RELEASE_ALL);
  });
  request.sink->WaitDone();
  backend.join();
  std::vector<SentResponse> sent = request.sink->Take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].final);
  EXPECT_FALSE(request.sink->HandOff());  // released: the batch frees it
}

TEST(ResponseSink, ARequestStillHeldAfterExecuteGoesLateAndAFinishedOneDoesNot) {
  // A non-decoupled backend that answered and released inside Execute: the
  // instance takes its responses at once.
  TRITONBACKEND_Request finished;
  TRITONBACKEND_Response* response;
  ASSERT_EQ(TRITONBACKEND_ResponseNew(&response, &finished), nullptr);
  ASSERT_EQ(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, nullptr),
            nullptr);
  ASSERT_EQ(TRITONBACKEND_RequestRelease(&finished, TRITONSERVER_REQUEST_RELEASE_ALL), nullptr);
  Seen unused;
  EXPECT_FALSE(finished.sink->GoLateUnlessDone(Deliver, Done, &unused));
  EXPECT_EQ(finished.sink->Take().size(), 1u);
  EXPECT_TRUE(unused.values.empty());

  // One it answered but still holds, and one it neither answered nor
  // released: both go late, and answer from the backend's thread.
  Seen answered_seen, held_seen;
  auto* answered = new TRITONBACKEND_Request();
  auto* held = new TRITONBACKEND_Request();
  std::shared_ptr<ResponseSink> answered_sink = answered->sink, held_sink = held->sink;
  TRITONBACKEND_ResponseFactory* factory;
  ASSERT_EQ(TRITONBACKEND_ResponseFactoryNew(&factory, answered), nullptr);
  SendValue(factory, 5);
  TRITONBACKEND_ResponseFactorySendFlags(factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
  TRITONBACKEND_ResponseFactoryDelete(factory);
  ASSERT_TRUE(answered_sink->GoLateUnlessDone(Deliver, Done, &answered_seen));
  EXPECT_EQ(answered_seen.values, (std::vector<int>{5, -1}));  // delivered at once
  EXPECT_EQ(answered_seen.done, 0);  // not released yet
  ASSERT_TRUE(held_sink->GoLateUnlessDone(Deliver, Done, &held_seen));
  EXPECT_TRUE(held_seen.values.empty());
  ASSERT_TRUE(answered_sink->HandOff());
  ASSERT_TRUE(held_sink->HandOff());
  std::thread backend([&] {
    TRITONBACKEND_RequestRelease(answered, TRITONSERVER_REQUEST_RELEASE_ALL);  // frees it
    TRITONBACKEND_ResponseFactory* late;
    TRITONBACKEND_ResponseFactoryNew(&late, held);
    SendValue(late, 9);
    TRITONBACKEND_ResponseFactorySendFlags(late, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    TRITONBACKEND_ResponseFactoryDelete(late);
    TRITONBACKEND_RequestRelease(held, TRITONSERVER_REQUEST_RELEASE_ALL);  // frees it
  });
  backend.join();
  EXPECT_EQ(answered_seen.done, 1);
  EXPECT_EQ(held_seen.values, (std::vector<int>{9, -1}));
  EXPECT_EQ(held_seen.lasts, 1);
  EXPECT_EQ(held_seen.done, 1);
}

}  // namespace
}  // namespace pyserver::triton

TEST(OutputRules, AReshapedOutputIsReportedWithTheConfigsDims) {
  pyserver::triton::OutputRules rules;
  rules.model_name = "m";
  rules.batching = true;
  rules.names = {"OUT", "PLAIN"};
  // made [b, 4, n] by the model, declared dims [2, 2, -1] over reshape [4, -1]
  rules.reshapes.push_back({"OUT", {{4, -1}, {2, 2, -1}}});
  std::vector<int64_t> shape = {3, 4, 7};
  ASSERT_TRUE(rules.Apply("OUT", &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 2, 2, 7}));
  std::vector<int64_t> plain = {3, 5};
  ASSERT_TRUE(rules.Apply("PLAIN", &plain));
  EXPECT_EQ(plain, (std::vector<int64_t>{3, 5}));
  EXPECT_FALSE(rules.Apply("OTHER", &plain));  // not declared
  pyserver::triton::OutputRules none;  // no names: any output goes as made
  EXPECT_TRUE(none.Apply("OTHER", &plain));
}
