// ResNet-18 and its BasicBlock: torchvision's state-dict keys, order and shapes, torchvision's
// initialisation, shapes through the network, gradients against finite differences, BatchNorm buffers,
// replicas, and errors that name the bad input. Values against PyTorch are in pytorch_fixture_test.cc,
// weights moving to and from torchvision in resnet_interchange_test.sh.
#include "nn/resnet.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "nn/sgd.h"
#include "tensor/autocast.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

namespace ddp {
namespace nn {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The state-dict keys of torchvision's resnet18 as `print(list(model.state_dict()))` lists them (conv1
// and maxpool replaced as nn/resnet.h says), built from the rule torchvision's code follows.
std::vector<std::string> TorchvisionResNet18Keys() {
  const std::vector<std::string> bn = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
  std::vector<std::string> keys;
  auto add_bn = [&](const std::string& prefix) {
    for (const std::string& name : bn) keys.push_back(prefix + "." + name);
  };
  keys.push_back("conv1.weight");
  add_bn("bn1");
  for (int stage = 1; stage <= 4; ++stage) {
    for (int block = 0; block < 2; ++block) {
      const std::string prefix = absl::StrCat("layer", stage, ".", block, ".");
      keys.push_back(prefix + "conv1.weight");
      add_bn(prefix + "bn1");
      keys.push_back(prefix + "conv2.weight");
      add_bn(prefix + "bn2");
      if (stage > 1 && block == 0) {
        keys.push_back(prefix + "downsample.0.weight");
        add_bn(prefix + "downsample.1");
      }
    }
  }
  keys.push_back("fc.weight");
  keys.push_back("fc.bias");
  return keys;
}

std::shared_ptr<Module> ResNet18(uint64_t seed) {
  Generator g(seed);
  return MakeModel("resnet18", g).value();
}

// One resnet18 (seed 3) for the tests that only read it: building 11M parameters is most of their time.
const Module& SharedResNet18() {
  static const std::shared_ptr<Module> model = ResNet18(3);
  return *model;
}

Tensor StateOf(const Module& model, const std::string& name) {
  for (const auto& [key, t] : model.StateDict()) {
    if (key == name) return t;
  }
  return Tensor();
}

TEST(ResNetTest, StateDictIsTorchvisionsResNet18) {
  const Module* model = &SharedResNet18();
  std::vector<std::string> keys;
  for (const auto& [name, t] : model->StateDict()) keys.push_back(name);
  EXPECT_THAT(keys, ElementsAreArray(TorchvisionResNet18Keys()));
  EXPECT_EQ(keys.size(), 122u);
  const NamedTensors params = model->NamedParameters();
  EXPECT_EQ(params.size(), 62u);
  int64_t values = 0;
  for (const auto& [name, p] : params) values += p.numel();
  EXPECT_EQ(values, 11172810);
  EXPECT_EQ(StateOf(*model, "conv1.weight").shape(), (Shape{64, 1, 3, 3}));
  EXPECT_EQ(StateOf(*model, "layer2.0.conv1.weight").shape(), (Shape{128, 64, 3, 3}));
  EXPECT_EQ(StateOf(*model, "layer4.0.downsample.0.weight").shape(), (Shape{512, 256, 1, 1}));
  EXPECT_EQ(StateOf(*model, "layer4.1.bn2.running_var").shape(), (Shape{512}));
  EXPECT_EQ(StateOf(*model, "layer3.0.downsample.1.num_batches_tracked").dtype(), DType::kInt64);
  EXPECT_EQ(StateOf(*model, "layer3.0.downsample.1.num_batches_tracked").shape(), (Shape{}));
  EXPECT_EQ(StateOf(*model, "fc.weight").shape(), (Shape{10, 512}));
  // MakeModel names every tensor after its key (error messages and traces use it).
  EXPECT_EQ(StateOf(*model, "layer1.1.bn1.running_mean").name(), "layer1.1.bn1.running_mean");
}

TEST(ResNetTest, PrintsLikeTorchvision) {
  const std::string text = SharedResNet18().ToString();
  EXPECT_THAT(text, HasSubstr("(conv1): Conv2d(1, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
                              "bias=False)"));
  EXPECT_THAT(text, HasSubstr("(0): BasicBlock("));
  EXPECT_THAT(text, HasSubstr("(0): Conv2d(128, 256, kernel_size=(1, 1), stride=(2, 2), bias=False)"));
  EXPECT_THAT(text, HasSubstr("(avgpool): AdaptiveAvgPool2d(output_size=(1, 1))"));
  EXPECT_THAT(text, HasSubstr("(fc): Linear(in_features=512, out_features=10, bias=True)"));
}

// Mean and standard deviation of t's values.
std::pair<double, double> Moments(const Tensor& t) {
  double sum = 0.0, squares = 0.0;
  const std::vector<float> v = t.ToVector<float>();
  for (float x : v) sum += x;
  const double mean = sum / v.size();
  for (float x : v) squares += (x - mean) * (x - mean);
  return {mean, std::sqrt(squares / v.size())};
}

TEST(ResNetTest, InitialisedAsTorchvision) {
  const Module* model = &SharedResNet18();
  // kaiming_normal_(mode="fan_out", nonlinearity="relu"): stddev sqrt(2 / (out * kh * kw)).
  for (const auto& [name, fan_out] : std::vector<std::pair<std::string, double>>{
           {"layer3.0.conv2.weight", 256 * 9}, {"layer4.1.conv1.weight", 512 * 9},
           {"layer4.0.downsample.0.weight", 512}, {"conv1.weight", 64 * 9}}) {
    const auto [mean, stddev] = Moments(StateOf(*model, name));
    const double expected = std::sqrt(2.0 / fan_out);
    EXPECT_NEAR(mean, 0.0, 0.1 * expected) << name;
    EXPECT_NEAR(stddev, expected, 0.06 * expected) << name;
  }
  EXPECT_EQ(StateOf(*model, "layer2.1.bn1.weight").ToVector<float>(), std::vector<float>(128, 1.0f));
  EXPECT_EQ(StateOf(*model, "layer2.1.bn1.bias").ToVector<float>(), std::vector<float>(128, 0.0f));
  for (float w : StateOf(*model, "fc.weight").ToVector<float>()) {
    ASSERT_LE(std::abs(w), 1.0f / std::sqrt(512.0f));  // nn.Linear's U(-1/sqrt(in), 1/sqrt(in))
  }
  // Same seed, same model.
  EXPECT_EQ(StateOf(*ResNet18(3), "layer1.0.conv1.weight").ToVector<float>(),
            StateOf(*model, "layer1.0.conv1.weight").ToVector<float>());
}

TEST(ResNetTest, ShapesThroughTheNetwork) {
  Generator g(5);
  BasicBlock same(8, 8, 1, g), down(8, 16, 2, g);
  EXPECT_FALSE(same.has_downsample());
  EXPECT_TRUE(down.has_downsample());
  Tensor x = Uniform({2, 8, 7, 7}, -1.0f, 1.0f, g);
  EXPECT_EQ(same.Forward(x).shape(), (Shape{2, 8, 7, 7}));
  EXPECT_EQ(down.Forward(x).shape(), (Shape{2, 16, 4, 4}));  // ceil(7 / 2)

  auto model = ResNet18(1);
  EXPECT_EQ(model->Forward(Uniform({2, 1, 28, 28}, 0.0f, 1.0f, g)).shape(), (Shape{2, 10}));
  // Any image size: 9x9 reaches the last stage at 2x2 (9 -> 5 -> 3 -> 2), 1x1 at 1x1 (eval: a batch of one
  // image has one value per channel there, too few for batch statistics).
  EXPECT_EQ(model->Forward(Uniform({3, 1, 9, 9}, 0.0f, 1.0f, g)).shape(), (Shape{3, 10}));
  model->Eval();
  EXPECT_EQ(model->Forward(Uniform({1, 1, 1, 1}, 0.0f, 1.0f, g)).shape(), (Shape{1, 10}));

  // Other depths, input channels and classes: stem (3 tensors), 3 blocks of 6, one downsample of 3, fc.
  ResNetOptions options;
  options.blocks_per_stage = {1, 2};
  options.in_channels = 3;
  options.num_classes = 7;
  ResNet small(options, g);
  EXPECT_EQ(small.NamedParameters().size(), 3u + 3 * 6 + 3 + 2);
  EXPECT_EQ(small.Forward(Uniform({2, 3, 8, 8}, 0.0f, 1.0f, g)).shape(), (Shape{2, 7}));
  EXPECT_EQ(StateOf(small, "fc.weight").shape(), (Shape{7, 128}));
}

// Gradients of a whole block (convolutions without bias, BatchNorm, ReLU, the residual add, the strided
// 1x1 downsample) against finite differences, for the input and every parameter. The block is piecewise
// smooth: a probe whose step moves some ReLU input across zero sees a kink, not the derivative. A step
// of 1e-3 (float32 still resolves it: GradCheck's sums are O(10)) leaves no kink within a step of these
// fixed inputs in training mode, where BatchNorm centres the ReLU inputs on zero; in eval mode the
// BatchNorm biases are raised so the ReLU inputs sit clear of zero, and the check covers the running
// statistics' affine map and the residual paths.
TEST(ResNetTest, BasicBlockGradCheck) {
  for (const auto& [in, out, stride] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{2, 3, 2}, {3, 3, 1}}) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(::testing::Message() << in << " -> " << out << " stride " << stride
                                        << (training ? " train" : " eval"));
      Generator g(7);
      BasicBlock block(in, out, stride, g);
      block.Train(training);
      if (!training) {
        for (const auto& [name, b] : block.NamedBuffers()) {
          if (b.dtype() == DType::kFloat32) CopyInPlace(b, Uniform(b.shape(), 0.5f, 1.5f, g));
        }
        for (const auto& [name, p] : block.NamedParameters()) {
          if (name.find("bias") != std::string::npos) CopyInPlace(p, Uniform(p.shape(), 2.0f, 3.0f, g));
        }
      }
      Tensor x = Uniform({2, in, 5, 5}, -1.0f, 1.0f, g);
      x.set_requires_grad(true);
      std::vector<Tensor> inputs = {x};
      for (const Tensor& p : block.Parameters()) inputs.push_back(p);
      GradCheckOptions options;
      options.epsilon = 1e-3f;
      EXPECT_EQ(GradCheck([&block](const std::vector<Tensor>& v) { return block.Forward(v[0]); }, inputs, options),
                "");
    }
  }
}

TEST(ResNetTest, GlobalAveragePoolingGradCheck) {
  Generator g(8);
  AdaptiveAvgPool2d pool(1);
  Tensor x = Uniform({2, 3, 4, 5}, -1.0f, 1.0f, g);
  x.set_requires_grad(true);
  Tensor y = pool.Forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 1, 1}));
  EXPECT_NEAR(y.ToVector<float>()[4], Mean(Narrow(Narrow(x, 0, 1, 1), 1, 1, 1)).item(), 1e-6);
  EXPECT_EQ(GradCheck([&pool](const std::vector<Tensor>& v) { return pool.Forward(v[0]); }, {x}), "");
}

TEST(ResNetTest, TrainingForwardUpdatesEveryBatchNormAndEvalNone) {
  auto model = ResNet18(2);
  Generator g(9);
  const Tensor x = Uniform({4, 1, 12, 12}, 0.0f, 1.0f, g);
  model->Forward(x);
  int batch_norms = 0;
  for (const auto& [name, b] : model->NamedBuffers()) {
    if (b.dtype() == DType::kInt64) {
      ++batch_norms;
      EXPECT_EQ(b.item(), 1.0) << name;
    } else if (name.find("running_mean") != std::string::npos) {
      EXPECT_NE(b.ToVector<float>(), std::vector<float>(b.numel(), 0.0f)) << name;
    }
  }
  EXPECT_EQ(batch_norms, 20);
  model->Eval();
  const std::vector<float> before = StateOf(*model, "layer4.1.bn2.running_var").ToVector<float>();
  model->Forward(x);
  EXPECT_EQ(StateOf(*model, "layer4.1.bn2.running_var").ToVector<float>(), before);
  EXPECT_EQ(StateOf(*model, "bn1.num_batches_tracked").item(), 1.0);
}

// Every parameter gets a gradient and a few SGD steps on one small batch fit it: the whole backward is
// wired, through both stages' downsamples and the residual adds.
TEST(ResNetTest, StepsOnOneBatchLowerItsLoss) {
  auto model = ResNet18(6);
  Generator g(10);
  const Tensor x = Uniform({8, 1, 8, 8}, 0.0f, 1.0f, g);
  const Tensor target = FromVector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8});
  SgdOptions options;
  options.lr = 0.05f;
  options.momentum = 0.9f;
  Sgd sgd(model->Parameters(), options);
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 6; ++step) {
    model->ZeroGrad();
    Tensor loss = CrossEntropy(model->Forward(x), target);
    loss.Backward();
    if (step == 0) {
      for (const auto& [name, p] : model->NamedParameters()) ASSERT_TRUE(p.grad().defined()) << name;
      first = loss.item();
    }
    last = loss.item();
    sgd.Step();
  }
  EXPECT_LT(last, 0.5f * first) << "loss " << first << " -> " << last;
}

TEST(ResNetTest, ReplicaIsDeepAndComputesTheSame) {
  auto model = ResNet18(11);
  model->Eval();
  auto replica = model->Replicate();
  Generator g(12);
  const Tensor x = Uniform({2, 1, 10, 10}, 0.0f, 1.0f, g);
  EXPECT_EQ(replica->Forward(x).ToVector<float>(), model->Forward(x).ToVector<float>());
  const Tensor original = StateOf(*model, "layer2.0.downsample.1.running_mean");
  const Tensor copy = StateOf(*replica, "layer2.0.downsample.1.running_mean");
  EXPECT_NE(original.storage().get(), copy.storage().get());
}

// The fused BatchNorm + add + ReLU blocks (BasicBlock::set_fuse_blocks, on by default) against the same
// weights run module by module: logits, every parameter's gradient and every running statistic agree bit
// for bit, over two training steps; Replicate keeps the setting.
TEST(ResNetTest, FusedBlocksComputeBitForBitWhatModuleByModuleComputes) {
  auto fused = ResNet18(21);
  auto plain = fused->Replicate();
  ASSERT_NE(dynamic_cast<ResNet*>(plain.get()), nullptr);
  dynamic_cast<ResNet&>(*plain).set_fuse_blocks(false);
  ASSERT_TRUE(dynamic_cast<ResNet&>(*fused).fuse_blocks());
  EXPECT_FALSE(dynamic_cast<ResNet&>(*plain->Replicate()).fuse_blocks());
  Generator g(22);
  const Tensor x = Uniform({4, 1, 12, 12}, 0.0f, 1.0f, g);
  const Tensor target = FromVector(std::vector<int64_t>{1, 3, 5, 7}, {4});
  for (int step = 0; step < 2; ++step) {
    for (Module* model : {fused.get(), plain.get()}) {
      model->ZeroGrad();
      CrossEntropy(model->Forward(x), target).Backward();
    }
    EXPECT_EQ(fused->Forward(x).ToVector<float>(), plain->Forward(x).ToVector<float>());
    const auto fused_params = fused->NamedParameters(), plain_params = plain->NamedParameters();
    ASSERT_EQ(fused_params.size(), plain_params.size());
    for (size_t i = 0; i < fused_params.size(); ++i) {
      EXPECT_EQ(fused_params[i].second.grad().ToVector<float>(), plain_params[i].second.grad().ToVector<float>())
          << fused_params[i].first;
    }
    const NamedTensors fused_state = fused->StateDict(), plain_state = plain->StateDict();
    for (size_t i = 0; i < fused_state.size(); ++i) {
      if (fused_state[i].second.dtype() != DType::kFloat32) continue;
      EXPECT_EQ(fused_state[i].second.ToVector<float>(), plain_state[i].second.ToVector<float>())
          << fused_state[i].first;
    }
  }
}

// max |a - b| over max |b|, for tensors of one shape.
float RelativeDifference(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  float diff = 0.0f, scale = 1e-12f;
  for (size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, std::fabs(va[i] - vb[i]));
    scale = std::max(scale, std::fabs(vb[i]));
  }
  return diff / scale;
}

// The cosine of the angle between a and b as flat vectors.
double Cosine(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.ToVector<float>(), vb = b.ToVector<float>();
  double ab = 0.0, aa = 1e-30, bb = 1e-30;
  for (size_t i = 0; i < va.size(); ++i) {
    ab += static_cast<double>(va[i]) * vb[i];
    aa += static_cast<double>(va[i]) * va[i];
    bb += static_cast<double>(vb[i]) * vb[i];
  }
  return ab / std::sqrt(aa * bb);
}

// Channels-last activations (ResNet::set_channels_last) against the same weights run NCHW, one training
// step and an eval forward. float32: logits, every parameter's gradient and every running statistic agree
// to float32 rounding (the sums run in other orders). bf16: the convolutions' sums in another order flip
// some roundings of their bf16 operands, which BatchNorm over this small batch amplifies (as any change of
// kernel does), so the logits agree within 3% and the gradients point the same way (a layout mistake
// gives unrelated numbers). Replicate keeps the setting.
TEST(ResNetTest, ChannelsLastComputesWhatNchwComputes) {
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "float32");
    auto nchw = ResNet18(31);
    auto channels_last = nchw->Replicate();
    dynamic_cast<ResNet&>(*channels_last).set_channels_last(true);
    EXPECT_TRUE(dynamic_cast<ResNet&>(*channels_last->Replicate()).channels_last());
    Generator g(32);
    const Tensor x = Uniform({4, 1, 12, 12}, 0.0f, 1.0f, g);
    const Tensor target = FromVector(std::vector<int64_t>{1, 3, 5, 7}, {4});
    std::vector<Tensor> logits;
    for (Module* model : {nchw.get(), channels_last.get()}) {
      model->ZeroGrad();
      AutocastScope autocast(bf16);
      logits.push_back(model->Forward(x));
      CrossEntropy(logits.back(), target).Backward();
    }
    EXPECT_LT(RelativeDifference(logits[1], logits[0]), bf16 ? 3e-2f : 1e-5f) << "training logits";
    const auto a = channels_last->NamedParameters(), b = nchw->NamedParameters();
    for (size_t i = 0; i < a.size(); ++i) {
      if (bf16) {
        EXPECT_GT(Cosine(a[i].second.grad(), b[i].second.grad()), 0.9) << a[i].first;
      } else {
        EXPECT_LT(RelativeDifference(a[i].second.grad(), b[i].second.grad()), 1e-4f) << a[i].first;
      }
    }
    const NamedTensors state_a = channels_last->StateDict(), state_b = nchw->StateDict();
    for (size_t i = 0; i < state_a.size(); ++i) {
      if (state_a[i].second.dtype() != DType::kFloat32) continue;
      EXPECT_LT(RelativeDifference(state_a[i].second, state_b[i].second), bf16 ? 3e-2f : 1e-5f)
          << state_a[i].first;
    }
    for (Module* model : {nchw.get(), channels_last.get()}) model->Eval();
    AutocastScope autocast(bf16);
    EXPECT_LT(RelativeDifference(channels_last->Forward(x), nchw->Forward(x)), bf16 ? 3e-2f : 1e-5f)
        << "eval logits";
  }
}

// Counts the module calls an observer sees, by module type.
class CallCounter : public ModuleCallObserver {
 public:
  Tensor BeforeForward(const Module& module, const Tensor& input) override {
    ++calls_[module.type_name()];
    return input;
  }
  Tensor AfterForward(const Module&, const Tensor& output) override { return output; }
  int calls(const std::string& type) const {
    const auto it = calls_.find(type);
    return it == calls_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, int> calls_;
};

// Under bf16 autocast on channels-last activations the fused blocks run each convolution with its
// BatchNorm as one op (Note [Convolution and BatchNorm in one op under bf16], tensor/conv_batch_norm.h),
// which an observer sees as the convolution's call: only the three downsample BatchNorms are called as
// modules. Against the same weights run module by module one training step agrees bit for bit: logits,
// every gradient, the running statistics.
TEST(ResNetTest, FusedConvolutionAndBatchNormUnderBf16ComputeWhatModuleByModuleComputes) {
  auto fused = ResNet18(41);
  dynamic_cast<ResNet&>(*fused).set_channels_last(true);
  auto plain = fused->Replicate();
  dynamic_cast<ResNet&>(*plain).set_fuse_blocks(false);
  Generator g(42);
  const Tensor x = Uniform({4, 1, 12, 12}, 0.0f, 1.0f, g);
  const Tensor target = FromVector(std::vector<int64_t>{1, 3, 5, 7}, {4});
  std::vector<Tensor> logits;
  std::vector<int> batch_norm_calls;
  for (Module* model : {fused.get(), plain.get()}) {
    CallCounter counter;
    ModuleCallObserver* previous = SetModuleCallObserver(&counter);
    AutocastScope autocast;
    logits.push_back(model->Forward(x));
    CrossEntropy(logits.back(), target).Backward();
    SetModuleCallObserver(previous);
    batch_norm_calls.push_back(counter.calls("BatchNorm2d"));
  }
  EXPECT_EQ(batch_norm_calls[0], 3);
  EXPECT_EQ(batch_norm_calls[1], 20);
  EXPECT_LT(RelativeDifference(logits[0], logits[1]), 3e-2f);
  const auto a = fused->NamedParameters(), b = plain->NamedParameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_GT(Cosine(a[i].second.grad(), b[i].second.grad()), 0.9) << a[i].first;
  const NamedTensors state_a = fused->StateDict(), state_b = plain->StateDict();
  for (size_t i = 0; i < state_a.size(); ++i) {
    if (state_a[i].second.dtype() != DType::kFloat32) continue;
    EXPECT_LT(RelativeDifference(state_a[i].second, state_b[i].second), 3e-2f) << state_a[i].first;
  }
}

TEST(ResNetDeathTest, BadInputAndConfigurationAreNamed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Generator g(0);
  ResNetOptions one_stage;  // resnet18's checks, at a fraction of its size (every death re-runs the test)
  one_stage.blocks_per_stage = {1};
  ResNet model(one_stage, g);
  EXPECT_DEATH(model.Forward(Zeros({2, 3, 28, 28})), "ResNet got input \\[2, 3, 28, 28\\], expected \\[n, 1, h, w\\]");
  EXPECT_DEATH(model.Forward(Zeros({2, 28, 28})), "ResNet got input \\[2, 28, 28\\]");
  ResNetOptions empty;
  empty.blocks_per_stage = {};
  EXPECT_DEATH(ResNet(empty, g), "blocks_per_stage needs 1 to 4 entries");
  ResNetOptions zero_blocks;
  zero_blocks.blocks_per_stage = {2, 0};
  EXPECT_DEATH(ResNet(zero_blocks, g), "each >= 1");
  EXPECT_DEATH(BasicBlock(4, 8, 0, g), "BasicBlock\\(4, 8, stride 0\\): invalid configuration");
  EXPECT_DEATH(AdaptiveAvgPool2d(2), "only output size 1");
  AdaptiveAvgPool2d pool;
  EXPECT_DEATH(pool.Forward(Zeros({2, 3, 4})), "AdaptiveAvgPool2d got input \\[2, 3, 4\\]");
}

}  // namespace
}  // namespace nn
}  // namespace ddp
