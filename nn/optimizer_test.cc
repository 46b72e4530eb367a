#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nn/adam.h"
#include "nn/sgd.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// A one-element parameter with value `value`.
Tensor Param(float value) {
  Tensor p = Full({1}, value);
  p.set_requires_grad(true);
  return p;
}

void SetGrad(const Tensor& p, float g) { p.set_grad(Full(p.shape(), g)); }

float Value(const Tensor& p) { return p.ToVector<float>()[0]; }

TEST(SgdTest, PlainStep) {
  Tensor p = Param(1.0f);
  SgdOptions options;
  options.lr = 0.1f;
  Sgd sgd({p}, options);
  SetGrad(p, 0.5f);
  sgd.Step();
  EXPECT_FLOAT_EQ(Value(p), 0.95f);
  EXPECT_TRUE(sgd.StateDict().tensors.empty());  // no momentum, no state
  EXPECT_EQ(sgd.step_count(), 1);
}

TEST(SgdTest, MomentumAndWeightDecayByHand) {
  Tensor p = Param(1.0f);
  SgdOptions options;
  options.lr = 0.1f;
  options.momentum = 0.9f;
  options.weight_decay = 0.1f;
  Sgd sgd({p}, options);
  SetGrad(p, 0.5f);
  sgd.Step();  // d = 0.5 + 0.1 = 0.6, buf = d (first step), p = 1 - 0.06
  EXPECT_FLOAT_EQ(Value(p), 0.94f);
  sgd.Step();  // d = 0.5 + 0.094 = 0.594, buf = 0.54 + 0.594 = 1.134, p = 0.94 - 0.1134
  EXPECT_FLOAT_EQ(Value(p), 0.8266f);
  const OptimizerState state = sgd.StateDict();
  ASSERT_EQ(state.tensors.size(), 1u);
  EXPECT_EQ(state.tensors[0].first, "0.momentum_buffer");
  EXPECT_FLOAT_EQ(Value(state.tensors[0].second), 1.134f);
}

TEST(SgdTest, NesterovAndDampening) {
  Tensor p = Param(1.0f), q = Param(1.0f);
  SgdOptions nesterov;
  nesterov.lr = 0.1f;
  nesterov.momentum = 0.9f;
  nesterov.nesterov = true;
  Sgd a({p}, nesterov);
  SetGrad(p, 0.5f);
  a.Step();  // buf = 0.5, d = 0.5 + 0.45
  EXPECT_FLOAT_EQ(Value(p), 0.905f);
  SgdOptions damped;
  damped.lr = 0.1f;
  damped.momentum = 0.9f;
  damped.dampening = 0.5f;
  Sgd b({q}, damped);
  SetGrad(q, 0.5f);
  b.Step();  // first step: buf = grad (no dampening)
  EXPECT_FLOAT_EQ(Value(q), 0.95f);
  b.Step();  // buf = 0.45 + 0.25 = 0.7
  EXPECT_FLOAT_EQ(Value(q), 0.88f);
}

TEST(SgdTest, SkipsParametersWithoutGradient) {
  Tensor p = Param(1.0f), q = Param(2.0f);
  SgdOptions options;
  options.momentum = 0.9f;
  Sgd sgd({p, q}, options);
  SetGrad(q, 1.0f);
  sgd.Step();
  EXPECT_EQ(Value(p), 1.0f);
  EXPECT_FLOAT_EQ(Value(q), 1.99f);
  ASSERT_EQ(sgd.StateDict().tensors.size(), 1u);
  EXPECT_EQ(sgd.StateDict().tensors[0].first, "1.momentum_buffer");
}

TEST(SgdTest, ValidatesOptions) {
  SgdOptions options;
  options.nesterov = true;
  EXPECT_THAT(ValidateSgdOptions(options).message(), HasSubstr("nesterov"));
  options = SgdOptions();
  options.lr = -1.0f;
  EXPECT_THAT(ValidateSgdOptions(options).message(), HasSubstr("lr"));
  EXPECT_TRUE(ValidateSgdOptions(SgdOptions()).ok());
}

TEST(SgdTest, StateRoundTripAndErrors) {
  Generator g(0);
  Tensor p1 = Uniform({3, 2}, -1, 1, g), p2 = Clone(p1);
  p1.set_requires_grad(true);
  p2.set_requires_grad(true);
  SgdOptions options;
  options.momentum = 0.9f;
  Sgd a({p1}, options), b({p2}, options);
  SetGrad(p1, 0.3f);
  SetGrad(p2, 0.3f);
  a.Step();
  b.Step();
  SetGrad(p1, -0.2f);
  a.Step();
  // b resumes from a's state.
  CopyInPlace(p2, p1);
  ASSERT_TRUE(b.LoadStateDict(a.StateDict()).ok());
  EXPECT_EQ(b.step_count(), 2);
  SetGrad(p1, 0.1f);
  SetGrad(p2, 0.1f);
  a.Step();
  b.Step();
  EXPECT_EQ(p1.ToVector<float>(), p2.ToVector<float>());

  OptimizerState bad;
  bad.tensors = {{"0.momentum_buffer", Zeros({2, 3})}};
  EXPECT_THAT(b.LoadStateDict(bad).message(), HasSubstr("\"0.momentum_buffer\" is float32 [2, 3]"));
  bad.tensors = {{"4.momentum_buffer", Zeros({3, 2})}};
  EXPECT_THAT(b.LoadStateDict(bad).message(), HasSubstr("refers to parameter 4"));
  bad.tensors = {{"0.velocity", Zeros({3, 2})}};
  EXPECT_THAT(b.LoadStateDict(bad).message(), HasSubstr("unknown key \"0.velocity\""));
}

TEST(AdamTest, ThreeStepsByHand) {
  // Reference values from the update rule evaluated in double precision (see adam.h).
  Tensor p = Param(1.0f);
  AdamOptions options;
  options.lr = 0.1f;
  options.weight_decay = 0.1f;
  Adam adam({p}, options);
  const float grads[] = {0.5f, -0.5f, 0.25f};
  const double expected[] = {0.9000000016666666, 0.8866836230649792, 0.8503518619580189};
  for (int i = 0; i < 3; ++i) {
    SetGrad(p, grads[i]);
    adam.Step();
    EXPECT_NEAR(Value(p), expected[i], 1e-6) << "step " << i + 1;
  }
}

TEST(AdamTest, AdamWDecouplesWeightDecay) {
  Tensor p = Param(1.0f);
  AdamOptions options = AdamWDefaultOptions();
  EXPECT_FLOAT_EQ(options.weight_decay, 0.01f);
  options.lr = 0.1f;
  options.weight_decay = 0.1f;
  AdamW adamw({p}, options);
  const float grads[] = {0.5f, -0.5f, 0.25f};
  const double expected[] = {0.890000002, 0.8863631597694736, 0.8600269751561852};
  for (int i = 0; i < 3; ++i) {
    SetGrad(p, grads[i]);
    adamw.Step();
    EXPECT_NEAR(Value(p), expected[i], 1e-6) << "step " << i + 1;
  }
}

TEST(AdamTest, PerParameterStepAndStateRoundTrip) {
  Tensor p = Param(1.0f), q = Param(1.0f);
  Adam adam({p, q}, AdamOptions());
  SetGrad(p, 1.0f);
  adam.Step();  // q has no gradient yet: no state, no step
  SetGrad(q, 1.0f);
  adam.Step();
  OptimizerState state = adam.StateDict();
  EXPECT_EQ(state.step_count, 2);
  ASSERT_EQ(state.tensors.size(), 6u);
  EXPECT_EQ(state.tensors[0].first, "0.step");
  EXPECT_EQ(state.tensors[0].second.item(), 2.0);
  EXPECT_EQ(state.tensors[3].first, "1.step");
  EXPECT_EQ(state.tensors[3].second.item(), 1.0);
  EXPECT_EQ(state.tensors[4].first, "1.exp_avg");

  Tensor p2 = Clone(p.Detach()), q2 = Clone(q.Detach());
  p2.set_requires_grad(true);
  q2.set_requires_grad(true);
  Adam resumed({p2, q2}, AdamOptions());
  ASSERT_TRUE(resumed.LoadStateDict(state).ok());
  SetGrad(p2, 0.5f);
  SetGrad(q2, -0.5f);
  SetGrad(p, 0.5f);
  SetGrad(q, -0.5f);
  adam.Step();
  resumed.Step();
  EXPECT_EQ(Value(p), Value(p2));
  EXPECT_EQ(Value(q), Value(q2));

  OptimizerState partial;
  partial.tensors = {{"0.exp_avg", Zeros({1})}};
  EXPECT_THAT(resumed.LoadStateDict(partial).message(), HasSubstr("needs all of step"));
}

TEST(AdamTest, ValidatesOptions) {
  AdamOptions options;
  options.beta2 = 1.0f;
  EXPECT_THAT(ValidateAdamOptions(options).message(), HasSubstr("beta2"));
  EXPECT_TRUE(ValidateAdamOptions(AdamOptions()).ok());
}

TEST(OptimizerTest, ZeroGradKeepsTensors) {
  Tensor p = Param(1.0f);
  Sgd sgd({p}, SgdOptions());
  SetGrad(p, 3.0f);
  const Tensor grad = p.grad();
  sgd.ZeroGrad();
  EXPECT_TRUE(p.grad().is_same(grad));
  EXPECT_EQ(Value(grad), 0.0f);
}

}  // namespace
}  // namespace ddp
