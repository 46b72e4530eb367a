// GradScaler against torch.amp.GradScaler, step by step: tests/fixtures/grad_scaler_*.safetensors
// (tools/gen_grad_scaler_fixture.py, PyTorch 2.x) feed the same gradients, finite and not, and record
// what torch's scaler did with them; this scaler must do the same, bit for bit.
#include "nn/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "nn/safetensors.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

struct Fixture {
  std::map<std::string, Tensor> tensors;
  SafetensorsMetadata metadata;
};

Fixture Load(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string path = (srcdir != nullptr ? std::string(srcdir) + "/ddpengine/" : std::string()) +
                           "tests/fixtures/grad_scaler_" + name + ".safetensors";
  auto contents = ReadSafetensors(path);
  DDP_CHECK(contents.ok()) << contents.status().ToString()
                           << " (regenerate with /opt/torch2/bin/python tools/gen_grad_scaler_fixture.py)";
  Fixture fixture;
  for (auto& [n, t] : contents->tensors) fixture.tensors[n] = t;
  fixture.metadata = contents->metadata;
  return fixture;
}

double Number(const SafetensorsMetadata& metadata, const std::string& key) {
  double value = 0;
  const auto it = metadata.find(key);
  DDP_CHECK(it != metadata.end() && absl::SimpleAtod(it->second, &value)) << "fixture metadata " << key;
  return value;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

class GradScalerFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GradScalerFixtureTest, MatchesTorchStepByStep) {
  const Fixture f = Load(GetParam());
  GradScalerOptions options;
  options.init_scale = static_cast<float>(Number(f.metadata, "init_scale"));
  options.growth_factor = Number(f.metadata, "growth_factor");
  options.backoff_factor = Number(f.metadata, "backoff_factor");
  options.growth_interval = static_cast<int64_t>(Number(f.metadata, "growth_interval"));
  GradScaler scaler(options);
  const Tensor& input = f.tensors.at("input");
  const int64_t steps = input.size(0);
  const std::vector<float> in = input.ToVector<float>(), unscaled = f.tensors.at("unscaled").ToVector<float>(),
                           scale = f.tensors.at("scale").ToVector<float>();
  const std::vector<int64_t> found = f.tensors.at("found_inf").ToVector<int64_t>(),
                             stepped = f.tensors.at("stepped").ToVector<int64_t>(),
                             tracker = f.tensors.at("tracker").ToVector<int64_t>();
  Tensor param = Zeros({3});
  param.set_requires_grad(true);
  for (int64_t s = 0; s < steps; ++s) {
    Tensor grad = FromVector(std::vector<float>(in.begin() + 3 * s, in.begin() + 3 * s + 3), {3});
    param.set_grad(grad);
    const bool found_inf = scaler.UnscaleGradients({param});
    ASSERT_EQ(found_inf, found[s] != 0) << "step " << s;
    ASSERT_EQ(!found_inf, stepped[s] != 0) << "step " << s << ": torch skips exactly the steps with inf/NaN";
    const std::vector<float> got = param.grad().ToVector<float>();
    for (int i = 0; i < 3; ++i) {
      const float want = unscaled[3 * s + i];
      EXPECT_TRUE(SameBits(got[i], want) || (std::isnan(got[i]) && std::isnan(want)))
          << "step " << s << " element " << i << ": " << got[i] << " vs torch " << want;
    }
    scaler.Update(found_inf);
    ASSERT_TRUE(SameBits(scaler.scale(), scale[s])) << "step " << s << ": scale " << scaler.scale() << " vs torch "
                                                    << scale[s];
    ASSERT_EQ(scaler.growth_tracker(), tracker[s]) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Torch, GradScalerFixtureTest,
                         ::testing::Values("short", "default", "odd_factors", "overflow"));

TEST(GradScalerTest, StateRoundTripsAndBadStateIsRefused) {
  GradScalerOptions options;
  options.init_scale = 1000.0f;
  options.growth_factor = 1.7;
  options.backoff_factor = 0.3;
  options.growth_interval = 5;
  GradScaler scaler(options);
  scaler.Update(true);
  scaler.Update(false);
  scaler.Update(false);
  GradScaler restored;  // torch's defaults: load_state_dict replaces factors and interval too
  ASSERT_TRUE(restored.RestoreState(scaler.StateText()).ok()) << scaler.StateText();
  EXPECT_TRUE(SameBits(restored.scale(), scaler.scale()));
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.options().growth_interval, 5);
  EXPECT_EQ(restored.options().growth_factor, 1.7);
  EXPECT_EQ(restored.options().backoff_factor, 0.3);
  EXPECT_EQ(restored.StateText(), scaler.StateText());
  for (const char* bad : {"", "[]", "{\"scale\":1}", "{\"scale\":-1,\"growth_factor\":2,\"backoff_factor\":0.5,"
                                                      "\"growth_interval\":3,\"_growth_tracker\":0}",
                          "{\"scale\":1,\"growth_factor\":2,\"backoff_factor\":0.5,\"growth_interval\":3,"
                          "\"_growth_tracker\":3}"}) {
    const absl::Status status = restored.RestoreState(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << bad;
  }
  EXPECT_EQ(restored.StateText(), scaler.StateText()) << "a refused state leaves the scaler unchanged";
}

TEST(GradScalerTest, DisabledChangesNothingAndOptionsAreValidated) {
  GradScalerOptions off;
  off.enabled = false;
  GradScaler scaler(off);
  Tensor param = Zeros({2});
  param.set_requires_grad(true);
  param.set_grad(FromVector(std::vector<float>{INFINITY, 3.0f}, {2}));
  EXPECT_FALSE(scaler.UnscaleGradients({param}));
  EXPECT_EQ(param.grad().ToVector<float>()[1], 3.0f);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 1.0f);
  GradScalerOptions bad;
  bad.growth_factor = 1.0;
  EXPECT_TRUE(absl::StrContains(ValidateGradScalerOptions(bad).message(), "growth_factor"));
  bad = GradScalerOptions{};
  bad.backoff_factor = 1.0;
  EXPECT_TRUE(absl::StrContains(ValidateGradScalerOptions(bad).message(), "backoff_factor"));
  bad = GradScalerOptions{};
  bad.growth_interval = 0;
  EXPECT_TRUE(absl::StrContains(ValidateGradScalerOptions(bad).message(), "growth_interval"));
  bad = GradScalerOptions{};
  bad.init_scale = INFINITY;
  EXPECT_TRUE(absl::StrContains(ValidateGradScalerOptions(bad).message(), "init_scale"));
}

// Scale() multiplies the loss, so backward's gradients are scale times the plain ones.
TEST(GradScalerTest, ScaledLossScalesGradients) {
  GradScaler scaler;
  Tensor w = FromVector(std::vector<float>{0.5f, -2.0f}, {2});
  w.set_requires_grad(true);
  scaler.Scale(Sum(Mul(w, w))).Backward();
  const std::vector<float> g = w.grad().ToVector<float>();
  EXPECT_EQ(g[0], 65536.0f * 1.0f);
  EXPECT_EQ(g[1], 65536.0f * -4.0f);
  EXPECT_FALSE(scaler.UnscaleGradients({w}));
  EXPECT_EQ(w.grad().ToVector<float>()[1], -4.0f);
}

// Every non-finite value (inf and NaN of either sign) at every position of a gradient whose length is no
// multiple of a vector width is found; the finite extremes (largest, smallest subnormal, zeros) are not;
// every value comes back multiplied by the inverse scale, bit for bit.
TEST(GradScalerTest, FindsEveryNonFiniteValueAtEveryPosition) {
  constexpr int kLength = 37;
  const float inv_scale = static_cast<float>(1.0 / 65536.0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto gradient_with = [&](int at, float value) {
    std::vector<float> values(kLength);
    for (int i = 0; i < kLength; ++i) values[i] = 0.25f * static_cast<float>(i - 18);
    values[at] = value;
    Tensor w = Zeros({kLength});
    w.set_requires_grad(true);
    w.set_grad(FromVector(values, {kLength}));
    return std::make_pair(w, values);
  };
  for (float bad : {inf, -inf, nan, -nan}) {
    for (int at = 0; at < kLength; ++at) {
      GradScaler scaler;
      auto [w, values] = gradient_with(at, bad);
      EXPECT_TRUE(scaler.UnscaleGradients({w})) << bad << " at " << at;
    }
  }
  const float finite[] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), 0.0f, -0.0f};
  for (float value : finite) {
    for (int at = 0; at < kLength; ++at) {
      GradScaler scaler;
      auto [w, values] = gradient_with(at, value);
      EXPECT_FALSE(scaler.UnscaleGradients({w})) << value << " at " << at;
      const std::vector<float> got = w.grad().ToVector<float>();
      for (int i = 0; i < kLength; ++i) {
        const float want = values[i] * inv_scale;
        EXPECT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0)
            << value << " at " << at << ": element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ddp
