// The C++ embedding API against a real repository (PYSERVER_EMBED_REPO: an
// ONNX add_sub model, FP32 [16], max batch 8, written by `make test-embed`).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "pyserver_embed.h"

namespace {

using pyserver_embed::Server;
using pyserver_embed::Tensor;
using pyserver_embed::Tensors;

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> AsFloats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

Server* Shared() {
  static std::unique_ptr<Server> server = [] {
    const char* repo = std::getenv("PYSERVER_EMBED_REPO");
    std::string error;
    auto s = Server::Start(repo != nullptr ? repo : "", &error);
    EXPECT_NE(s, nullptr) << error;
    return s;
  }();
  return server.get();
}

TEST(Embed, InferAddSub) {
  Server* server = Shared();
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->ModelReady("add_sub"));
  EXPECT_FALSE(server->ModelReady("missing"));
  std::vector<float> a(16), b(16, 1.0f);
  for (int i = 0; i < 16; ++i) a[i] = static_cast<float>(i);
  Tensors in = {{"INPUT0", Tensor{"FP32", {1, 16}, Floats(a)}},
                {"INPUT1", Tensor{"FP32", {1, 16}, Floats(b)}}};
  Tensors out;
  std::string error;
  ASSERT_TRUE(server->Infer("add_sub", in, &out, &error)) << error;
  ASSERT_EQ(out.count("OUTPUT0"), 1u);
  EXPECT_EQ(out["OUTPUT0"].datatype, "FP32");
  EXPECT_EQ(out["OUTPUT0"].shape, (std::vector<int64_t>{1, 16}));
  std::vector<float> sum = AsFloats(out["OUTPUT0"].data), diff = AsFloats(out["OUTPUT1"].data);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(sum[i], a[i] + 1.0f);
    EXPECT_EQ(diff[i], a[i] - 1.0f);
  }
}

TEST(Embed, ErrorsCarryTritonsText) {
  Server* server = Shared();
  ASSERT_NE(server, nullptr);
  Tensors out;
  std::string error;
  EXPECT_FALSE(server->Infer("missing", {}, &out, &error));
  EXPECT_NE(error.find("Request for unknown model: 'missing' is not found"), std::string::npos)
      << error;
  Tensors one = {{"INPUT0", Tensor{"FP32", {1, 16}, std::string(64, '\0')}}};
  EXPECT_FALSE(server->Infer("add_sub", one, &out, &error));
  EXPECT_NE(error.find("expected 2 inputs but got 1 inputs"), std::string::npos) << error;
  Tensors bad = {{"INPUT0", Tensor{"FP32", {1, 16}, std::string(10, '\0')}}};
  EXPECT_FALSE(server->Infer("add_sub", bad, &out, &error));
}

TEST(Embed, ManyThreadsAtOnce) {
  Server* server = Shared();
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([server, t, &failures] {
      for (int i = 0; i < 25; ++i) {
        std::vector<float> a(16, static_cast<float>(t * 100 + i));
        Tensors in = {{"INPUT0", Tensor{"FP32", {1, 16}, Floats(a)}},
                      {"INPUT1", Tensor{"FP32", {1, 16}, Floats(a)}}};
        Tensors out;
        std::string error;
        if (!server->Infer("add_sub", in, &out, &error) ||
            AsFloats(out["OUTPUT0"].data)[3] != 2 * a[3]) {
          failures[t]++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

}  // namespace
