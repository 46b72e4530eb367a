#include "nn/layers.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nn/models.h"
#include "tensor/autograd.h"
#include "tensor/factory.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

namespace ddp {
namespace nn {
namespace {

using ::testing::ElementsAre;

float MaxAbs(const Tensor& t) {
  float m = 0.0f;
  for (float v : t.ToVector<float>()) m = std::max(m, std::abs(v));
  return m;
}

TEST(LayersTest, LinearShapesAndInit) {
  Generator g(0);
  Linear fc(100, 7, g);
  EXPECT_EQ(fc.weight().shape(), (Shape{7, 100}));
  EXPECT_EQ(fc.bias().shape(), (Shape{7}));
  EXPECT_LE(MaxAbs(fc.weight()), 0.1f);  // 1/sqrt(100)
  EXPECT_GT(MaxAbs(fc.weight()), 0.09f);
  EXPECT_LE(MaxAbs(fc.bias()), 0.1f);
  EXPECT_EQ(fc.Forward(Zeros({3, 100})).shape(), (Shape{3, 7}));
  Linear no_bias(4, 2, g, /*bias=*/false);
  EXPECT_FALSE(no_bias.bias().defined());
  EXPECT_EQ(no_bias.Parameters().size(), 1u);
  // Same seed, same weights.
  Generator g1(5), g2(5);
  EXPECT_EQ(Linear(3, 3, g1).weight().ToVector<float>(), Linear(3, 3, g2).weight().ToVector<float>());
}

TEST(LayersTest, LinearGradCheck) {
  Generator g(1);
  Linear fc(5, 3, g);
  Tensor x = Uniform({4, 5}, -1.0f, 1.0f, g);
  x.set_requires_grad(true);
  EXPECT_EQ(GradCheck([&fc](const std::vector<Tensor>& in) { return fc.Forward(in[0]); },
                      {x, fc.weight(), fc.bias()}),
            "");
}

TEST(LayersTest, Conv2dShapesAndInit) {
  Generator g(0);
  Conv2dOptions options;
  options.stride = 2;
  options.padding = 1;
  Conv2d conv(3, 8, 3, g, options);
  EXPECT_EQ(conv.weight().shape(), (Shape{8, 3, 3, 3}));
  EXPECT_LE(MaxAbs(conv.weight()), 1.0f / std::sqrt(27.0f));
  EXPECT_EQ(conv.Forward(Zeros({2, 3, 9, 9})).shape(), (Shape{2, 8, 5, 5}));
  EXPECT_EQ(conv.ToString(), "Conv2d(3, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
}

TEST(LayersTest, Conv2dGradCheck) {
  for (int64_t stride : {1, 2}) {
    for (int64_t padding : {0, 1}) {
      Generator g(2);
      Conv2dOptions options;
      options.stride = stride;
      options.padding = padding;
      Conv2d conv(2, 3, 3, g, options);
      Tensor x = Uniform({2, 2, 6, 6}, -1.0f, 1.0f, g);
      x.set_requires_grad(true);
      EXPECT_EQ(GradCheck([&conv](const std::vector<Tensor>& in) { return conv.Forward(in[0]); },
                          {x, conv.weight(), conv.bias()}),
                "")
          << "stride " << stride << " padding " << padding;
    }
  }
}

TEST(LayersTest, ReluMaxPoolFlatten) {
  Tensor x = FromVector(std::vector<float>{1, -2, 3, -4, 5, 6, -7, 8, 9, 10, 11, 12, -13, 14, 15, 16}, {1, 1, 4, 4});
  ReLU relu;
  MaxPool2d pool(2);
  Flatten flatten;
  EXPECT_THAT(flatten.Forward(pool.Forward(relu.Forward(x))).ToVector<float>(), ElementsAre(6, 8, 14, 16));
  EXPECT_EQ(flatten.Forward(x).shape(), (Shape{1, 16}));
  EXPECT_EQ(Flatten(0).Forward(x).shape(), (Shape{16}));
  EXPECT_EQ(MaxPool2d(2, 1).Forward(x).shape(), (Shape{1, 1, 3, 3}));
}

TEST(LayersTest, BatchNormTrainingUpdatesBuffers) {
  BatchNorm2d bn(2);
  Generator g(4);
  Tensor x = Uniform({4, 2, 3, 3}, 0.0f, 2.0f, g);
  EXPECT_EQ(bn.num_batches_tracked().item(), 0.0);
  Tensor y = bn.Forward(x);
  EXPECT_EQ(bn.num_batches_tracked().item(), 1.0);
  bn.Forward(x);
  EXPECT_EQ(bn.num_batches_tracked().item(), 2.0);
  // Normalised per channel: mean ~0.
  std::vector<float> m = Mean(y, {0, 2, 3}).ToVector<float>();
  EXPECT_NEAR(m[0], 0.0f, 1e-5f);
  EXPECT_NEAR(m[1], 0.0f, 1e-5f);
  EXPECT_GT(bn.running_mean().ToVector<float>()[0], 0.1f);  // moved towards ~1

  bn.Eval();
  const std::vector<float> running = bn.running_mean().ToVector<float>();
  bn.Forward(x);
  EXPECT_EQ(bn.num_batches_tracked().item(), 2.0);
  EXPECT_EQ(bn.running_mean().ToVector<float>(), running);
}

TEST(LayersTest, BatchNormGradCheck) {
  BatchNorm2d bn(2);
  Generator g(5);
  FillInPlace(bn.weight(), 1.5f);
  Tensor x = Uniform({3, 2, 2, 2}, -1.0f, 1.0f, g);
  x.set_requires_grad(true);
  EXPECT_EQ(GradCheck([&bn](const std::vector<Tensor>& in) { return bn.Forward(in[0]); },
                      {x, bn.weight(), bn.bias()}),
            "");
}

TEST(LayersTest, DropoutTrainAndEval) {
  Dropout dropout(0.5f, /*seed=*/7);
  Tensor x = Ones({1000});
  std::vector<float> y = dropout.Forward(x).ToVector<float>();
  const int64_t zeros = std::count(y.begin(), y.end(), 0.0f);
  EXPECT_GT(zeros, 400);
  EXPECT_LT(zeros, 600);
  for (float v : y) EXPECT_TRUE(v == 0.0f || v == 2.0f);
  // Same seed, same mask.
  Dropout again(0.5f, 7);
  EXPECT_EQ(again.Forward(x).ToVector<float>(), y);
  dropout.Eval();
  EXPECT_EQ(dropout.Forward(x).ToVector<float>(), x.ToVector<float>());
}

TEST(LayersTest, SequentialRunsInOrder) {
  Generator g(0);
  auto fc = std::make_shared<Linear>(2, 2, g, false);
  CopyInPlace(fc->weight(), FromVector(std::vector<float>{1, 0, 0, -1}, {2, 2}));
  Sequential seq({{"fc", fc}, {"act", std::make_shared<ReLU>()}});
  EXPECT_THAT(seq.Forward(FromVector(std::vector<float>{3, 4}, {1, 2})).ToVector<float>(), ElementsAre(3, 0));
  seq.Add(std::make_shared<Flatten>(0));
  EXPECT_EQ(seq.NamedChildren()[2].first, "2");
  EXPECT_EQ(seq.size(), 3u);
}

// The names of the backward nodes from `y` along first inputs (the conv's input needs no gradient).
std::vector<std::string> BackwardChain(const Tensor& y) {
  std::vector<std::string> names;
  for (std::shared_ptr<Node> node = y.grad_fn(); node != nullptr;) {
    names.push_back(node->name());
    node = node->next_edges.empty() ? nullptr : node->next_edges[0].node;
  }
  return names;
}

// A module call observer that records which modules it saw, and changes nothing.
class RecordingObserver : public ModuleCallObserver {
 public:
  Tensor BeforeForward(const Module& module, const Tensor& input) override {
    seen.push_back(module.type_name());
    return input;
  }
  Tensor AfterForward(const Module&, const Tensor& output) override { return output; }
  std::vector<std::string> seen;
};

// Note [Fusion in Sequential]: Conv2d, ReLU, MaxPool2d runs as Conv2dReluMaxPool2d and ReLU, MaxPool2d as
// MaxPool2dOfRelu, with the values and gradients of the modules; an observer sees each block as its first
// module's call; not after set_fuse_blocks(false) (which Replicate keeps), not for a ReLU before something
// else.
TEST(LayersTest, SequentialFusesCnnBlocks) {
  auto make = [] {
    Generator g(3);
    return std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
        std::make_shared<Conv2d>(1, 3, 3, g), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<ReLU>(), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2, 1),
        std::make_shared<Flatten>(), std::make_shared<ReLU>()});
  };
  Generator g(5);
  const Tensor x = Uniform({2, 1, 9, 9}, -1.0f, 1.0f, g);
  struct Run {
    std::vector<std::string> chain, seen;
    std::vector<float> y, conv_grad;
  };
  auto run = [&](bool fuse, bool observed) {
    auto seq = make();
    seq->set_fuse_blocks(fuse);
    RecordingObserver observer;
    ModuleCallObserver* previous = SetModuleCallObserver(observed ? &observer : nullptr);
    Tensor y = seq->Forward(x);
    SetModuleCallObserver(previous);
    const std::vector<std::string> chain = BackwardChain(y);
    Sum(Mul(y, Reshape(Arange(y.numel()), y.shape()))).Backward();
    return Run{chain, observer.seen, y.ToVector<float>(), seq->NamedParameters()[0].second.grad().ToVector<float>()};
  };
  const Run fused = run(true, false), unfused = run(false, false), observed = run(true, true);
  EXPECT_THAT(fused.chain, ElementsAre("ReluBackward", "ReshapeBackward", "MaxPool2dOfReluBackward",
                                       "ReluBackward", "Conv2dReluMaxPool2dBackward"));
  EXPECT_THAT(unfused.chain, ElementsAre("ReluBackward", "ReshapeBackward", "MaxPool2dBackward", "ReluBackward",
                                         "ReluBackward", "MaxPool2dBackward", "ReluBackward", "Conv2dBackward"));
  EXPECT_EQ(observed.chain, fused.chain);
  EXPECT_THAT(observed.seen, ElementsAre("Conv2d", "ReLU", "ReLU", "Flatten", "ReLU"));
  for (const Run* other : {&unfused, &observed}) {
    EXPECT_EQ(fused.y, other->y);
    EXPECT_EQ(fused.conv_grad, other->conv_grad);
  }
  auto off = make();
  off->set_fuse_blocks(false);
  EXPECT_FALSE(std::static_pointer_cast<Sequential>(off->Replicate())->fuse_blocks());
  EXPECT_TRUE(make()->fuse_blocks());
}

TEST(LayersTest, ModelInputsOutsideWhatAModelTakesAreErrors) {
  EXPECT_TRUE(CheckModelInput("cnn", ModelInput{}).ok());
  const auto message = [](const std::string& name, const ModelInput& input) {
    return std::string(CheckModelInput(name, input).message());
  };
  EXPECT_NE(message("resnet", {}).find("valid models: mlp, cnn, cnn_bn, resnet18"), std::string::npos);
  EXPECT_NE(message("mlp", {{28, 28}, 10}).find("not [28, 28]"), std::string::npos);
  EXPECT_NE(message("mlp", {{1, 0, 28}, 10}).find("not [1, 0, 28]"), std::string::npos);
  EXPECT_NE(message("resnet18", {{3, 32, 32}, 1}).find("at least 2 classes"), std::string::npos);
  EXPECT_NE(message("cnn_bn", {{3, 3, 32}, 10}).find("at least 4x4"), std::string::npos);
  EXPECT_TRUE(CheckModelInput("resnet18", {{3, 3, 3}, 10}).ok());
  Generator g(1);
  EXPECT_FALSE(MakeModel("cnn", g, {{1, 2, 2}, 10}).ok());
}

// Every model on MNIST's input and on CIFAR-100's: logits [n, classes], a gradient for every parameter.
TEST(LayersTest, ModelsRunForwardAndBackward) {
  for (const ModelInput& input : {ModelInput{}, ModelInput{{3, 32, 32}, 100}, ModelInput{{2, 9, 13}, 3}}) {
    for (const std::string& name : ModelNames()) {
      Generator g(1);
      auto model = *MakeModel(name, g, input);
      Shape shape = input.image_shape;
      shape.insert(shape.begin(), 2);
      Tensor x = Uniform(shape, 0.0f, 1.0f, g);
      Tensor logits = model->Forward(x);
      EXPECT_EQ(logits.shape(), (Shape{2, input.num_classes})) << name;
      CrossEntropy(logits, FromVector(std::vector<int64_t>{1, 2}, {2})).Backward();
      for (const auto& [pname, p] : model->NamedParameters()) {
        EXPECT_TRUE(p.grad().defined()) << name << " " << pname;
      }
    }
  }
}

// The parameter counts of the CIFAR-10 models, against what their PyTorch twins (tools/reference_models.py)
// report: sum(p.numel() for p in model.parameters()).
TEST(LayersTest, Cifar10ModelsHaveTheirPyTorchTwinsParameterCounts) {
  const std::map<std::string, int64_t> want = {
      {"mlp", 3072 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10},
      {"cnn", 3 * 32 * 9 + 32 + 32 * 64 * 9 + 64 + 64 * 8 * 8 * 128 + 128 + 128 * 10 + 10},
      {"resnet18", 11173962},
  };
  for (const auto& [name, count] : want) {
    Generator g(1);
    int64_t values = 0;
    for (const Tensor& p : (*MakeModel(name, g, {{3, 32, 32}, 10}))->Parameters()) values += p.numel();
    EXPECT_EQ(values, count) << name;
  }
}

}  // namespace
}  // namespace nn
}  // namespace ddp
