// ModuleTracer: forward/backward slices named by module path, nested and ordered as the modules run,
// gradients unchanged, and under DDP each bucket launch inside the backward slice of the layer whose
// gradient closed the bucket (before the earlier layer's backward starts), in a merged trace that parses.
#include "ddp/module_trace.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ddp/distributed_data_parallel.h"
#include "nlohmann/json.hpp"
#include "nn/layers.h"
#include "tensor/factory.h"
#include "tensor/ops.h"
#include "testing/run_ranks.h"

namespace ddp {
namespace {

using Entries = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

struct Slice {
  int64_t start = 0, end = 0;
};

// "forward <path>" / "backward <path>" slices of one recorder's events, by name (the last one wins).
std::map<std::string, Slice> Slices(const nlohmann::json& events) {
  std::map<std::string, Slice> slices;
  for (const auto& e : events) {
    if (e["ph"] != "X" || e["tid"] != TraceRecorder::kModuleTrack) continue;
    const int64_t ts = e["ts"].get<int64_t>();
    slices[e["name"].get<std::string>()] = {ts, ts + e["dur"].get<int64_t>()};
  }
  return slices;
}

nlohmann::json Events(const TraceRecorder& trace) { return nlohmann::json::parse("[" + trace.EventsJson() + "]"); }

bool Contains(const Slice& outer, const Slice& inner) { return outer.start <= inner.start && inner.end <= outer.end; }

// {block: {fc1, relu1}, fc2}: a container with children, so nesting shows.
std::shared_ptr<Module> NestedModel() {
  Generator g(7);
  auto block = std::make_shared<nn::Sequential>(Entries{
      {"fc1", std::make_shared<nn::Linear>(64, 256, g)},
      {"relu1", std::make_shared<nn::ReLU>()},
  });
  return std::make_shared<nn::Sequential>(Entries{{"block", block}, {"fc2", std::make_shared<nn::Linear>(256, 10, g)}});
}

Tensor Loss(Module& model) {
  Generator g(11);
  const Tensor x = Normal({32, 64}, 0.0f, 1.0f, g);
  const Tensor y = FromVector(std::vector<int64_t>(32, 3), {32});
  return CrossEntropy(model.Forward(x), y);
}

TEST(ModuleTraceTest, SlicesAreNamedByPathNestedAndOrdered) {
  std::shared_ptr<Module> model = NestedModel();
  ModuleTracer tracer(*model, /*rank=*/0);
  Loss(*model).Backward();
  const std::map<std::string, Slice> s = Slices(Events(tracer.trace()));
  for (const char* name : {"forward block", "forward block.fc1", "forward block.relu1", "forward fc2", "backward block",
                           "backward block.fc1", "backward block.relu1", "backward fc2"}) {
    ASSERT_EQ(s.count(name), 1u) << name << " missing; trace: " << tracer.trace().EventsJson();
  }
  EXPECT_EQ(s.size(), 8u) << tracer.trace().EventsJson();  // the root (called through Forward) has none
  // Forward: block holds its children, in call order; fc2 runs after block.
  EXPECT_TRUE(Contains(s.at("forward block"), s.at("forward block.fc1")));
  EXPECT_TRUE(Contains(s.at("forward block"), s.at("forward block.relu1")));
  EXPECT_LE(s.at("forward block.fc1").end, s.at("forward block.relu1").start);
  EXPECT_LE(s.at("forward block").end, s.at("forward fc2").start);
  // Backward: the reverse order, with the same nesting.
  EXPECT_LE(s.at("forward fc2").end, s.at("backward fc2").start);
  EXPECT_LE(s.at("backward fc2").end, s.at("backward block").start);
  EXPECT_TRUE(Contains(s.at("backward block"), s.at("backward block.relu1")));
  EXPECT_TRUE(Contains(s.at("backward block"), s.at("backward block.fc1")));
  EXPECT_LE(s.at("backward block.relu1").end, s.at("backward block.fc1").start);
}

// The tracer's identity nodes leave every gradient as it was, and a second pass records again.
TEST(ModuleTraceTest, GradientsAreUnchangedAndEveryPassIsRecorded) {
  std::shared_ptr<Module> plain = NestedModel();
  Loss(*plain).Backward();
  std::shared_ptr<Module> traced = NestedModel();
  {
    ModuleTracer tracer(*traced, 0);
    Loss(*traced).Backward();
    traced->ZeroGrad();
    Loss(*traced).Backward();
    int backward_fc2 = 0;
    for (const auto& e : Events(tracer.trace())) backward_fc2 += e["name"] == "backward fc2";
    EXPECT_EQ(backward_fc2, 2);
  }
  const NamedTensors a = plain->NamedParameters(), b = traced->NamedParameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.grad().ToVector<float>(), b[i].second.grad().ToVector<float>()) << a[i].first;
  }
  // Destroyed: no observer left behind, later calls record nothing and do not crash.
  Loss(*traced).Backward();
}

// Under DDP (one bucket per parameter), each "launch bucket" instant lies inside the backward slice of
// the module owning the last gradient before it, and a launch closed by fc2 comes before fc1's backward.
TEST(ModuleTraceTest, BucketLaunchesFallInTheBackwardOfTheLayerThatClosedThem) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/module_trace.json");
  RunRanks(2, [&](int rank, ProcessGroup& group) {
    Generator g(3);
    std::shared_ptr<Module> model = std::make_shared<nn::Sequential>(Entries{
        {"fc1", std::make_shared<nn::Linear>(32, 512, g)},
        {"relu", std::make_shared<nn::ReLU>()},
        {"fc2", std::make_shared<nn::Linear>(512, 512, g)},
    });
    DdpOptions options;
    options.reducer.record_trace = true;
    options.reducer.caps.first_bucket_cap_bytes = 0;
    options.reducer.caps.bucket_cap_bytes = 0;
    auto ddp = DistributedDataParallel::Create(model, &group, options);
    ASSERT_TRUE(ddp.ok()) << ddp.status();
    ModuleTracer tracer(*model, rank);
    Generator data(100 + rank);
    for (int step = 0; step < 3; ++step) {
      const Tensor x = Normal({16, 32}, 0.0f, 1.0f, data);
      CrossEntropy((*ddp)->Forward(x), FromVector(std::vector<int64_t>(16, 1), {16})).Backward();
      ASSERT_TRUE((*ddp)->status().ok()) << (*ddp)->status();
      (*ddp)->module().ZeroGrad();
    }
    ASSERT_TRUE(WriteMergedTrace({&(*ddp)->reducer().trace(), &tracer.trace()}, group, path).ok());
  });
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);  // throws (fails) on invalid JSON
  for (int rank = 0; rank < 2; ++rank) {
    // This rank's events in recorded order: the Reducer's first, then the tracer's.
    std::vector<nlohmann::json> reducer_events, slices;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "M" || e["pid"] != rank) continue;
      (e["tid"] == TraceRecorder::kModuleTrack ? slices : reducer_events).push_back(e);
    }
    std::vector<std::pair<std::string, Slice>> backward;  // in order, 3 per iteration: fc2, relu, fc1
    for (const auto& e : slices) {
      const std::string name = e["name"];
      const int64_t ts = e["ts"].get<int64_t>();
      if (name.rfind("backward ", 0) == 0) backward.push_back({name.substr(9), {ts, ts + e["dur"].get<int64_t>()}});
    }
    ASSERT_EQ(backward.size(), 9u) << "rank " << rank;
    std::string last_ready;
    int launches = 0;
    for (const auto& e : reducer_events) {
      const std::string name = e["name"];
      if (name.rfind("grad ready: ", 0) == 0) last_ready = name.substr(12);
      if (name.rfind("launch bucket ", 0) != 0) continue;
      const int iteration = launches++ / 4;
      const std::string layer = last_ready.substr(0, last_ready.rfind('.'));
      const int64_t at = e["ts"].get<int64_t>();
      std::map<std::string, Slice> of_iteration;
      for (int i = 3 * iteration; i < 3 * iteration + 3; ++i) of_iteration[backward[i].first] = backward[i].second;
      ASSERT_EQ(of_iteration.size(), 3u);
      const Slice& closing = of_iteration.at(layer);
      EXPECT_LE(closing.start, at) << name << " closed by " << last_ready << ", rank " << rank;
      EXPECT_LE(at, closing.end) << name << " closed by " << last_ready << ", rank " << rank;
      if (layer == "fc2") {
        EXPECT_LE(at, of_iteration.at("fc1").start) << name << ", rank " << rank;
      }
    }
    EXPECT_EQ(launches, 12) << "rank " << rank;  // 4 buckets x 3 iterations
  }
}

}  // namespace
}  // namespace ddp
