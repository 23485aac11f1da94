// BLS requests as csrc/src/triton_inference.cc implements them: the request
// object's API (errors on bad arguments, inputs, data, outputs, parameters),
// the server hooks, and a delivered response: outputs in the allocator's
// buffers, the response callback per response with the final flag on the
// last, the release callback after it, the buffers released on delete.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "pyserver/triton/inference.h"

namespace pyserver::triton {
namespace {

std::string Message(TRITONSERVER_Error* err) {
  std::string text = err ? TRITONSERVER_ErrorMessage(err) : "";
  TRITONSERVER_ErrorDelete(err);
  return text;
}

// Hooks standing in for the engine: "missing" is unknown, "decoupled" is
// decoupled; a submitted request is kept for the test to answer.
struct FakeServer {
  std::mutex mu;
  std::vector<std::shared_ptr<Submission>> submitted;
  std::vector<std::string> seen_inputs;
  std::vector<uint64_t> cancelled;  // the tokens the cancel hook was given
  std::vector<uint64_t> parent_traces;  // of each submitted request
  std::vector<TRITONSERVER_InferenceTrace*> program_traces;  // of each submitted request
};
FakeServer* g_fake = nullptr;

TRITONSERVER_Error* FakeModelInfo(void*, const char* name, int64_t, bool* ready,
                                  uint32_t* txn_flags) {
  if (std::strcmp(name, "missing") == 0) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_NOT_FOUND,
                                 "Request for unknown model: 'missing' is not found");
  }
  *ready = true;
  *txn_flags = std::strcmp(name, "decoupled") == 0 ? TRITONSERVER_TXN_DECOUPLED
                                                   : TRITONSERVER_TXN_ONE_TO_ONE;
  return nullptr;
}

TRITONSERVER_Error* FakeSubmit(void*, TRITONSERVER_InferenceRequest* request,
                               std::shared_ptr<Submission> submission) {
  std::lock_guard<std::mutex> lock(g_fake->mu);
  for (const auto& input : request->inputs) {
    std::string bytes;
    for (const auto& span : input.spans) {
      bytes.append(static_cast<const char*>(span.base), span.byte_size);
    }
    g_fake->seen_inputs.push_back(input.name + "=" + bytes);
  }
  g_fake->parent_traces.push_back(request->parent_trace);
  g_fake->program_traces.push_back(request->program_trace);
  submission->token = 100 + g_fake->submitted.size();  // as the engine names it
  g_fake->submitted.push_back(std::move(submission));
  return nullptr;
}

TRITONSERVER_Error* FakeCancel(void*, uint64_t token) {
  std::lock_guard<std::mutex> lock(g_fake->mu);
  g_fake->cancelled.push_back(token);
  return nullptr;
}

class TritonInference : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake_;
    ServerHooks hooks;
    hooks.model_info = FakeModelInfo;
    hooks.submit = FakeSubmit;
    hooks.cancel = FakeCancel;
    SetServerHooks(hooks);
    server_.owner = &fake_;
  }
  void TearDown() override {
    DrainDeliveries();
    SetServerHooks(ServerHooks());
    g_fake = nullptr;
  }
  FakeServer fake_;
  TRITONSERVER_Server server_;
};

TEST_F(TritonInference, NewFailsForAnUnknownModelAndWithoutAServer) {
  TRITONSERVER_InferenceRequest* request = nullptr;
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestNew(&request, &server_, "missing", -1)),
            "Request for unknown model: 'missing' is not found");
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestNew(&request, nullptr, "m", -1)),
            "server is null");
  TRITONSERVER_Server detached;  // a model served by no server
  ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&request, &detached, "m", -1), nullptr);
  EXPECT_NE(Message(TRITONSERVER_ServerInferAsync(&detached, request, nullptr)), "");
  TRITONSERVER_InferenceRequestDelete(request);
}

TEST_F(TritonInference, ModelReadinessAndTransactionProperties) {
  bool ready = true;
  ASSERT_EQ(TRITONSERVER_ServerModelIsReady(&server_, "missing", -1, &ready), nullptr);
  EXPECT_FALSE(ready);
  ASSERT_EQ(TRITONSERVER_ServerModelIsReady(&server_, "m", 1, &ready), nullptr);
  EXPECT_TRUE(ready);
  uint32_t txn = 0;
  ASSERT_EQ(TRITONSERVER_ServerModelTransactionProperties(&server_, "decoupled", -1, &txn,
                                                          nullptr),
            nullptr);
  EXPECT_EQ(txn, static_cast<uint32_t>(TRITONSERVER_TXN_DECOUPLED));
}

TEST_F(TritonInference, RequestFieldsInputsOutputsAndTheirErrors) {
  TRITONSERVER_InferenceRequest* r = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&r, &server_, "m", 2), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetId(r, "r7"), nullptr);
  const char* id = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceRequestId(r, &id), nullptr);
  EXPECT_STREQ(id, "r7");
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetFlags(r, TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
            nullptr);
  uint32_t flags = 0;
  ASSERT_EQ(TRITONSERVER_InferenceRequestFlags(r, &flags), nullptr);
  EXPECT_EQ(flags, 1u);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetCorrelationId(r, 42), nullptr);
  uint64_t corr = 0;
  ASSERT_EQ(TRITONSERVER_InferenceRequestCorrelationId(r, &corr), nullptr);
  EXPECT_EQ(corr, 42u);
  const char* corr_string = nullptr;
  EXPECT_NE(Message(TRITONSERVER_InferenceRequestCorrelationIdString(r, &corr_string)), "");
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetCorrelationIdString(r, "seq-a"), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestCorrelationIdString(r, &corr_string), nullptr);
  EXPECT_STREQ(corr_string, "seq-a");
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetPriorityUInt64(r, 3), nullptr);
  uint32_t priority = 0;
  ASSERT_EQ(TRITONSERVER_InferenceRequestPriority(r, &priority), nullptr);
  EXPECT_EQ(priority, 3u);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetTimeoutMicroseconds(r, 500), nullptr);
  uint64_t timeout = 0;
  ASSERT_EQ(TRITONSERVER_InferenceRequestTimeoutMicroseconds(r, &timeout), nullptr);
  EXPECT_EQ(timeout, 500u);

  const int64_t shape[] = {1, 2};
  ASSERT_EQ(TRITONSERVER_InferenceRequestAddInput(r, "A", TRITONSERVER_TYPE_UINT8, shape, 2),
            nullptr);
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestAddInput(r, "A", TRITONSERVER_TYPE_UINT8,
                                                          shape, 2)),
            "[request id: r7] input 'A' already exists in request");
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestAddRawInput(r, "RAW")),
            "[request id: r7] raw input 'RAW' can't be added to request with other inputs");
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestAppendInputData(r, "B", "x", 1,
                                                                 TRITONSERVER_MEMORY_CPU, 0)),
            "[request id: r7] input 'B' does not exist in request");
  EXPECT_NE(Message(TRITONSERVER_InferenceRequestAppendInputData(r, "A", "x", 1,
                                                                 TRITONSERVER_MEMORY_GPU, 0)),
            "");
  ASSERT_EQ(TRITONSERVER_InferenceRequestAppendInputData(r, "A", "ab", 1,
                                                         TRITONSERVER_MEMORY_CPU, 0),
            nullptr);
  TRITONSERVER_BufferAttributes* attributes = nullptr;
  ASSERT_EQ(TRITONSERVER_BufferAttributesNew(&attributes), nullptr);
  ASSERT_EQ(TRITONSERVER_BufferAttributesSetByteSize(attributes, 1), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestAppendInputDataWithBufferAttributes(r, "A", "b",
                                                                             attributes),
            nullptr);
  TRITONSERVER_BufferAttributesDelete(attributes);
  EXPECT_EQ(r->inputs[0].byte_size, 2u);
  ASSERT_EQ(TRITONSERVER_InferenceRequestRemoveAllInputData(r, "A"), nullptr);
  EXPECT_EQ(r->inputs[0].byte_size, 0u);
  ASSERT_EQ(TRITONSERVER_InferenceRequestAppendInputDataWithHostPolicy(
                r, "A", "cd", 2, TRITONSERVER_MEMORY_CPU, 0, "cpu"),
            nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestAddInput(r, "C", TRITONSERVER_TYPE_UINT8, shape, 2),
            nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestRemoveInput(r, "C"), nullptr);
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestRemoveInput(r, "C")),
            "[request id: r7] input 'C' does not exist in request");

  ASSERT_EQ(TRITONSERVER_InferenceRequestAddRequestedOutput(r, "OUT"), nullptr);
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestAddRequestedOutput(r, "OUT")),
            "[request id: r7] output 'OUT' already exists in request");
  ASSERT_EQ(TRITONSERVER_InferenceRequestAddRequestedOutput(r, "OTHER"), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestRemoveRequestedOutput(r, "OTHER"), nullptr);
  EXPECT_NE(Message(TRITONSERVER_InferenceRequestRemoveRequestedOutput(r, "OTHER")), "");
  EXPECT_EQ(r->requested_outputs, std::vector<std::string>{"OUT"});

  ASSERT_EQ(TRITONSERVER_InferenceRequestSetIntParameter(r, "k", 1), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetIntParameter(r, "k", 2), nullptr);  // replaces
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetStringParameter(r, "s", "v"), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetBoolParameter(r, "b", true), nullptr);
  ASSERT_EQ(r->parameters.size(), 3u);
  EXPECT_EQ(r->parameters[0].int_value, 2);

  // no response callback yet: ServerInferAsync refuses it
  EXPECT_NE(Message(TRITONSERVER_ServerInferAsync(&server_, r, nullptr)), "");
  ASSERT_EQ(TRITONSERVER_InferenceRequestRemoveAllInputs(r), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestRemoveAllRequestedOutputs(r), nullptr);
  EXPECT_TRUE(r->inputs.empty() && r->requested_outputs.empty());
  ASSERT_EQ(TRITONSERVER_InferenceRequestAddRawInput(r, "RAW"), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestDelete(r), nullptr);
  EXPECT_EQ(Message(TRITONSERVER_InferenceRequestSetId(nullptr, "x")), "request is null");
}

// What the backend's callbacks saw, on the callback thread.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<TRITONSERVER_InferenceResponse*> responses;
  std::vector<uint32_t> flags;
  int released = 0;
  int allocated = 0;
  int freed = 0;
};

TRITONSERVER_Error* Alloc(TRITONSERVER_ResponseAllocator*, const char*, size_t byte_size,
                          TRITONSERVER_MemoryType, int64_t, void* userp, void** buffer,
                          void** buffer_userp, TRITONSERVER_MemoryType* actual,
                          int64_t* actual_id) {
  auto* seen = static_cast<Seen*>(userp);
  *buffer = byte_size ? std::malloc(byte_size) : nullptr;
  *buffer_userp = seen;
  *actual = TRITONSERVER_MEMORY_CPU;
  *actual_id = 0;
  std::lock_guard<std::mutex> lock(seen->mu);
  ++seen->allocated;
  return nullptr;
}

TRITONSERVER_Error* Free(TRITONSERVER_ResponseAllocator*, void* buffer, void* buffer_userp,
                         size_t, TRITONSERVER_MemoryType, int64_t) {
  auto* seen = static_cast<Seen*>(buffer_userp);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(seen->mu);
  ++seen->freed;
  return nullptr;
}

void OnResponse(TRITONSERVER_InferenceResponse* response, const uint32_t flags, void* userp) {
  auto* seen = static_cast<Seen*>(userp);
  std::lock_guard<std::mutex> lock(seen->mu);
  seen->responses.push_back(response);
  seen->flags.push_back(flags);
  seen->cv.notify_all();
}

void OnRelease(TRITONSERVER_InferenceRequest* request, const uint32_t flags, void* userp) {
  auto* seen = static_cast<Seen*>(userp);
  EXPECT_EQ(flags, static_cast<uint32_t>(TRITONSERVER_REQUEST_RELEASE_ALL));
  TRITONSERVER_InferenceRequestDelete(request);  // as Triton's BLS example does
  std::lock_guard<std::mutex> lock(seen->mu);
  ++seen->released;
  seen->cv.notify_all();
}

Completion Answer(const std::vector<float>& values, bool final) {
  Completion c;
  c.has_response = true;
  c.final = final;
  c.model_version = 2;
  ResponseTensor t;
  t.name = "OUT";
  t.datatype = TRITONSERVER_TYPE_FP32;
  t.shape = {static_cast<int64_t>(values.size())};
  std::vector<char> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  t.Own(std::move(bytes));
  c.outputs.push_back(std::move(t));
  Parameter p;
  p.name = "n";
  p.type = TRITONSERVER_PARAMETER_INT;
  p.int_value = static_cast<int64_t>(values.size());
  c.parameters.push_back(p);
  return c;
}

// A final response that is an error.
Completion Failure(TRITONSERVER_Error_Code code, const char* message) {
  Completion c;
  c.has_error = true;
  c.error_code = code;
  c.error_message = message;
  c.final = true;
  return c;
}

TEST_F(TritonInference, ResponsesReachTheCallbacksInTheAllocatorsBuffers) {
  Seen seen;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  EXPECT_NE(Message(TRITONSERVER_ResponseAllocatorNew(&allocator, nullptr, Free, nullptr)), "");
  ASSERT_EQ(TRITONSERVER_ResponseAllocatorNew(&allocator, Alloc, Free, nullptr), nullptr);
  TRITONSERVER_InferenceRequest* r = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&r, &server_, "decoupled", -1), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetId(r, "q"), nullptr);
  const int64_t shape[] = {2};
  ASSERT_EQ(TRITONSERVER_InferenceRequestAddInput(r, "IN", TRITONSERVER_TYPE_UINT8, shape, 1),
            nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestAppendInputData(r, "IN", "hi", 2,
                                                         TRITONSERVER_MEMORY_CPU, 0),
            nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetReleaseCallback(r, OnRelease, &seen), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetResponseCallback(r, allocator, &seen, OnResponse,
                                                             &seen),
            nullptr);
  ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, r, nullptr), nullptr);
  ASSERT_EQ(fake_.submitted.size(), 1u);
  EXPECT_EQ(fake_.seen_inputs, std::vector<std::string>{"IN=hi"});

  std::shared_ptr<Submission> s = fake_.submitted[0];
  Deliver(s, Answer({1, 2}, false));
  Deliver(s, Answer({3}, false));
  Completion final_only;  // a decoupled model's last word: the flag alone
  final_only.final = true;
  Deliver(s, std::move(final_only));
  {
    std::unique_lock<std::mutex> lock(seen.mu);
    ASSERT_TRUE(seen.cv.wait_for(lock, std::chrono::seconds(10),
                                 [&] { return seen.released == 1; }));
  }
  ASSERT_EQ(seen.responses.size(), 3u);
  EXPECT_EQ(seen.flags, (std::vector<uint32_t>{0, 0, TRITONSERVER_RESPONSE_COMPLETE_FINAL}));
  EXPECT_EQ(seen.responses[2], nullptr);
  TRITONSERVER_InferenceResponse* first = seen.responses[0];
  EXPECT_EQ(TRITONSERVER_InferenceResponseError(first), nullptr);
  const char* model = nullptr;
  int64_t version = 0;
  ASSERT_EQ(TRITONSERVER_InferenceResponseModel(first, &model, &version), nullptr);
  EXPECT_STREQ(model, "decoupled");
  EXPECT_EQ(version, 2);
  const char* id = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceResponseId(first, &id), nullptr);
  EXPECT_STREQ(id, "q");
  uint32_t count = 0;
  ASSERT_EQ(TRITONSERVER_InferenceResponseOutputCount(first, &count), nullptr);
  ASSERT_EQ(count, 1u);
  const char* name;
  TRITONSERVER_DataType dtype;
  const int64_t* out_shape;
  uint64_t dims;
  const void* base;
  size_t bytes;
  TRITONSERVER_MemoryType mem;
  int64_t mem_id;
  void* userp;
  ASSERT_EQ(TRITONSERVER_InferenceResponseOutput(first, 0, &name, &dtype, &out_shape, &dims,
                                                 &base, &bytes, &mem, &mem_id, &userp),
            nullptr);
  EXPECT_STREQ(name, "OUT");
  EXPECT_EQ(dtype, TRITONSERVER_TYPE_FP32);
  ASSERT_EQ(dims, 1u);
  EXPECT_EQ(out_shape[0], 2);
  ASSERT_EQ(bytes, 2 * sizeof(float));
  EXPECT_EQ(static_cast<const float*>(base)[1], 2.0f);
  EXPECT_EQ(userp, &seen);  // the allocator's buffer_userp
  EXPECT_NE(Message(TRITONSERVER_InferenceResponseOutput(first, 1, &name, &dtype, &out_shape,
                                                         &dims, &base, &bytes, &mem, &mem_id,
                                                         &userp)),
            "");
  const char* label = "x";
  ASSERT_EQ(TRITONSERVER_InferenceResponseOutputClassificationLabel(first, 0, 0, &label),
            nullptr);
  EXPECT_EQ(label, nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceResponseParameterCount(first, &count), nullptr);
  ASSERT_EQ(count, 1u);
  TRITONSERVER_ParameterType ptype;
  const void* pvalue;
  ASSERT_EQ(TRITONSERVER_InferenceResponseParameter(first, 0, &name, &ptype, &pvalue), nullptr);
  EXPECT_STREQ(name, "n");
  EXPECT_EQ(ptype, TRITONSERVER_PARAMETER_INT);
  EXPECT_EQ(*static_cast<const int64_t*>(pvalue), 2);

  EXPECT_EQ(seen.allocated, 2);
  for (auto* response : seen.responses) {
    EXPECT_EQ(TRITONSERVER_InferenceResponseDelete(response), nullptr);
  }
  EXPECT_EQ(seen.freed, 2);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
}

TEST_F(TritonInference, AnErrorIsTheResponsesAndAnAllocatorErrorToo) {
  Seen seen;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  auto refuse = [](TRITONSERVER_ResponseAllocator*, const char*, size_t, TRITONSERVER_MemoryType,
                   int64_t, void*, void**, void**, TRITONSERVER_MemoryType*,
                   int64_t*) -> TRITONSERVER_Error* {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNAVAILABLE, "no room");
  };
  ASSERT_EQ(TRITONSERVER_ResponseAllocatorNew(&allocator, refuse, Free, nullptr), nullptr);
  for (int i = 0; i < 2; ++i) {
    TRITONSERVER_InferenceRequest* r = nullptr;
    ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&r, &server_, "m", -1), nullptr);
    ASSERT_EQ(TRITONSERVER_InferenceRequestSetReleaseCallback(r, OnRelease, &seen), nullptr);
    ASSERT_EQ(TRITONSERVER_InferenceRequestSetResponseCallback(r, allocator, nullptr,
                                                               OnResponse, &seen),
              nullptr);
    ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, r, nullptr), nullptr);
  }
  Deliver(fake_.submitted[0], Failure(TRITONSERVER_ERROR_INVALID_ARG, "bad input"));
  Deliver(fake_.submitted[1], Answer({1}, true));
  DrainDeliveries();
  ASSERT_EQ(seen.responses.size(), 2u);
  EXPECT_EQ(seen.released, 2);
  TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(seen.responses[0]);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(err), TRITONSERVER_ERROR_INVALID_ARG);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(err), "bad input");
  TRITONSERVER_ErrorDelete(err);  // the caller's copy, as in Triton
  err = TRITONSERVER_InferenceResponseError(seen.responses[1]);
  ASSERT_NE(err, nullptr);
  EXPECT_STREQ(TRITONSERVER_ErrorMessage(err), "no room");
  TRITONSERVER_ErrorDelete(err);
  for (auto* response : seen.responses) TRITONSERVER_InferenceResponseDelete(response);
  EXPECT_EQ(seen.freed, 0);  // nothing was allocated
  TRITONSERVER_ResponseAllocatorDelete(allocator);
}

void CountRelease(TRITONSERVER_InferenceRequest*, const uint32_t, void* userp) {
  auto* seen = static_cast<Seen*>(userp);
  std::lock_guard<std::mutex> lock(seen->mu);
  ++seen->released;
  seen->cv.notify_all();
}

TEST_F(TritonInference, CancelReachesTheServerOnlyWhileTheRequestIsInFlight) {
  Seen seen;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  ASSERT_EQ(TRITONSERVER_ResponseAllocatorNew(&allocator, Alloc, Free, nullptr), nullptr);
  TRITONSERVER_InferenceRequest* r = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&r, &server_, "m", -1), nullptr);
  bool cancelled = true;
  ASSERT_EQ(TRITONSERVER_InferenceRequestIsCancelled(r, &cancelled), nullptr);
  EXPECT_FALSE(cancelled);
  EXPECT_NE(Message(TRITONSERVER_InferenceRequestIsCancelled(r, nullptr)), "");
  EXPECT_NE(Message(TRITONSERVER_InferenceRequestCancel(nullptr)), "");

  // Before it is sent: marked, nothing to stop, and the send starts afresh.
  ASSERT_EQ(TRITONSERVER_InferenceRequestCancel(r), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestIsCancelled(r, &cancelled), nullptr);
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(fake_.cancelled.empty());
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetReleaseCallback(r, CountRelease, &seen), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetResponseCallback(r, allocator, &seen, OnResponse,
                                                             &seen),
            nullptr);
  ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, r, nullptr), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestIsCancelled(r, &cancelled), nullptr);
  EXPECT_FALSE(cancelled);

  // In flight: the server is asked to cancel it, by its token.
  ASSERT_EQ(TRITONSERVER_InferenceRequestCancel(r), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestIsCancelled(r, &cancelled), nullptr);
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(fake_.cancelled, std::vector<uint64_t>{100});

  // The server answers it (a cancelled request still gets its final
  // response); once that is delivered and the server let go, it is over.
  Deliver(fake_.submitted[0], Failure(TRITONSERVER_ERROR_CANCELLED, "Request was cancelled"));
  fake_.submitted.clear();
  DrainDeliveries();
  ASSERT_EQ(seen.responses.size(), 1u);
  EXPECT_EQ(seen.released, 1);
  TRITONSERVER_Error* err = TRITONSERVER_InferenceResponseError(seen.responses[0]);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(TRITONSERVER_ErrorCode(err), TRITONSERVER_ERROR_CANCELLED);
  TRITONSERVER_ErrorDelete(err);
  ASSERT_EQ(TRITONSERVER_InferenceRequestCancel(r), nullptr);
  EXPECT_EQ(fake_.cancelled.size(), 1u);  // not asked again

  for (auto* response : seen.responses) TRITONSERVER_InferenceResponseDelete(response);
  TRITONSERVER_InferenceRequestDelete(r);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
}

TEST(TritonTrace, LevelAndActivityNames) {
  EXPECT_STREQ(TRITONSERVER_InferenceTraceLevelString(TRITONSERVER_TRACE_LEVEL_TIMESTAMPS),
               "TIMESTAMPS");
  EXPECT_STREQ(TRITONSERVER_InferenceTraceLevelString(TRITONSERVER_TRACE_LEVEL_DISABLED),
               "DISABLED");
  EXPECT_STREQ(TRITONSERVER_InferenceTraceLevelString(
                   static_cast<TRITONSERVER_InferenceTraceLevel>(0xC)),
               "<unknown>");
  EXPECT_STREQ(TRITONSERVER_InferenceTraceActivityString(TRITONSERVER_TRACE_REQUEST_START),
               "REQUEST_START");
  EXPECT_STREQ(TRITONSERVER_InferenceTraceActivityString(TRITONSERVER_TRACE_COMPUTE_OUTPUT_START),
               "COMPUTE_OUTPUT_START");
  EXPECT_STREQ(TRITONSERVER_InferenceTraceActivityString(TRITONSERVER_TRACE_CUSTOM_ACTIVITY),
               "CUSTOM_ACTIVITY");
  EXPECT_STREQ(TRITONSERVER_InferenceTraceActivityString(
                   static_cast<TRITONSERVER_InferenceTraceActivity>(11)),
               "<unknown>");
}

// What a program's trace callbacks saw (on the library's callback thread).
struct ProgramLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
  int released = 0;
};

void LogActivity(TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTraceActivity activity,
                 uint64_t ns, void* userp) {
  auto* log = static_cast<ProgramLog*>(userp);
  std::lock_guard<std::mutex> lock(log->mu);
  log->seen.push_back(std::to_string(trace->id) + ":" +
                      TRITONSERVER_InferenceTraceActivityString(activity) + "@" +
                      std::to_string(ns));
}

void LogTensor(TRITONSERVER_InferenceTrace* trace, TRITONSERVER_InferenceTraceActivity activity,
               const char* name, TRITONSERVER_DataType datatype, const void* base,
               size_t byte_size, const int64_t* shape, uint64_t dim_count,
               TRITONSERVER_MemoryType memory_type, int64_t, void* userp) {
  auto* log = static_cast<ProgramLog*>(userp);
  std::lock_guard<std::mutex> lock(log->mu);
  log->seen.push_back(std::to_string(trace->id) + ":" +
                      TRITONSERVER_InferenceTraceActivityString(activity) + ":" + name + ":" +
                      TRITONSERVER_DataTypeString(datatype) + ":" +
                      std::string(static_cast<const char*>(base), byte_size) + ":" +
                      std::to_string(dim_count ? shape[0] : -1) +
                      (memory_type == TRITONSERVER_MEMORY_CPU ? ":cpu" : ":?"));
}

void LogRelease(TRITONSERVER_InferenceTrace* trace, void* userp) {
  auto* log = static_cast<ProgramLog*>(userp);
  const char* model = nullptr;
  uint64_t parent = 0;
  TRITONSERVER_InferenceTraceModelName(trace, &model);
  TRITONSERVER_InferenceTraceParentId(trace, &parent);
  {
    std::lock_guard<std::mutex> lock(log->mu);
    log->seen.push_back(std::to_string(trace->id) + ":released:" + model + ":parent=" +
                        std::to_string(parent));
    ++log->released;
  }
  log->cv.notify_all();
  EXPECT_EQ(TRITONSERVER_InferenceTraceDelete(trace), nullptr);  // the program's now
}

TEST_F(TritonInference, AProgramsTraceReportsToItsCallbacksThenComesBack) {
  ProgramLog log;
  TRITONSERVER_InferenceTrace* trace = nullptr;
  TRITONSERVER_InferenceTrace* other = nullptr;
  // The deprecated MIN level means TIMESTAMPS; the levels combine as bits.
  ASSERT_EQ(TRITONSERVER_InferenceTraceTensorNew(
                &trace,
                static_cast<TRITONSERVER_InferenceTraceLevel>(TRITONSERVER_TRACE_LEVEL_MIN |
                                                              TRITONSERVER_TRACE_LEVEL_TENSORS),
                9, LogActivity, LogTensor, LogRelease, &log),
            nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceNew(&other, TRITONSERVER_TRACE_LEVEL_TIMESTAMPS, 0,
                                           LogActivity, LogRelease, &log),
            nullptr);
  EXPECT_EQ(trace->program.level,
            uint32_t{TRITONSERVER_TRACE_LEVEL_TIMESTAMPS | TRITONSERVER_TRACE_LEVEL_TENSORS});
  EXPECT_GT(trace->id, 0u);
  EXPECT_GT(other->id, trace->id);  // one sequence of ids
  EXPECT_EQ(trace->parent_id, 9u);
  EXPECT_NE(Message(TRITONSERVER_InferenceTraceNew(nullptr, TRITONSERVER_TRACE_LEVEL_TIMESTAMPS,
                                                   0, LogActivity, LogRelease, &log)),
            "");
  const char* context = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceTraceSetContext(trace, "ctx"), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceContext(trace, &context), nullptr);
  EXPECT_STREQ(context, "ctx");

  // Given to ServerInferAsync, the request is traced as the program's trace
  // (no parent of the server's), and the program keeps it.
  TRITONSERVER_InferenceRequest* request = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&request, &server_, "m", -1), nullptr);
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  ASSERT_EQ(TRITONSERVER_ResponseAllocatorNew(
                &allocator,
                [](TRITONSERVER_ResponseAllocator*, const char*, size_t, TRITONSERVER_MemoryType,
                   int64_t, void*, void**, void**, TRITONSERVER_MemoryType*,
                   int64_t*) -> TRITONSERVER_Error* { return nullptr; },
                [](TRITONSERVER_ResponseAllocator*, void*, void*, size_t, TRITONSERVER_MemoryType,
                   int64_t) -> TRITONSERVER_Error* { return nullptr; },
                nullptr),
            nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetResponseCallback(
                request, allocator, nullptr,
                [](TRITONSERVER_InferenceResponse* r, uint32_t, void*) {
                  TRITONSERVER_InferenceResponseDelete(r);
                },
                nullptr),
            nullptr);
  ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, request, trace), nullptr);
  ASSERT_EQ(fake_.program_traces.size(), 1u);
  EXPECT_EQ(fake_.program_traces[0], trace);
  EXPECT_EQ(fake_.parent_traces[0], 0u);

  // What the server recorded goes to the callbacks, timestamps then
  // tensors, then the trace to its release callback; a child's trace is
  // made for it and released to the program too.
  TraceReport own;
  own.trace = trace;
  own.program = trace->program;
  own.id = trace->id;
  own.parent_id = 9;
  own.model_name = "m";
  own.model_version = 1;
  TraceActivity start;
  start.activity = TRITONSERVER_TRACE_REQUEST_START;
  start.timestamp_ns = 5;
  TraceActivity end = start;
  end.activity = TRITONSERVER_TRACE_REQUEST_END;
  end.timestamp_ns = 8;
  TraceActivity input;
  input.tensor = true;
  input.activity = TRITONSERVER_TRACE_TENSOR_QUEUE_INPUT;
  input.name = "X";
  input.datatype = TRITONSERVER_TYPE_UINT8;
  input.shape = {2};
  input.bytes = {'h', 'i'};
  own.activities = {start, end, input};
  TraceReport child = own;
  child.trace = nullptr;
  child.id = 1000;
  child.parent_id = trace->id;
  child.model_name = "step";
  child.activities = {start};
  const std::string id = std::to_string(trace->id);
  DeliverTrace(std::move(child));
  DeliverTrace(std::move(own));
  TraceReport quiet;  // a program's trace at TIMESTAMPS only: no tensors reported
  quiet.trace = other;
  quiet.program = other->program;
  quiet.id = other->id;
  quiet.model_name = "m";
  quiet.activities = {start, input};
  const std::string other_id = std::to_string(other->id);
  DeliverTrace(std::move(quiet));
  {
    std::unique_lock<std::mutex> lock(log.mu);
    log.cv.wait(lock, [&] { return log.released == 3; });
  }
  EXPECT_EQ(log.seen, (std::vector<std::string>{
                          "1000:REQUEST_START@5",
                          "1000:released:step:parent=" + id,
                          id + ":REQUEST_START@5",
                          id + ":REQUEST_END@8",
                          id + ":TENSOR_QUEUE_INPUT:X:UINT8:hi:2:cpu",
                          id + ":released:m:parent=9",
                          other_id + ":REQUEST_START@5",
                          other_id + ":released:m:parent=0",
                      }));
  std::shared_ptr<Submission> submitted = fake_.submitted[0];
  Completion done;
  done.final = true;
  Deliver(submitted, std::move(done));
  DrainDeliveries();
  TRITONSERVER_InferenceRequestDelete(request);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
}

TEST_F(TritonInference, ABlsRequestIsTracedUnderTheChildItIsGiven) {
  // A backend's request has a trace only while the server traces it.
  TRITONBACKEND_Request backend_request;
  TRITONSERVER_InferenceTrace* trace = &backend_request.trace;
  ASSERT_EQ(TRITONBACKEND_RequestTrace(&backend_request, &trace), nullptr);
  EXPECT_EQ(trace, nullptr);
  backend_request.trace.id = 7;
  backend_request.trace.parent_id = 3;
  backend_request.trace.model_name = "bls";
  backend_request.trace.model_version = 1;
  backend_request.trace.request_id = "r";
  ASSERT_EQ(TRITONBACKEND_RequestTrace(&backend_request, &trace), nullptr);
  ASSERT_EQ(trace, &backend_request.trace);
  EXPECT_NE(Message(TRITONBACKEND_RequestTrace(&backend_request, nullptr)), "");
  uint64_t id = 0, parent_id = 0;
  int64_t version = 0;
  const char* name = nullptr;
  const char* request_id = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceTraceId(trace, &id), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceParentId(trace, &parent_id), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceModelName(trace, &name), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceModelVersion(trace, &version), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceRequestId(trace, &request_id), nullptr);
  EXPECT_EQ(id, 7u);
  EXPECT_EQ(parent_id, 3u);
  EXPECT_STREQ(name, "bls");
  EXPECT_EQ(version, 1);
  EXPECT_STREQ(request_id, "r");
  // A backend's own activity goes to the trace's reporter (the server's
  // tracer), by the trace's id; without a reporter it is dropped.
  struct Reported {
    uint64_t id = 0, ns = 0;
    std::string name;
  } reported;
  EXPECT_EQ(Message(TRITONSERVER_InferenceTraceReportActivity(trace, 5, "MINE")), "");
  trace->reporter = &reported;
  trace->report = [](void* reporter, uint64_t id, uint64_t ns, const char* name) {
    auto* r = static_cast<Reported*>(reporter);
    r->id = id;
    r->ns = ns;
    r->name = name;
  };
  ASSERT_EQ(TRITONSERVER_InferenceTraceReportActivity(trace, 42, "MINE"), nullptr);
  EXPECT_EQ(reported.id, 7u);
  EXPECT_EQ(reported.ns, 42u);
  EXPECT_EQ(reported.name, "MINE");
  EXPECT_NE(Message(TRITONSERVER_InferenceTraceReportActivity(trace, 1, nullptr)), "");
  // The request's own trace is not the backend's to delete; a child it
  // spawned and never sent is.
  EXPECT_EQ(Message(TRITONSERVER_InferenceTraceDelete(trace)), "the trace belongs to its request");
  TRITONSERVER_InferenceTrace* unsent = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceTraceSpawnChildTrace(trace, &unsent), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceTraceParentId(unsent, &parent_id), nullptr);
  EXPECT_EQ(parent_id, 7u);
  reported.name.clear();
  ASSERT_EQ(TRITONSERVER_InferenceTraceReportActivity(unsent, 43, "CHILD"), nullptr);
  EXPECT_EQ(reported.name, "");  // a child not yet started has no record
  ASSERT_EQ(TRITONSERVER_InferenceTraceDelete(unsent), nullptr);

  TRITONSERVER_InferenceTrace* child = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceTraceSpawnChildTrace(trace, &child), nullptr);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->parent_id, 7u);
  // an untraced request's child is none, with success (Triton's), and its
  // context is empty, not null
  TRITONSERVER_InferenceTrace* none = child;
  ASSERT_EQ(TRITONSERVER_InferenceTraceSpawnChildTrace(nullptr, &none), nullptr);
  EXPECT_EQ(none, nullptr);
  const char* context = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceTraceContext(trace, &context), nullptr);
  EXPECT_STREQ(context, "");

  Seen seen;
  TRITONSERVER_ResponseAllocator* allocator = nullptr;
  ASSERT_EQ(TRITONSERVER_ResponseAllocatorNew(&allocator, Alloc, Free, nullptr), nullptr);
  TRITONSERVER_InferenceRequest* r = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceRequestNew(&r, &server_, "m", -1), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetReleaseCallback(r, CountRelease, &seen), nullptr);
  ASSERT_EQ(TRITONSERVER_InferenceRequestSetResponseCallback(r, allocator, &seen, OnResponse,
                                                             &seen),
            nullptr);
  // The server owns each child it is given (ASan finds a leak or a double
  // free): sent three times, with a child, another child, and none.
  ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, r, child), nullptr);
  TRITONSERVER_InferenceTrace* second = nullptr;
  ASSERT_EQ(TRITONSERVER_InferenceTraceSpawnChildTrace(trace, &second), nullptr);
  ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, r, second), nullptr);
  ASSERT_EQ(TRITONSERVER_ServerInferAsync(&server_, r, nullptr), nullptr);
  EXPECT_EQ(fake_.parent_traces, (std::vector<uint64_t>{7, 7, 0}));

  for (auto& submission : fake_.submitted) Deliver(submission, Failure(TRITONSERVER_ERROR_INTERNAL, "x"));
  fake_.submitted.clear();
  DrainDeliveries();
  EXPECT_EQ(seen.released, 3);
  for (auto* response : seen.responses) TRITONSERVER_InferenceResponseDelete(response);
  TRITONSERVER_InferenceRequestDelete(r);
  TRITONSERVER_ResponseAllocatorDelete(allocator);
}

}  // namespace
}  // namespace pyserver::triton
