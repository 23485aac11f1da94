#include "pyserver/protocol/http1_infer_lane.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pyserver::http1 {
namespace {

constexpr uint64_t kConn = 7;

std::string Post(const std::string& target, const std::string& body,
                 const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: x\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct LaneTest : ::testing::Test {
  std::shared_ptr<InferLane> lane;
  std::unique_ptr<ConnectionReader> reader;

  void SetUp() override {
    ASSERT_TRUE(InferLane::Create(1024, 1 << 20, &lane).ok());
    lane->AddRoute("/v2/models/m/infer", 3);
    reader = lane->NewReader();
  }

  // Feeds `bytes`; returns what the host got.
  std::string Feed(const std::string& bytes, bool* more = nullptr) {
    std::string host;
    bool m = reader->Read(kConn, bytes.data(), bytes.size(), &host);
    if (more) *more = m;
    return host;
  }

  std::vector<LaneRequest> Taken() {
    std::vector<LaneRequest> out;
    lane->Drain(&out);
    return out;
  }
};

TEST_F(LaneTest, TakesAnInferRequestToAKnownTarget) {
  std::string body = "{\"inputs\":[]}";
  EXPECT_EQ(Feed(Post("/v2/models/m/infer", body,
                      "Inference-Header-Content-Length: 13\r\nAccept-Encoding: gzip\r\n")),
            "");
  auto got = Taken();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].connection, kConn);
  EXPECT_EQ(got[0].route, 3u);
  EXPECT_EQ(got[0].target, "/v2/models/m/infer");
  EXPECT_EQ(got[0].body, body);
  EXPECT_TRUE(got[0].has_header_length);
  EXPECT_EQ(got[0].header_length, "13");
  EXPECT_TRUE(got[0].has_accept_encoding);
  EXPECT_EQ(got[0].accept_encoding, "gzip");
  EXPECT_GT(got[0].received_ns, 0u);
  EXPECT_EQ(reader->Progress().state, ReaderProgress::kAnswering);
  EXPECT_EQ(lane->taken(), 1u);
}

TEST_F(LaneTest, ARequestInPiecesIsTakenWhenWhole) {
  std::string req = Post("/v2/models/m/infer", "0123456789");
  for (size_t i = 0; i + 1 < req.size(); ++i) {
    EXPECT_EQ(Feed(req.substr(i, 1)), "");
    EXPECT_TRUE(Taken().empty());
    EXPECT_NE(reader->Progress().state, ReaderProgress::kIdle);
  }
  Feed(req.substr(req.size() - 1));
  auto got = Taken();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "0123456789");
}

TEST_F(LaneTest, PipelinedRequestsWaitForEachAnswer) {
  std::string two = Post("/v2/models/m/infer", "a") + Post("/v2/models/m/infer", "bb");
  EXPECT_EQ(Feed(two), "");
  auto got = Taken();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "a");
  std::string host;
  reader->Resume(kConn, false, 0, &host);  // not an answer: nothing moves
  EXPECT_TRUE(Taken().empty());
  reader->Resume(kConn, true, 0, &host);
  EXPECT_EQ(host, "");
  got = Taken();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "bb");
}

TEST_F(LaneTest, OtherRequestsGoToTheHostUntilItHandsTheConnectionBack) {
  std::string health = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string infer = Post("/v2/models/m/infer", "x");
  EXPECT_EQ(Feed(health + infer), health + infer);  // all of it, from the request's start
  EXPECT_TRUE(Taken().empty());
  EXPECT_EQ(reader->Progress().state, ReaderProgress::kIdle);  // the host times it
  EXPECT_EQ(Feed(infer), infer);  // still the host's
  std::string host;
  reader->Resume(kConn, false, health.size() + infer.size(), &host);  // not all: stays
  EXPECT_EQ(Feed(infer), infer);
  reader->Resume(kConn, false, health.size() + 3 * infer.size(), &host);
  EXPECT_EQ(host, "");
  EXPECT_EQ(Feed(infer), "");
  EXPECT_EQ(Taken().size(), 1u);
}

TEST_F(LaneTest, DeclinesWhatTheHostMustDecide) {
  const std::vector<std::string> declined = {
      Post("/v2/models/other/infer", "x"),                    // a target not routed yet
      Post("/v2/models/m/infer?x=1", "x"),                    // the target as sent
      Post("/v2/models/m/infer", "x", "Content-Encoding: gzip\r\n"),
      Post("/v2/models/m/infer", "x", "Expect: 100-continue\r\n"),
      Post("/v2/models/m/infer", "x", "Connection: close\r\n"),
      Post("/v2/models/m/infer", "x",
           "Inference-Header-Content-Length: 1\r\nInference-Header-Content-Length: 1\r\n"),
      "POST /v2/models/m/infer HTTP/1.0\r\nContent-Length: 1\r\n\r\nx",
      "PUT /v2/models/m/infer HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
      "POST /v2/models/m/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
      "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\n\r\n",  // no Content-Length
      "POST /v2/models/m/infer HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n",  // over the body bound
      Post("/v2/models/m/infer", std::string(300 << 10, 'b')),  // a large body: the host's
      Post("/v2/models/m/infer", "x", "X-Big: " + std::string(2000, 'h') + "\r\n"),
      "BREW /v2/models/m/infer HTTP/1.1\r\n\r\n",  // not HTTP llhttp knows
      Post("/v2/models/m/infer", "x", "Bad Name: 1\r\n"),  // not a token: the host's 400
      // a head within the bound by its text, over it with ": " and CRLF
      // counted per header, as the host counts it
      Post("/v2/models/m/infer", "x", [] {
        std::string h;
        for (int i = 0; i < 250; ++i) h += "a" + std::to_string(i % 10) + ":" + "v\r\n";
        return h;
      }()),
  };
  for (const std::string& req : declined) {
    reader = lane->NewReader();
    EXPECT_EQ(Feed(req), req) << req;
    EXPECT_TRUE(Taken().empty()) << req;
  }
}

TEST_F(LaneTest, AnEndlessHeadGoesToTheHost) {
  std::string head = "POST /v2/models/m/infer HTTP/1.1\r\nX-Long: ";
  EXPECT_EQ(Feed(head), "");
  std::string more(1500, 'v');
  EXPECT_EQ(Feed(more), head + more);
}

TEST_F(LaneTest, EofHeldWhileAnswering) {
  std::string host;
  Feed(Post("/v2/models/m/infer", "x") + "POST /v2/mo");
  EXPECT_TRUE(reader->HoldEof(&host));
  EXPECT_EQ(host, "");
  reader->Resume(kConn, true, 0, &host);
  EXPECT_FALSE(reader->HoldEof(&host));  // the request cut short goes to the host
  EXPECT_EQ(host, "POST /v2/mo");
}

TEST_F(LaneTest, PipelinedBytesPastTheBoundStopReads) {
  bool more = true;
  Feed(Post("/v2/models/m/infer", "x"), &more);
  EXPECT_TRUE(more);
  std::string big(5 << 20, 'z');
  Feed(big, &more);
  EXPECT_FALSE(more);
}

TEST(LaneWithoutNotify, QueuesForTheCallerToDrain) {
  std::shared_ptr<InferLane> lane;
  ASSERT_TRUE(InferLane::Create(1024, 1 << 20, &lane, false).ok());
  EXPECT_EQ(lane->notify_fd(), -1);
  lane->AddRoute("/v2/models/m/infer", 1);
  auto reader = lane->NewReader();
  std::string req = Post("/v2/models/m/infer", "x"), host;
  reader->Read(kConn, req.data(), req.size(), &host);
  std::vector<LaneRequest> out;
  EXPECT_EQ(lane->Drain(&out), 1u);
  EXPECT_EQ(out[0].body, "x");
}

TEST_F(LaneTest, RoutesCanBeCleared) {
  lane->ClearRoutes();
  std::string req = Post("/v2/models/m/infer", "x");
  EXPECT_EQ(Feed(req), req);
}

}  // namespace
}  // namespace pyserver::http1
