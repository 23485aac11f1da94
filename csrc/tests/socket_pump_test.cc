#include "pyserver/socket_pump.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace pyserver {
namespace {

using Kind = PumpEvent::Kind;

// A connected pair: the pump's end and the peer's (blocking).
struct Pair {
  int pump_end = -1;
  int peer = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    pump_end = fds[0];
    peer = fds[1];
  }
  ~Pair() {
    if (peer >= 0) ::close(peer);
  }
};

// Events until `done` says so or `limit` passes.
template <typename Done>
std::vector<PumpEvent> WaitFor(SocketPump* pump, Done done,
                               std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  std::vector<PumpEvent> got;
  auto until = std::chrono::steady_clock::now() + limit;
  while (!done(got) && std::chrono::steady_clock::now() < until) {
    pollfd p{pump->notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 50);
    pump->Drain(&got);
  }
  return got;
}

std::string DataOf(const std::vector<PumpEvent>& events, uint64_t id) {
  std::string all;
  for (const auto& e : events) {
    if (e.connection == id && e.kind == Kind::kData) all += e.data;
  }
  return all;
}

bool Has(const std::vector<PumpEvent>& events, uint64_t id, Kind kind) {
  for (const auto& e : events) {
    if (e.connection == id && e.kind == kind) return true;
  }
  return false;
}

std::string ReadExactly(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::read(fd, &out[got], n - got);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  out.resize(got);
  return out;
}

TEST(SocketPumpTest, NeedsAThread) {
  std::unique_ptr<SocketPump> pump;
  EXPECT_EQ(SocketPump::Create(0, &pump).code(), StatusCode::kInvalidArg);
}

TEST(SocketPumpTest, MovesBytesBothWays) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(2, &pump).ok());
  Pair a, b;
  uint64_t ia = pump->Attach(a.pump_end), ib = pump->Attach(b.pump_end);
  ASSERT_NE(ia, ib);
  ASSERT_EQ(::write(a.peer, "hello", 5), 5);
  ASSERT_EQ(::write(b.peer, "world", 5), 5);
  auto got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return DataOf(e, ia) == "hello" && DataOf(e, ib) == "world";
  });
  EXPECT_EQ(DataOf(got, ia), "hello");
  EXPECT_EQ(DataOf(got, ib), "world");
  EXPECT_GT(pump->Write(ia, "answer", 6), 0u);
  EXPECT_EQ(ReadExactly(a.peer, 6), "answer");
}

TEST(SocketPumpTest, LargeWritesArriveWholeAndInOrder) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(1, &pump).ok());
  Pair a;
  uint64_t id = pump->Attach(a.pump_end);
  std::string expect;
  for (int i = 0; i < 64; ++i) {
    std::string chunk(64 << 10, static_cast<char>('a' + i % 26));
    expect += chunk;
    pump->Write(id, chunk.data(), chunk.size());  // far more than the socket holds
  }
  pump->WatchDrain(id, 0);
  EXPECT_EQ(ReadExactly(a.peer, expect.size()), expect);
  auto got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return Has(e, id, Kind::kDrained);
  });
  EXPECT_TRUE(Has(got, id, Kind::kDrained));
  EXPECT_EQ(pump->Unsent(id), 0u);
}

TEST(SocketPumpTest, PeerShutdownIsEofThenCloseSendsWhatIsQueued) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(1, &pump).ok());
  Pair a;
  uint64_t id = pump->Attach(a.pump_end);
  ASSERT_EQ(::write(a.peer, "last", 4), 4);
  ::shutdown(a.peer, SHUT_WR);
  auto got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return Has(e, id, Kind::kEof);
  });
  EXPECT_EQ(DataOf(got, id), "last");
  ASSERT_TRUE(Has(got, id, Kind::kEof));
  pump->Write(id, "bye", 3);
  pump->Close(id);
  EXPECT_EQ(ReadExactly(a.peer, 3), "bye");
  char c;
  EXPECT_EQ(::read(a.peer, &c, 1), 0);  // closed after the queued bytes
  got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return Has(e, id, Kind::kClosed);
  });
  EXPECT_TRUE(Has(got, id, Kind::kClosed));
  EXPECT_EQ(pump->Write(id, "x", 1), 0u);  // gone: dropped
}

TEST(SocketPumpTest, PausedReadingHoldsDataUntilResumed) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(1, &pump).ok());
  Pair a;
  uint64_t id = pump->Attach(a.pump_end);
  ASSERT_EQ(::write(a.peer, "one", 3), 3);
  auto got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return DataOf(e, id) == "one";
  });
  ASSERT_EQ(DataOf(got, id), "one");
  pump->SetReading(id, false);
  // A write round trip through the worker: the pause is applied after it.
  pump->Write(id, "x", 1);
  ASSERT_EQ(ReadExactly(a.peer, 1), "x");
  ASSERT_EQ(::write(a.peer, "two", 3), 3);
  got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return !DataOf(e, id).empty();
  }, std::chrono::milliseconds(300));
  EXPECT_EQ(DataOf(got, id), "");  // nothing while paused
  pump->SetReading(id, true);
  got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return DataOf(e, id) == "two";
  });
  EXPECT_EQ(DataOf(got, id), "two");
}

TEST(SocketPumpTest, AbortAndPeerResetEndInOneClosedEvent) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(2, &pump).ok());
  Pair a, b;
  uint64_t ia = pump->Attach(a.pump_end), ib = pump->Attach(b.pump_end);
  pump->Write(ia, "never mind", 10);
  pump->Abort(ia);
  ::close(b.peer);
  b.peer = -1;
  auto got = WaitFor(pump.get(), [&](const std::vector<PumpEvent>& e) {
    return Has(e, ia, Kind::kClosed) && Has(e, ib, Kind::kClosed);
  });
  int closed_a = 0, closed_b = 0;
  for (const auto& e : got) {
    closed_a += e.connection == ia && e.kind == Kind::kClosed;
    closed_b += e.connection == ib && e.kind == Kind::kClosed;
  }
  EXPECT_EQ(closed_a, 1);
  EXPECT_EQ(closed_b, 1);
}

TEST(SocketPumpTest, ManyWritersFromManyThreads) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(2, &pump).ok());
  constexpr int kConns = 8, kWrites = 200;
  std::vector<std::unique_ptr<Pair>> pairs;
  std::vector<uint64_t> ids;
  for (int i = 0; i < kConns; ++i) {
    pairs.push_back(std::make_unique<Pair>());
    ids.push_back(pump->Attach(pairs.back()->pump_end));
  }
  std::vector<std::thread> writers;
  for (int i = 0; i < kConns; ++i) {
    writers.emplace_back([&, i] {
      for (int k = 0; k < kWrites; ++k) pump->Write(ids[i], "0123456789", 10);
    });
  }
  for (auto& t : writers) t.join();
  for (int i = 0; i < kConns; ++i) {
    EXPECT_EQ(ReadExactly(pairs[i]->peer, 10 * kWrites).size(), 10u * kWrites);
  }
}

// A host answering every request of many connections as fast as they come:
// what the host asks of the pump while a worker is taking its list must not
// wait for a wake-up that never comes (a lost one left connections unread
// and unanswered for good).
TEST(SocketPumpTest, EveryRequestIsAnsweredUnderLoad) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(1, &pump).ok());
  constexpr int kConns = 16, kTrips = 400;
  std::vector<std::unique_ptr<Pair>> pairs;
  std::vector<std::thread> peers;
  std::atomic<int> finished{0};
  for (int i = 0; i < kConns; ++i) {
    pairs.push_back(std::make_unique<Pair>());
    pump->Attach(pairs.back()->pump_end);
    int peer = pairs.back()->peer;
    peers.emplace_back([peer, &finished] {
      for (int k = 0; k < kTrips; ++k) {
        if (::write(peer, "ping", 4) != 4 || ReadExactly(peer, 4) != "pong") return;
      }
      ++finished;
    });
  }
  // Each "ping" is answered by one "pong" (4-byte requests may arrive joined).
  std::vector<PumpEvent> got;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t answered = 0;
  while (answered < static_cast<size_t>(kConns) * kTrips &&
         std::chrono::steady_clock::now() < until) {
    pollfd p{pump->notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 50);
    got.clear();
    pump->Drain(&got);
    for (const auto& e : got) {
      if (e.kind != Kind::kData) continue;
      for (size_t n = 0; n + 4 <= e.data.size(); n += 4) {
        pump->Write(e.connection, "pong", 4);
        ++answered;
      }
    }
  }
  EXPECT_EQ(answered, static_cast<size_t>(kConns) * kTrips);
  // The last answers are on their way (the pump sends them)
  while (finished.load() < kConns && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(finished.load(), kConns);
  pump.reset();  // closes the pump's ends: a stuck peer's read ends
  for (auto& t : peers) t.join();
}

TEST(SocketPumpTest, DestroyedWithConnectionsOpen) {
  Pair a;
  {
    std::unique_ptr<SocketPump> pump;
    ASSERT_TRUE(SocketPump::Create(1, &pump).ok());
    pump->Attach(a.pump_end);
  }
  char c;
  EXPECT_EQ(::read(a.peer, &c, 1), 0);  // the pump closed its end
}

TEST(SocketPumpTest, AFailedThreadClosesItsConnectionsAndServesAgain) {
  std::unique_ptr<SocketPump> pump;
  ASSERT_TRUE(SocketPump::Create(2, &pump).ok());
  // ids go round the threads: with two, odd and even ids have different ones
  Pair a, b;
  uint64_t ida = pump->Attach(a.pump_end);
  uint64_t idb = pump->Attach(b.pump_end);
  ASSERT_NE(ida % 2, idb % 2);
  ASSERT_EQ(::write(a.peer, "a", 1), 1);
  ASSERT_EQ(::write(b.peer, "b", 1), 1);
  WaitFor(pump.get(), [&](const auto& ev) { return DataOf(ev, ida) == "a" && DataOf(ev, idb) == "b"; });

  int broken = static_cast<int>(ida % 2);  // the thread that serves `a`
  pump->BreakThreadForTesting(broken);
  auto events = WaitFor(pump.get(), [&](const auto& ev) {
    for (const auto& e : ev) {
      if (e.kind == Kind::kThreadRestarted) return true;
    }
    return false;
  });
  const PumpEvent* note = nullptr;
  for (const auto& e : events) {
    if (e.kind == Kind::kThreadRestarted) note = &e;
  }
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->connection, 0u);
  EXPECT_EQ(note->error, EINVAL);
  EXPECT_NE(note->data.find("socket pump thread " + std::to_string(broken) + " failed"),
            std::string::npos) << note->data;
  EXPECT_NE(note->data.find("1 connection(s) were closed"), std::string::npos) << note->data;
  // `a` was closed with the reason, its peer sees the end; `b` is untouched
  bool closed_aborted = false;
  for (const auto& e : events) {
    if (e.connection == ida && e.kind == Kind::kClosed) closed_aborted = e.error == ECONNABORTED;
    EXPECT_FALSE(e.connection == idb && e.kind == Kind::kClosed);
  }
  EXPECT_TRUE(closed_aborted);
  char c;
  EXPECT_EQ(::read(a.peer, &c, 1), 0);
  pump->Write(idb, "still", 5);
  EXPECT_EQ(ReadExactly(b.peer, 5), "still");

  // the restarted thread takes new connections and moves their bytes
  Pair d, e;
  uint64_t idd = pump->Attach(d.pump_end);
  uint64_t ide = pump->Attach(e.pump_end);
  uint64_t on_broken = (idd % 2 == static_cast<uint64_t>(broken)) ? idd : ide;
  Pair& peer = on_broken == idd ? d : e;
  ASSERT_EQ(::write(peer.peer, "again", 5), 5);
  auto later = WaitFor(pump.get(), [&](const auto& ev) { return DataOf(ev, on_broken) == "again"; });
  EXPECT_EQ(DataOf(later, on_broken), "again");
  pump->Write(on_broken, "ok", 2);
  EXPECT_EQ(ReadExactly(peer.peer, 2), "ok");
}


// A reader that keeps the bytes up to and including each '!' (one "request"
// at a time, answered by Resume(answered)) and passes on a '?' and all after
// it until the host has consumed them; it holds EOF while answering.
class BangReader : public ConnectionReader {
 public:
  std::atomic<int> taken{0};
  std::atomic<bool> hosting{false};  // the host's since a '?'
  std::string kept;

  bool Read(uint64_t, const char* data, size_t size, std::string* host) override {
    if (to_host_) {
      host->append(data, size);
      given_ += size;
      return true;
    }
    held_.append(data, size);
    Scan(host);
    return held_.size() < 64;
  }
  void Resume(uint64_t, bool answered, uint64_t consumed, std::string* host) override {
    if (answering_ && answered) {
      answering_ = false;
      Scan(host);
    } else if (to_host_ && consumed == given_) {
      to_host_ = false;
      hosting = false;
    }
  }
  bool HoldEof(std::string*) override { return answering_; }
  ReaderProgress Progress() const override {
    ReaderProgress p;
    p.state = answering_flag_.load() ? ReaderProgress::kAnswering : ReaderProgress::kIdle;
    return p;
  }

 private:
  void Scan(std::string* host) {
    while (!answering_ && !to_host_ && !held_.empty()) {
      if (held_[0] == '?') {
        host->append(held_);
        given_ += held_.size();
        held_.clear();
        to_host_ = true;
        hosting = true;
        return;
      }
      size_t bang = held_.find('!');
      if (bang == std::string::npos) return;
      kept += held_.substr(0, bang + 1);
      held_.erase(0, bang + 1);
      answering_ = true;
      answering_flag_ = true;
      ++taken;
    }
    answering_flag_ = answering_;
  }
  std::string held_;
  bool answering_ = false, to_host_ = false;
  std::atomic<bool> answering_flag_{false};
  uint64_t given_ = 0;
};

// Polls `done` (what the reader's thread changes) for up to 5 s.
template <typename Done>
void WaitUntil(Done done) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A one-thread pump with one connection, read by a BangReader.
struct ReadPump {
  std::unique_ptr<SocketPump> pump;
  Pair pair;
  BangReader* reader = nullptr;
  uint64_t id = 0;
  ReadPump() {
    EXPECT_TRUE(SocketPump::Create(1, &pump).ok());
    auto owned = std::make_unique<BangReader>();
    reader = owned.get();
    id = pump->Attach(pair.pump_end, std::move(owned));
  }
  void WaitTaken(int n) {
    WaitUntil([&] { return reader->taken.load() >= n; });
  }
};

TEST(SocketPumpTest, AReaderTakesWhatItHandlesAndPassesOnTheRest) {
  ReadPump rp;
  std::unique_ptr<SocketPump>& pump = rp.pump;
  Pair& pair = rp.pair;
  BangReader* reader = rp.reader;
  uint64_t id = rp.id;
  // two "requests": the first is taken, the second waits for its answer
  ASSERT_EQ(::write(pair.peer, "one!two!", 8), 8);
  rp.WaitTaken(1);
  ASSERT_EQ(reader->taken.load(), 1);
  ReaderProgress progress;
  ASSERT_TRUE(pump->Progress(id, &progress));
  EXPECT_EQ(progress.state, ReaderProgress::kAnswering);
  pump->Write(id, "A1", 2);
  pump->Resume(id, true, 0);
  EXPECT_EQ(ReadExactly(pair.peer, 2), "A1");
  rp.WaitTaken(2);
  EXPECT_EQ(reader->taken.load(), 2);
  pump->Resume(id, true, 0);
  // a '?' goes to the host with what follows, until it hands the connection back
  ASSERT_EQ(::write(pair.peer, "?ask", 4), 4);
  auto got = WaitFor(pump.get(), [&](const auto& ev) { return DataOf(ev, id) == "?ask"; });
  EXPECT_EQ(DataOf(got, id), "?ask");
  pump->Resume(id, false, 3);  // not all of it: still the host's
  ASSERT_EQ(::write(pair.peer, "x!", 2), 2);
  got = WaitFor(pump.get(), [&](const auto& ev) { return DataOf(ev, id) == "x!"; });
  EXPECT_EQ(DataOf(got, id), "x!");
  pump->Resume(id, false, 6);  // all of it: the reader's again
  WaitUntil([&] { return !reader->hosting.load(); });
  ASSERT_EQ(::write(pair.peer, "three!", 6), 6);
  rp.WaitTaken(3);
  EXPECT_EQ(reader->taken.load(), 3);
  EXPECT_EQ(reader->kept, "one!two!three!");
  // EOF while answering is held until the answer is out
  ::shutdown(pair.peer, SHUT_WR);
  got = WaitFor(pump.get(), [&](const auto& ev) { return Has(ev, id, Kind::kEof); },
                std::chrono::milliseconds(200));
  EXPECT_FALSE(Has(got, id, Kind::kEof));
  pump->Write(id, "A3", 2);
  pump->Resume(id, true, 0);
  got = WaitFor(pump.get(), [&](const auto& ev) { return Has(ev, id, Kind::kEof); });
  EXPECT_TRUE(Has(got, id, Kind::kEof));
  EXPECT_EQ(ReadExactly(pair.peer, 2), "A3");
}

TEST(SocketPumpTest, AnAnswerThatLeavesAtOnceChangesNoEpollInterest) {
  ReadPump rp;
  ASSERT_EQ(::write(rp.pair.peer, "one!", 4), 4);
  rp.WaitTaken(1);
  uint64_t before = rp.pump->interest_changes();
  // what the HTTP infer lane does per request: its answer, then the
  // connection back to the reader, in one call
  rp.pump->Write(rp.id, "A1", 2);
  rp.pump->Resume(rp.id, true, 0);
  EXPECT_EQ(ReadExactly(rp.pair.peer, 2), "A1");
  ASSERT_EQ(::write(rp.pair.peer, "two!", 4), 4);
  rp.WaitTaken(2);
  // the send found room: EPOLLOUT was never armed around it
  EXPECT_EQ(rp.pump->interest_changes(), before);
}

TEST(SocketPumpTest, AFullReaderStopsReadsUntilResumed) {
  ReadPump rp;
  std::string burst = "a!" + std::string(100, 'b') + "!c!";
  ASSERT_EQ(::write(rp.pair.peer, burst.data(), burst.size()),
            static_cast<ssize_t>(burst.size()));
  rp.WaitTaken(1);
  for (int i = 2; i <= 3; ++i) {
    rp.pump->Resume(rp.id, true, 0);
    rp.WaitTaken(i);
  }
  EXPECT_EQ(rp.reader->taken.load(), 3);
  EXPECT_EQ(rp.reader->kept, burst);
}
}  // namespace
}  // namespace pyserver
