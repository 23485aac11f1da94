// PlainSpec: which requests take the plain case, and which go to the walk.
#include "pyserver/plain_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pyserver {
namespace {

struct Tensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};

// A request's batch size, or -1 where the rules decline it (as the readers
// apply them: every input once, then every requested output).
int64_t Check(const PlainSpec& spec, const std::vector<Tensor>& inputs,
              const std::vector<std::string>& outputs) {
  if (inputs.size() != spec.inputs().size()) return -1;
  PlainSpec::Match match;
  for (const Tensor& t : inputs) {
    if (spec.MatchInput(t.name, t.datatype, t.shape.data(), t.shape.size(), &match) < 0) {
      return -1;
    }
  }
  for (const std::string& name : outputs) {
    if (spec.MatchOutput(name, &match) < 0) return -1;
  }
  return match.batch_size;
}

PlainSpec Batching() {
  return PlainSpec({{"A", "FP32", {2}}, {"B", "INT32", {2, 3}}}, {"X", "Y"}, 4);
}

TEST(PlainSpec, APlainRequestGivesItsBatchSize) {
  const PlainSpec spec = Batching();
  EXPECT_EQ(Check(spec, {{"A", "FP32", {1, 2}}, {"B", "INT32", {1, 2, 3}}}, {}), 1);
  EXPECT_EQ(Check(spec, {{"B", "INT32", {4, 2, 3}}, {"A", "FP32", {4, 2}}}, {"Y", "X"}), 4);
  EXPECT_EQ(Check(spec, {{"A", "FP32", {3, 2}}, {"B", "INT32", {3, 2, 3}}}, {"X"}), 3);
}

TEST(PlainSpec, MatchesSayWhichInputAndOutputByIndex) {
  const PlainSpec spec = Batching();
  PlainSpec::Match match;
  const int64_t b[] = {2, 2, 3};
  const int64_t a[] = {2, 2};
  EXPECT_EQ(spec.MatchInput("B", "INT32", b, 3, &match), 1);
  EXPECT_EQ(match.batch_size, 2);
  EXPECT_EQ(spec.MatchInput("A", "FP32", a, 2, &match), 0);
  EXPECT_EQ(match.inputs_seen, 3u);
  EXPECT_EQ(spec.MatchOutput("Y", &match), 1);
  EXPECT_EQ(spec.MatchOutput("X", &match), 0);
  EXPECT_EQ(spec.MatchOutput("X", &match), -1);  // asked twice
}

TEST(PlainSpec, AnythingElseGoesToTheWalk) {
  const PlainSpec spec = Batching();
  const std::vector<std::pair<std::vector<Tensor>, std::vector<std::string>>> declined = {
      {{{"A", "FP32", {1, 2}}}, {}},                                   // an input missing
      {{{"A", "FP32", {1, 2}}, {"A", "FP32", {1, 2}}}, {}},            // one input twice
      {{{"A", "FP32", {1, 2}}, {"C", "INT32", {1, 2, 3}}}, {}},        // not the model's
      {{{"A", "FP16", {1, 2}}, {"B", "INT32", {1, 2, 3}}}, {}},        // another datatype
      {{{"A", "FP32", {1, 3}}, {"B", "INT32", {1, 2, 3}}}, {}},        // another shape
      {{{"A", "FP32", {2}}, {"B", "INT32", {1, 2, 3}}}, {}},           // no batch dimension
      {{{"A", "FP32", {0, 2}}, {"B", "INT32", {0, 2, 3}}}, {}},        // no rows
      {{{"A", "FP32", {5, 2}}, {"B", "INT32", {5, 2, 3}}}, {}},        // past max_batch_size
      {{{"A", "FP32", {1, 2}}, {"B", "INT32", {2, 2, 3}}}, {}},        // batch sizes differ
      {{{"A", "FP32", {1, 2}}, {"B", "INT32", {1, 2, 3}}}, {"Z"}},     // an output it lacks
      {{{"A", "FP32", {1, 2}}, {"B", "INT32", {1, 2, 3}}}, {"X", "X"}},  // asked twice
      {{{"a", "FP32", {1, 2}}, {"B", "INT32", {1, 2, 3}}}, {}},        // names are exact
  };
  for (const auto& [inputs, outputs] : declined) {
    EXPECT_EQ(Check(spec, inputs, outputs), -1) << inputs[0].name << " " << inputs.size();
  }
}

TEST(PlainSpec, AModelThatDoesNotBatchTakesItsDimsAsTheyAre) {
  const PlainSpec spec({{"A", "FP32", {2}}}, {"X"}, 0);
  EXPECT_FALSE(spec.batching());
  EXPECT_EQ(Check(spec, {{"A", "FP32", {2}}}, {"X"}), 0);
  EXPECT_EQ(Check(spec, {{"A", "FP32", {1, 2}}}, {}), -1);
}

TEST(PlainSpec, AVariableDimIsNeverPlain) {
  // the request path makes no spec for such a model; one made anyway matches nothing
  const PlainSpec spec({{"A", "FP32", {-1}}}, {"X"}, 0);
  EXPECT_EQ(Check(spec, {{"A", "FP32", {-1}}}, {}), -1);
  EXPECT_EQ(Check(spec, {{"A", "FP32", {3}}}, {}), -1);
}

TEST(PlainSpec, Past64InputsOrOutputsEveryRequestGoesToTheWalk) {
  std::vector<PlainSpec::Input> inputs;
  std::vector<Tensor> request;
  for (int i = 0; i < 65; ++i) {
    inputs.push_back({"I" + std::to_string(i), "FP32", {1}});
    request.push_back({"I" + std::to_string(i), "FP32", {1}});
  }
  EXPECT_EQ(Check(PlainSpec(inputs, {"X"}, 0), request, {}), -1);
  inputs.pop_back();
  request.pop_back();
  EXPECT_EQ(Check(PlainSpec(inputs, {"X"}, 0), request, {}), 0);  // 64: each has its bit
  std::vector<std::string> outputs;
  for (int i = 0; i < 65; ++i) outputs.push_back("O" + std::to_string(i));
  const PlainSpec many_outputs({{"A", "FP32", {1}}}, outputs, 0);
  EXPECT_EQ(Check(many_outputs, {{"A", "FP32", {1}}}, {}), 0);
  EXPECT_EQ(Check(many_outputs, {{"A", "FP32", {1}}}, {"O0"}), -1);
}

TEST(PlainSpec, ReadersOnManyThreadsShareOneSpec) {
  const PlainSpec spec = Batching();
  std::vector<std::thread> readers;
  std::vector<int64_t> sums(4, 0);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&spec, &sums, t] {
      for (int64_t n = 1; n <= 4; ++n) {
        for (int i = 0; i < 500; ++i) {
          sums[t] += Check(spec, {{"A", "FP32", {n, 2}}, {"B", "INT32", {n, 2, 3}}}, {"X"});
        }
      }
    });
  }
  for (std::thread& r : readers) r.join();
  for (int64_t sum : sums) EXPECT_EQ(sum, 500 * (1 + 2 + 3 + 4));
}

}  // namespace
}  // namespace pyserver
