#include "sim/profile.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sim/synthetic_models.h"

namespace ddp {
namespace sim {
namespace {

// Rank 0's events of one iteration starting at `t` us, as reducer/trace.cc writes them: forward 10 ms,
// backward 20 ms with fc2.* ready at +5 ms (+ `jitter`) and fc1.* at +15 ms, one all-reduce ending 4 ms
// after backward.
// `bias_first` lists fc2.bias before fc2.weight (same time stamp: the file order decides).
std::string Iteration(double t, double jitter, bool bias_first = false) {
  const double b = t + 10000;
  const std::string fc2[2] = {bias_first ? "fc2.bias" : "fc2.weight", bias_first ? "fc2.weight" : "fc2.bias"};
  return absl::StrCat(
      "{\"name\": \"grad ready: ", fc2[0],
      "\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, \"ts\": ", b + 5000 + jitter, "},\n",
      "{\"name\": \"grad ready: ", fc2[1],
      "\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, \"ts\": ", b + 5000 + jitter, "},\n",
      "{\"name\": \"grad ready: fc1.weight\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, \"ts\": ", b + 15000,
      "},\n",
      "{\"name\": \"grad ready: fc1.bias\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, \"ts\": ", b + 15000,
      "},\n", "{\"name\": \"bucket 0 allreduce\", \"ph\": \"X\", \"pid\": 0, \"tid\": 1, \"ts\": ", b + 16000,
      ", \"dur\": 8000},\n", "{\"name\": \"forward\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": ", t,
      ", \"dur\": 10000},\n", "{\"name\": \"backward\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, \"ts\": ", b,
      ", \"dur\": 20000}");
}

const std::vector<ParameterShape> kMlp = {
    {"fc1.weight", 20}, {"fc1.bias", 5}, {"fc2.weight", 10}, {"fc2.bias", 2}};

// Four iterations 40 ms apart (so 6 ms of "other" after the exposed 4 ms), plus a rank-1 event to ignore.
std::string FourIterations() {
  return absl::StrCat(
      "{\"traceEvents\": [\n", Iteration(0, 0, /*bias_first=*/true), ",\n", Iteration(40000, 1000), ",\n",
      Iteration(80000, -1000), ",\n", Iteration(120000, 0), ",\n",
      "{\"name\": \"forward\", \"ph\": \"X\", \"pid\": 1, \"tid\": 0, \"ts\": 0, \"dur\": 99}]}");
}

TEST(ProfileFromTraceTest, AveragesTheIterationsAfterTheSkipped) {
  TraceProfileOptions options;
  options.skip_iterations = 1;
  absl::StatusOr<ComputeProfile> p = ProfileFromTrace(FourIterations(), kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  // Iterations 1 and 2 are used (3 has no next forward); jitter +1 ms and -1 ms averages out.
  EXPECT_NEAR(p->forward_s, 10e-3, 1e-9);
  EXPECT_NEAR(p->backward_s, 20e-3, 1e-9);
  EXPECT_NEAR(p->other_s, 6e-3, 1e-9);
  ASSERT_EQ(p->params.size(), 4u);
  EXPECT_EQ(p->params[0].name, "fc1.weight");
  EXPECT_EQ(p->params[0].numel, 20);
  EXPECT_NEAR(p->params[0].ready_s, 15e-3, 1e-9);
  EXPECT_NEAR(p->params[2].ready_s, 5e-3, 1e-9);
  // The first iteration's order, fc2.bias first, is what the bucket rebuild records.
  EXPECT_EQ(p->ready_order, (std::vector<size_t>{3, 2, 0, 1}));
}

// The trace's grad-ready events carry each parameter's size: it wins over the model's (a trace of the mlp
// on CIFAR-10 has fc1.weight 3072 x 512 where --model=mlp's default input gives 784 x 512).
TEST(ProfileFromTraceTest, ParameterSizesComeFromTheTraceWhereItGivesThem) {
  std::string trace = FourIterations();
  const std::string plain = "{\"name\": \"grad ready: fc1.weight\", \"ph\": \"i\", \"pid\": 0, \"tid\": 0, ";
  size_t at = trace.find(plain);
  ASSERT_NE(at, std::string::npos);
  trace.insert(at + plain.size(), "\"args\": {\"numel\": 80}, ");
  TraceProfileOptions options;
  options.skip_iterations = 1;
  absl::StatusOr<ComputeProfile> p = ProfileFromTrace(trace, kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->params[0].numel, 80);  // from the trace
  EXPECT_EQ(p->params[1].numel, 5);   // fc1.bias: the model's
}

// Note [Straggler wait]: iterations whose "other" differs (the third forward starts 2 ms late) give the
// compute's spread: 36, 38 and 34 ms, whose consecutive ones differ by 2 and 4 ms, a mean of 3 ms, so the
// jitter is 3 * sqrt(pi) / 2 ms (the standard deviation of normal values with that mean difference).
TEST(ProfileFromTraceTest, StepJitterIsTheStandardDeviationOfTheIterationsCompute) {
  const std::string trace = absl::StrCat("{\"traceEvents\": [\n", Iteration(0, 0), ",\n", Iteration(40000, 0), ",\n",
                                         Iteration(82000, 0), ",\n", Iteration(120000, 0), "]}");
  TraceProfileOptions options;
  options.skip_iterations = 0;
  absl::StatusOr<ComputeProfile> p = ProfileFromTrace(trace, kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->other_s, 6e-3, 1e-9);
  EXPECT_NEAR(p->step_jitter_s, 3.0 * std::sqrt(M_PI) / 2.0 * 1e-3, 1e-9);
  EXPECT_NEAR(ProfileFromTrace(FourIterations(), kMlp, options)->step_jitter_s, 0.0, 1e-12);  // evenly spaced
}

// Iterations `gaps_ms` apart (the first at 0): iteration i computes gaps_ms[i] - 4 ms (Iteration's
// all-reduce ends 34 ms after its forward starts).
std::string IterationsWithGaps(const std::vector<double>& gaps_ms) {
  std::string events = "{\"traceEvents\": [\n";
  double t = 0;
  for (double gap : gaps_ms) {
    absl::StrAppend(&events, Iteration(t, 0), ",\n");
    t += 1000 * gap;
  }
  return absl::StrCat(events, Iteration(t, 0), "]}");
}

// A machine that slows down steadily (compute 36, 37, 38, 39 ms) slows every rank alike: only the
// step-to-step change (1 ms) is jitter, not the 1.67 ms mean difference of all pairs.
TEST(ProfileFromTraceTest, ASlowDriftIsNotJitter) {
  TraceProfileOptions options;
  options.skip_iterations = 0;
  absl::StatusOr<ComputeProfile> p = ProfileFromTrace(IterationsWithGaps({40, 41, 42, 43}), kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->step_jitter_s, std::sqrt(M_PI) / 2.0 * 1e-3, 1e-9);
}

// Note [Interleaved sweep]: only iterations whose next one is in the same range count; the jitter compares
// consecutive timed iterations (in a range), the last of a range with the mean "other" (its own runs into
// the next block's layout switch), so blocks of two timed steps still measure it.
TEST(ProfileFromTraceTest, IterationRangesSelectTheIterations) {
  const std::string trace = IterationsWithGaps({40, 41, 50, 43, 44});  // compute 36, 37, 46, 39, 40 ms
  TraceProfileOptions options;
  options.skip_iterations = 0;
  options.iterations = {{1, 3}};  // iteration 1 only (2's next forward is outside)
  absl::StatusOr<ComputeProfile> p = ProfileFromTrace(trace, kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->other_s, 7e-3, 1e-9);  // 41 - 34 ms
  EXPECT_NEAR(p->step_jitter_s, 0.0, 1e-12);
  // Two blocks of two timed steps: iterations 0 and 3 count (other 6 and 9 ms, mean 7.5); 1 and 4 are
  // timed, 30 + 7.5 ms: the pairs 36 -> 37.5 and 39 -> 37.5 differ by 1.5 ms each.
  options.iterations = {{0, 2}, {3, 5}};
  p = ProfileFromTrace(trace, kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->other_s, 7.5e-3, 1e-9);
  EXPECT_NEAR(p->step_jitter_s, 1.5 * std::sqrt(M_PI) / 2.0 * 1e-3, 1e-9);
  // 0, 2 and 3 count (other 6, 16, 9 ms; mean 31/3), 1 and 4 are timed: 36, 40.33, 46, 39, 40.33 ms,
  // consecutive differences 4.33, 5.67, 7 and 1.33 ms (mean 55/12).
  options.iterations = {{0, 2}, {2, 5}};
  p = ProfileFromTrace(trace, kMlp, options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->step_jitter_s, 55.0 / 12.0 * std::sqrt(M_PI) / 2.0 * 1e-3, 1e-9);
  options.iterations = {{7, 9}};
  EXPECT_FALSE(ProfileFromTrace(trace, kMlp, options).ok());
}

TEST(ParseIterationRangesTest, ParsesRangesAndNamesBadOnes) {
  absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> ranges = ParseIterationRanges("0-2,30-45");
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  EXPECT_EQ(*ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {30, 45}}));
  EXPECT_TRUE(ParseIterationRanges("")->empty());
  for (const char* bad : {"5-3", "4-4", "a-b", "3", "-1-2"}) {
    absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> parsed = ParseIterationRanges(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find(absl::StrCat("\"", bad, "\"")), std::string::npos)
        << parsed.status();
  }
}

TEST(ProfileFromTraceTest, Errors) {
  TraceProfileOptions options;
  EXPECT_FALSE(ProfileFromTrace("not json", kMlp, options).ok());
  options.skip_iterations = 3;  // leaves no iteration with a next forward
  EXPECT_FALSE(ProfileFromTrace(FourIterations(), kMlp, options).ok());
  options.skip_iterations = 0;
  const std::vector<ParameterShape> other = {{"conv1.weight", 4}};
  absl::StatusOr<ComputeProfile> p = ProfileFromTrace(FourIterations(), other, options);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("fc2.bias\", which the model lacks"), std::string::npos) << p.status();
}

TEST(ProfileJsonTest, RoundTrips) {
  TraceProfileOptions options;
  options.skip_iterations = 1;
  const ComputeProfile p = *ProfileFromTrace(FourIterations(), kMlp, options);
  absl::StatusOr<ComputeProfile> q = ProfileFromJson(ProfileToJson(p));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_NEAR(q->other_s, p.other_s, 1e-12);
  EXPECT_NEAR(q->step_jitter_s, p.step_jitter_s, 1e-12);
  EXPECT_EQ(q->ready_order, p.ready_order);
  ASSERT_EQ(q->params.size(), p.params.size());
  EXPECT_EQ(q->params[3].name, "fc2.bias");
  EXPECT_NEAR(q->params[3].ready_s, p.params[3].ready_s, 1e-12);
}

TEST(ProfileJsonTest, AHandWrittenModelNeedsOnlySizesAndTimes) {
  absl::StatusOr<ComputeProfile> p = ProfileFromJson(
      R"({"forward_ms": 1, "backward_ms": 2, "other_ms": 0.5, "params": [{"numel": 10, "ready_ms": 2}, {"numel": 5, "ready_ms": 1}]})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->params[1].name, "param1");
  EXPECT_TRUE(p->ready_order.empty());
  EXPECT_EQ(p->dtype, DType::kFloat32);
  EXPECT_EQ(p->step_jitter_s, 0.0);
  absl::StatusOr<ComputeProfile> jittery = ProfileFromJson(
      R"({"forward_ms": 1, "backward_ms": 2, "other_ms": 0, "step_jitter_ms": 0.25, "params": [{"numel": 1, "ready_ms": 1}]})");
  ASSERT_TRUE(jittery.ok()) << jittery.status();
  EXPECT_NEAR(jittery->step_jitter_s, 0.25e-3, 1e-15);
  EXPECT_FALSE(
      ProfileFromJson(
          R"({"forward_ms": 1, "backward_ms": 2, "other_ms": 0, "step_jitter_ms": -1, "params": [{"numel": 1, "ready_ms": 1}]})")
          .ok());
  EXPECT_FALSE(ProfileFromJson(R"({"forward_ms": 1, "backward_ms": 2, "params": []})").ok());
  EXPECT_FALSE(
      ProfileFromJson(
          R"({"forward_ms": 1, "backward_ms": 2, "other_ms": 0, "params": [{"numel": 1.5, "ready_ms": 1}]})")
          .ok());
  EXPECT_FALSE(
      ProfileFromJson(
          R"({"forward_ms": 1, "backward_ms": 2, "other_ms": 0, "params": [{"numel": 1, "ready_ms": 1}], "ready_order": [1]})")
          .ok());
}

TEST(SyntheticModelsTest, MlpTimesFromFlops) {
  // 4 -> 8 -> 2 at batch 10 on 1 GFLOP/s: layer FLOPs/sample 64 and 32; forward (640 + 320) ns;
  // backward of fc2 640 ns, then fc1 1280 ns.
  SyntheticRates rates;
  rates.batch = 10;
  rates.flop_per_s = 1e9;
  rates.memory_bytes_per_s = 1e9;
  const ComputeProfile p = SyntheticProfile(MlpLayers({4, 8, 2}), rates);
  ASSERT_EQ(p.params.size(), 4u);
  EXPECT_EQ(p.params[0].name, "fc1.weight");
  EXPECT_EQ(p.params[0].numel, 32);
  EXPECT_NEAR(p.forward_s, 960e-9, 1e-15);
  EXPECT_NEAR(p.params[2].ready_s, 640e-9, 1e-15);
  EXPECT_NEAR(p.params[0].ready_s, 1920e-9, 1e-15);
  EXPECT_NEAR(p.backward_s, 1920e-9, 1e-15);
  EXPECT_EQ(p.ready_order, (std::vector<size_t>{3, 2, 1, 0}));
  EXPECT_NEAR(p.other_s, 16.0 * (32 + 8 + 16 + 2) / 1e9, 1e-15);
}

TEST(SyntheticModelsTest, ResNet50HasTorchvisionsParameters) {
  int64_t total = 0;
  size_t tensors = 0;
  double flop = 0;
  for (const SyntheticLayer& layer : ResNet50Layers()) {
    for (const ParameterShape& p : layer.params) total += p.numel, ++tensors;
    flop += layer.forward_flop_per_sample;
  }
  EXPECT_EQ(total, 25557032);
  EXPECT_EQ(tensors, 161u);
  EXPECT_NEAR(flop, 8.2e9, 0.15e9);  // torchvision's "4.1 GMACs"
}

// Negative times or sizes would simulate nonsense (a step shorter than its parts): refused, naming the field.
TEST(ProfileJsonTest, NegativeTimesAndSizesAreRefused) {
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"forward_ms": -3, "backward_ms": 2, "other_ms": 1, "params": []})", "\"forward_ms\""},
           {R"({"forward_ms": 3, "backward_ms": 2, "other_ms": -0.5, "params": []})", "\"other_ms\""},
           {R"({"forward_ms": 3, "backward_ms": 2, "other_ms": 1, "params": [{"numel": -4, "ready_ms": 1}]})",
            "parameter 0"},
           {R"({"forward_ms": 3, "backward_ms": 2, "other_ms": 1, "params": [{"numel": 4, "ready_ms": -1}]})",
            "parameter 0"}}) {
    absl::StatusOr<ComputeProfile> p = ProfileFromJson(text);
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_NE(p.status().message().find(field), std::string::npos) << p.status();
  }
}

}  // namespace
}  // namespace sim
}  // namespace ddp
