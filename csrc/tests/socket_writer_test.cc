#include "pyserver/socket_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace pyserver {
namespace {

// A connected pair: `server` is what the writer sends on (non-blocking, as
// an event loop's socket is), `client` the peer the test reads from.
struct Pair {
  int server = -1;
  int client = -1;
  explicit Pair(int sndbuf = 0) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server = fds[0];
    client = fds[1];
    fcntl(server, F_SETFL, fcntl(server, F_GETFL) | O_NONBLOCK);
    if (sndbuf > 0) {
      setsockopt(server, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
      setsockopt(client, SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
    }
  }
  ~Pair() {
    if (server >= 0) close(server);
    if (client >= 0) close(client);
  }
  // Reads until `n` bytes or the end of the stream (or 5 s pass).
  std::string Read(size_t n, bool* eof = nullptr) {
    std::string got;
    char buf[65536];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      pollfd p{client, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      ssize_t r = read(client, buf, sizeof(buf));
      if (r == 0) {
        if (eof != nullptr) *eof = true;
        break;
      }
      if (r > 0) got.append(buf, static_cast<size_t>(r));
    }
    return got;
  }
};

std::unique_ptr<SocketWriter> NewWriter() {
  std::unique_ptr<SocketWriter> w;
  EXPECT_TRUE(SocketWriter::Create(&w).ok());
  return w;
}

std::vector<OutChunk> Chunks(std::initializer_list<std::string> parts) {
  std::vector<OutChunk> out;
  for (const auto& p : parts) out.push_back(OutChunk::Own(p));
  return out;
}

template <typename F>
bool Eventually(F done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(SocketWriter, SendOnAnIdleSocketGoesOutOnTheCaller) {
  auto w = NewWriter();
  Pair pair;
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  auto chunks = Chunks({"HTTP/1.1 200 OK\r\n", "\r\n"});
  EXPECT_TRUE(w->Send(id, &chunks));
  EXPECT_EQ(pair.Read(19), "HTTP/1.1 200 OK\r\n\r\n");
  EXPECT_EQ(w->caller_sends(), 1u);
  EXPECT_EQ(w->thread_sends(), 0u);
  EXPECT_EQ(w->Queued(id), 0u);
}

TEST(SocketWriter, QueuedChunksGoOutOnTheThreadInOrderAfterFlush) {
  auto w = NewWriter();
  Pair pair;
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  std::string expected;
  for (int i = 0; i < 200; ++i) {  // more chunks than one sendmsg takes
    std::string part = "response " + std::to_string(i) + ";";
    expected += part;
    auto chunks = Chunks({part});
    if (i % 7 == 0) {
      w->Send(id, &chunks);  // behind what is queued: queued too, in order
    } else {
      w->Queue(id, &chunks);
    }
  }
  w->Flush();
  EXPECT_EQ(pair.Read(expected.size()), expected);
  EXPECT_GE(w->thread_sends(), 1u);
  EXPECT_TRUE(Eventually([&] { return w->Queued(id) == 0; }));
}

TEST(SocketWriter, AFullSocketIsWatchedUntilThePeerReads) {
  auto w = NewWriter();
  Pair pair(16 << 10);
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  std::string big(8 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + i / 4096);
  auto chunks = Chunks({big.substr(0, 3 << 20), big.substr(3 << 20)});
  EXPECT_FALSE(w->Send(id, &chunks));  // the socket cannot take 8 MiB at once
  EXPECT_GT(w->Queued(id), 0u);
  auto tail = Chunks({"end"});
  w->Queue(id, &tail);
  w->Flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow reader
  std::string got = pair.Read(big.size() + 3);
  ASSERT_EQ(got.size(), big.size() + 3);
  EXPECT_TRUE(got == big + "end");
  EXPECT_TRUE(Eventually([&] { return w->Queued(id) == 0; }));
}

TEST(SocketWriter, CloseEndsTheStreamAfterTheLastByte) {
  auto w = NewWriter();
  Pair pair(16 << 10);
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  std::string big(1 << 20, 'x');
  auto chunks = Chunks({big});
  w->Send(id, &chunks);
  w->Close(id);
  close(pair.server);  // the event loop closes its own descriptor at once
  pair.server = -1;
  bool eof = false;
  std::string got = pair.Read(big.size() + 1, &eof);
  EXPECT_EQ(got.size(), big.size());
  EXPECT_TRUE(eof);
  EXPECT_TRUE(Eventually([&] { return w->open_count() == 0; }));
}

TEST(SocketWriter, AbortDropsWhatIsQueued) {
  auto w = NewWriter();
  Pair pair(16 << 10);
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  std::string big(4 << 20, 'y');
  auto chunks = Chunks({big});
  w->Send(id, &chunks);
  EXPECT_GT(w->Queued(id), 0u);
  w->Abort(id);
  EXPECT_EQ(w->Queued(id), 0u);
  EXPECT_EQ(w->open_count(), 0u);
  close(pair.server);
  pair.server = -1;
  bool eof = false;
  std::string got = pair.Read(big.size(), &eof);
  EXPECT_LT(got.size(), big.size());
  EXPECT_TRUE(eof);
}

TEST(SocketWriter, APeerThatWentAwayFailsTheSocketWithoutASignal) {
  auto w = NewWriter();
  Pair pair;
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  close(pair.client);
  pair.client = -1;
  auto chunks = Chunks({"lost"});
  EXPECT_FALSE(w->Send(id, &chunks));  // EPIPE, not SIGPIPE
  EXPECT_TRUE(w->Failed(id));
  auto more = Chunks({"dropped"});
  w->Queue(id, &more);
  EXPECT_EQ(w->Queued(id), 0u);
  w->Close(id);
  EXPECT_EQ(w->open_count(), 0u);
}

TEST(SocketWriter, BorrowedBuffersComeBackOnceSentOrDropped) {
  auto w = NewWriter();
  Pair pair;
  uint64_t id;
  ASSERT_TRUE(w->Open(pair.server, &id).ok());
  static const char kBody[] = "borrowed body";
  std::vector<OutChunk> chunks;
  chunks.push_back(OutChunk::Own("head;"));
  chunks.push_back(OutChunk::Borrow(kBody, sizeof(kBody) - 1, 41));
  EXPECT_TRUE(w->Send(id, &chunks));
  std::vector<OutChunk> queued;
  queued.push_back(OutChunk::Borrow(kBody, sizeof(kBody) - 1, 42));
  w->Queue(id, &queued);
  w->Flush();
  std::string expected = std::string("head;") + kBody + kBody;
  EXPECT_EQ(pair.Read(expected.size()), expected);
  EXPECT_TRUE(Eventually([&] { return w->HasReleased() && w->Queued(id) == 0; }));
  std::vector<Token> released;
  EXPECT_TRUE(Eventually([&] {
    w->TakeReleased(&released);
    return released.size() == 2;
  }));
  EXPECT_EQ(released, (std::vector<Token>{41, 42}));

  // dropped by Stop: still released
  Pair slow(16 << 10);
  uint64_t id2;
  ASSERT_TRUE(w->Open(slow.server, &id2).ok());
  std::string big(2 << 20, 'z');
  std::vector<OutChunk> pending;
  pending.push_back(OutChunk::Borrow(big.data(), big.size(), 43));
  w->Send(id2, &pending);
  w->Stop();
  released.clear();
  w->TakeReleased(&released);
  EXPECT_EQ(released, (std::vector<Token>{43}));
  EXPECT_EQ(w->open_count(), 0u);
  uint64_t id3;
  EXPECT_FALSE(w->Open(slow.server, &id3).ok());
}

TEST(SocketWriter, ManySocketsFromTwoThreadsKeepTheirOrder) {
  auto w = NewWriter();
  constexpr int kSockets = 8;
  constexpr int kMessages = 300;
  std::vector<std::unique_ptr<Pair>> pairs;
  std::vector<uint64_t> ids;
  for (int i = 0; i < kSockets; ++i) {
    pairs.push_back(std::make_unique<Pair>(32 << 10));
    uint64_t id;
    ASSERT_TRUE(w->Open(pairs.back()->server, &id).ok());
    ids.push_back(id);
  }
  auto produce = [&](int first) {
    for (int m = 0; m < kMessages; ++m) {
      for (int s = first; s < kSockets; s += 2) {
        auto chunks = Chunks({std::to_string(m) + ","});
        if (m % 3 == 0) {
          w->Send(ids[s], &chunks);
        } else {
          w->Queue(ids[s], &chunks);
        }
      }
      w->Flush();
    }
  };
  std::thread a(produce, 0), b(produce, 1);
  std::string expected;
  for (int m = 0; m < kMessages; ++m) expected += std::to_string(m) + ",";
  for (int s = 0; s < kSockets; ++s) {
    EXPECT_EQ(pairs[s]->Read(expected.size()), expected) << "socket " << s;
  }
  a.join();
  b.join();
}

}  // namespace
}  // namespace pyserver
