#include "nn/module.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nn/layers.h"
#include "nn/models.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nn::BatchNorm2d;
using nn::Linear;
using nn::ReLU;
using nn::Sequential;

std::vector<std::string> Names(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}

// A module with its own parameter, a buffer and a nested child, registered interleaved.
class Block : public Module {
 public:
  explicit Block(Generator& g) : Module("Block") {
    RegisterParameter("scale", Ones({3}));
    RegisterModule("inner", std::make_shared<Linear>(3, 2, g));
    RegisterBuffer("count", Zeros({}, DType::kInt64));
    RegisterModule("bn", std::make_shared<BatchNorm2d>(2));
  }
  // Children are reached by name so that Replicate() (ReplicateAs) stays correct.
  Tensor Forward(const Tensor& x) override {
    return ChildAs<Linear>("inner")->Forward(x * GetParameter("scale"));
  }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// The example of nn/module.h, verbatim.
class TwoLayerNet : public Module {
 public:
  explicit TwoLayerNet(Generator& g) : Module("TwoLayerNet") {
    RegisterModule("fc1", std::make_shared<nn::Linear>(4, 8, g));
    RegisterModule("fc2", std::make_shared<nn::Linear>(8, 2, g));
  }
  Tensor Forward(const Tensor& x) override {
    return Child("fc2")->Forward(Relu(Child("fc1")->Forward(x)));
  }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

TEST(ModuleTest, HeaderExample) {
  Generator g(0);
  TwoLayerNet net(g);
  EXPECT_THAT(Names(net.NamedParameters()), ElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
  EXPECT_EQ(net.Parameters()[2].shape(), (Shape{2, 8}));
  Tensor x = Uniform({3, 4}, -1.0f, 1.0f, g);
  EXPECT_EQ(net.Forward(x).shape(), (Shape{3, 2}));
  EXPECT_EQ(net.Replicate()->Forward(x).ToVector<float>(), net.Forward(x).ToVector<float>());
}

TEST(ModuleTest, NamesFollowRegistrationOrderRecursively) {
  Generator g(1);
  Sequential seq({std::make_shared<Block>(g), std::make_shared<ReLU>(), std::make_shared<Linear>(2, 2, g)});
  EXPECT_THAT(Names(seq.NamedParameters()),
              ElementsAre("0.scale", "0.inner.weight", "0.inner.bias", "0.bn.weight", "0.bn.bias",
                          "2.weight", "2.bias"));
  EXPECT_THAT(Names(seq.NamedBuffers()), ElementsAre("0.count", "0.bn.running_mean", "0.bn.running_var",
                                                     "0.bn.num_batches_tracked"));
  // torch's state_dict order: per module, parameters then buffers, then the children.
  EXPECT_THAT(Names(seq.StateDict()),
              ElementsAre("0.scale", "0.count", "0.inner.weight", "0.inner.bias", "0.bn.weight",
                          "0.bn.bias", "0.bn.running_mean", "0.bn.running_var", "0.bn.num_batches_tracked",
                          "2.weight", "2.bias"));
  EXPECT_EQ(seq.Parameters().size(), 7u);
  EXPECT_EQ(seq.Children().size(), 3u);
  EXPECT_EQ(seq.NamedChildren()[1].first, "1");
  EXPECT_EQ(seq.Child("1")->type_name(), "ReLU");
  EXPECT_EQ(seq.Child("7"), nullptr);
  for (const Tensor& p : seq.Parameters()) EXPECT_TRUE(p.requires_grad());
  // Lazily named.
  EXPECT_EQ(seq.Parameters()[1].name(), "0.inner.weight");

  auto replica = seq.Replicate();
  Tensor x = Uniform({4, 3}, -1.0f, 1.0f, g);
  EXPECT_EQ(seq.Forward(x).ToVector<float>(), replica->Forward(x).ToVector<float>());
  EXPECT_EQ(Names(replica->StateDict()), Names(seq.StateDict()));
  EXPECT_NE(replica->Child("0")->ChildAs<Linear>("inner")->weight().storage().get(),
            seq.Child("0")->ChildAs<Linear>("inner")->weight().storage().get());
}

TEST(ModuleTest, ModelNamesMatchPyTorch) {
  Generator g(0);
  auto mlp = MakeModel("mlp", g);
  ASSERT_TRUE(mlp.ok());
  EXPECT_THAT(Names((*mlp)->StateDict()),
              ElementsAre("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"));
  auto cnn_bn = MakeModel("cnn_bn", g);
  ASSERT_TRUE(cnn_bn.ok());
  EXPECT_THAT(Names((*cnn_bn)->StateDict()),
              ElementsAre("conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean",
                          "bn1.running_var", "bn1.num_batches_tracked", "conv2.weight", "conv2.bias",
                          "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var",
                          "bn2.num_batches_tracked", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"));
  EXPECT_EQ((*cnn_bn)->StateDict()[4].second.name(), "bn1.running_mean");
  EXPECT_EQ((*cnn_bn)->GetBuffer("x").defined(), false);
  auto cnn = MakeModel("cnn", g);
  ASSERT_TRUE(cnn.ok());
  EXPECT_EQ((*cnn)->Parameters().size(), 8u);
  EXPECT_EQ((*cnn)->Parameters()[4].shape(), (Shape{128, 3136}));

  auto bad = MakeModel("resnet", g);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("resnet"));
  EXPECT_THAT(bad.status().message(), HasSubstr("mlp, cnn, cnn_bn"));
}

TEST(ModuleTest, SharedParameterListedOnce) {
  Generator g(0);
  auto fc = std::make_shared<Linear>(2, 2, g);
  Sequential seq({fc, fc});
  EXPECT_THAT(Names(seq.NamedParameters()), ElementsAre("0.weight", "0.bias"));
  EXPECT_EQ(seq.StateDict().size(), 4u);  // state dicts keep every name, as torch
}

TEST(ModuleTest, ReplaceChildKeepsPosition) {
  Generator g(0);
  Sequential seq({{"a", std::make_shared<Linear>(2, 3, g)}, {"b", std::make_shared<ReLU>()}});
  seq.ReplaceChild("a", std::make_shared<Linear>(2, 4, g, /*bias=*/false));
  EXPECT_THAT(Names(seq.NamedParameters()), ElementsAre("a.weight"));
  EXPECT_EQ(seq.NamedChildren()[0].first, "a");
  EXPECT_EQ(seq.ChildAs<Linear>("a")->out_features(), 4);
  EXPECT_EQ(seq.ChildAs<Linear>("b"), nullptr);  // wrong type
}

TEST(ModuleTest, TrainEvalPropagates) {
  Generator g(0);
  auto model = *MakeModel("cnn_bn", g);
  EXPECT_TRUE(model->is_training());
  model->Eval();
  EXPECT_FALSE(model->is_training());
  for (const auto& child : model->Children()) EXPECT_FALSE(child->is_training());
  model->Train();
  for (const auto& child : model->Children()) EXPECT_TRUE(child->is_training());
  model->Train(false);
  EXPECT_FALSE(model->Child("bn1")->is_training());
}

TEST(ModuleTest, ToStringLooksLikePyTorch) {
  Generator g(0);
  auto model = *MakeModel("mlp", g);
  const std::string text = model->ToString();
  EXPECT_THAT(text, HasSubstr("Sequential(\n"));
  EXPECT_THAT(text, HasSubstr("  (fc1): Linear(in_features=784, out_features=512, bias=True)\n"));
  EXPECT_THAT(text, HasSubstr("  (relu1): ReLU()\n"));
}

TEST(ModuleTest, ZeroGradKeepsGradientViews) {
  Generator g(0);
  Linear fc(3, 2, g);
  // Gradients as views into one flat buffer, as DDP's gradient_as_bucket_view does.
  Tensor flat = Full({8}, 5.0f);
  Tensor w_view = Tensor::View(flat.storage(), {2, 3}, {3, 1}, 0, DType::kFloat32);
  Tensor b_view = Tensor::View(flat.storage(), {2}, {1}, 6, DType::kFloat32);
  fc.weight().set_grad(w_view);
  fc.bias().set_grad(b_view);
  fc.ZeroGrad();
  EXPECT_TRUE(fc.weight().grad().is_same(w_view));
  EXPECT_TRUE(fc.bias().grad().is_same(b_view));
  EXPECT_THAT(flat.ToVector<float>(), ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
  // A backward pass accumulates into the views.
  Tensor x = Ones({1, 3});
  Sum(fc.Forward(x)).Backward();
  EXPECT_THAT(flat.ToVector<float>(), ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
  fc.ZeroGrad();
  EXPECT_THAT(flat.ToVector<float>(), ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
}

TEST(ModuleTest, ZeroGradLeavesMissingGradientsUndefined) {
  Generator g(0);
  Linear fc(3, 2, g);
  fc.ZeroGrad();
  EXPECT_FALSE(fc.weight().grad().defined());
}

TEST(ModuleTest, LoadStateDictCopiesInPlace) {
  Generator g(0), h(1);
  auto a = *MakeModel("cnn_bn", g);
  auto b = *MakeModel("cnn_bn", h);
  const Tensor b_weight = b->StateDict()[0].second;
  ASSERT_TRUE(b->LoadStateDict(a->StateDict()).ok());
  EXPECT_TRUE(b->StateDict()[0].second.is_same(b_weight));  // same handle, new values
  const NamedTensors sa = a->StateDict(), sb = b->StateDict();
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_FALSE(sa[i].second.storage().get() == sb[i].second.storage().get());
    if (sa[i].second.dtype() == DType::kFloat32) {
      EXPECT_EQ(sa[i].second.ToVector<float>(), sb[i].second.ToVector<float>()) << sa[i].first;
    }
  }
}

TEST(ModuleTest, LoadStateDictErrorsNameTheTensors) {
  Generator g(0);
  auto model = *MakeModel("mlp", g);
  std::map<std::string, Tensor> state;
  for (const auto& [name, t] : model->StateDict()) state[name] = Clone(t.Detach());
  const std::vector<float> before = model->StateDict()[0].second.ToVector<float>();

  auto missing = state;
  missing.erase("fc2.bias");
  FillInPlace(missing["fc1.weight"], 7.0f);
  absl::Status s = model->LoadStateDict(missing);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("missing key(s): \"fc2.bias\""));
  EXPECT_EQ(model->StateDict()[0].second.ToVector<float>(), before);  // untouched on error
  EXPECT_TRUE(model->LoadStateDict(missing, /*strict=*/false).ok());
  EXPECT_EQ(model->StateDict()[0].second.ToVector<float>()[0], 7.0f);

  auto unexpected = state;
  unexpected["fc4.weight"] = Zeros({1});
  s = model->LoadStateDict(unexpected);
  EXPECT_THAT(s.message(), HasSubstr("unexpected key(s): \"fc4.weight\""));
  EXPECT_TRUE(model->LoadStateDict(unexpected, /*strict=*/false).ok());

  auto wrong_shape = state;
  wrong_shape["fc3.weight"] = Zeros({10, 255});
  s = model->LoadStateDict(wrong_shape, /*strict=*/false);
  EXPECT_THAT(s.message(), HasSubstr("\"fc3.weight\": checkpoint has float32 [10, 255], the module has "
                                     "float32 [10, 256]"));

  auto wrong_dtype = state;
  wrong_dtype["fc3.bias"] = Zeros({10}, DType::kInt64);
  s = model->LoadStateDict(wrong_dtype);
  EXPECT_THAT(s.message(), HasSubstr("\"fc3.bias\": checkpoint has int64 [10]"));
}

TEST(ModuleTest, ReplicateIsDeepAndEqual) {
  Generator g(3);
  auto model = *MakeModel("cnn_bn", g);
  auto replica = model->Replicate();
  EXPECT_EQ(Names(replica->StateDict()), Names(model->StateDict()));
  EXPECT_EQ(replica->ToString(), model->ToString());
  const NamedTensors a = model->StateDict(), b = replica->StateDict();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NE(a[i].second.storage().get(), b[i].second.storage().get()) << a[i].first;
    EXPECT_EQ(a[i].second.requires_grad(), b[i].second.requires_grad());
    EXPECT_EQ(b[i].second.name(), a[i].first);
  }
  Generator data(9);
  Tensor x = Uniform({2, 1, 28, 28}, -1.0f, 1.0f, data);
  model->Eval();
  replica->Eval();
  EXPECT_EQ(model->Forward(x).ToVector<float>(), replica->Forward(x).ToVector<float>());
  // Independent: changing the replica leaves the original alone.
  FillInPlace(replica->Parameters()[0], 0.0f);
  EXPECT_NE(model->Parameters()[0].ToVector<float>(), replica->Parameters()[0].ToVector<float>());
  replica->Train();
  EXPECT_FALSE(model->is_training());
}


// Note [Modules with several inputs and outputs]: the example of nn/module.h, with its constructor.
class TwoTower : public Module {
 public:
  explicit TwoTower(Generator& g) : Module("TwoTower") {
    RegisterModule("image", std::make_shared<Linear>(6, 8, g));
    RegisterModule("side", std::make_shared<Linear>(2, 8, g));
    RegisterModule("head", std::make_shared<Linear>(8, 4, g));
    RegisterModule("aux", std::make_shared<Linear>(8, 3, g));
  }
  TensorList ForwardMany(const TensorList& inputs) override {
    const std::vector<Tensor> in = BindInputs(inputs, {"image", "side"});
    Tensor h = Relu((*Child("image"))(in[0]) + (*Child("side"))(in[1]));
    return {{"logits", (*Child("head"))(h)}, {"aux", (*Child("aux"))(h)}};
  }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

TEST(ModuleTest, ForwardManyHeaderExample) {
  Generator g(7);
  TwoTower net(g);
  const Tensor x = Uniform({5, 6}, -1.0f, 1.0f, g), s = Uniform({5, 2}, -1.0f, 1.0f, g);
  const std::vector<int64_t> labels = {0, 1, 2, 3, 0}, coarse = {0, 1, 2, 0, 1};
  const Tensor y = FromVector(labels, {5}), z = FromVector(coarse, {5});
  TensorList out = net.ForwardMany({x, s});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out.name(0), "logits");
  EXPECT_EQ(out.Get("logits").shape(), (Shape{5, 4}));
  EXPECT_EQ(out.Get("aux").shape(), (Shape{5, 3}));
  Tensor loss = CrossEntropy(out.Get("logits"), y) + CrossEntropy(out.Get("aux"), z) * 0.3f;
  loss.Backward();
  for (const auto& [name, p] : net.NamedParameters()) EXPECT_TRUE(p.grad().defined()) << name;
  // Named inputs, in any order, bind as in Python; the call operator gives the same outputs.
  const TensorList named = net({{"side", s}, {"image", x}});
  EXPECT_EQ(named.Get("logits").ToVector<float>(), out.Get("logits").ToVector<float>());
  EXPECT_EQ(net.Replicate()->ForwardMany({x, s}).Get("aux").ToVector<float>(), out.Get("aux").ToVector<float>());
  // Forward(x) is ForwardMany({x}): one input is too few here, and two outputs are too many.
  EXPECT_DEATH(net.Forward(x), "TwoTower.ForwardMany takes \\(image, side\\): \"side\" is missing");
  EXPECT_DEATH(net.ForwardMany({x}), "TwoTower.ForwardMany takes \\(image, side\\)");
}

// A one-output module written with ForwardMany is called with Forward too (the default adapts it).
class Scale2 : public Module {
 public:
  Scale2() : Module("Scale2") {}
  TensorList ForwardMany(const TensorList& inputs) override {
    const std::vector<Tensor> in = BindInputs(inputs, {"x"});
    return {in[0] * 2.0f};
  }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// Two outputs from two inputs, for the arity messages.
class Swap : public Module {
 public:
  Swap() : Module("Swap") {}
  TensorList ForwardMany(const TensorList& inputs) override {
    const std::vector<Tensor> in = BindInputs(inputs, {"a", "b"});
    return {in[1], in[0]};
  }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// Overrides neither Forward nor ForwardMany.
class Hollow : public Module {
 public:
  Hollow() : Module("Hollow") {}
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

// Sums its rows recursively through its own Forward from inside ForwardMany: the default Forward is
// re-entered, which must not be mistaken for a module that overrides neither.
class RecursiveRowSum : public Module {
 public:
  RecursiveRowSum() : Module("RecursiveRowSum") {}
  TensorList ForwardMany(const TensorList& inputs) override {
    const Tensor x = BindInputs(inputs, {"x"})[0];
    if (x.shape()[0] == 1) return {x};
    return {Narrow(x, 0, 0, 1) + Forward(Contiguous(Narrow(x, 0, 1, x.shape()[0] - 1)))};
  }
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
};

TEST(ModuleTest, EachEntryPointAdaptsTheOther) {
  Generator g(8);
  const Tensor x = Uniform({3, 4}, -1.0f, 1.0f, g);
  Linear linear(4, 2, g);  // overrides Forward only
  const TensorList through_many = linear.ForwardMany({x});
  ASSERT_EQ(through_many.size(), 1u);
  EXPECT_EQ(through_many[0].ToVector<float>(), linear.Forward(x).ToVector<float>());
  EXPECT_EQ(linear(TensorList{x})[0].ToVector<float>(), linear.Forward(x).ToVector<float>());
  EXPECT_DEATH(linear.ForwardMany({x, x}),
               "Linear takes one input \\(it overrides Forward, not ForwardMany\\), got 2: "
               "\\(\\[3, 4\\] float32, \\[3, 4\\] float32\\)");

  Scale2 scale;  // overrides ForwardMany only
  EXPECT_EQ(scale.Forward(x).ToVector<float>(), (x * 2.0f).ToVector<float>());
  EXPECT_EQ(scale(x).ToVector<float>(), (x * 2.0f).ToVector<float>());
  Sequential seq({std::make_shared<Scale2>(), std::make_shared<Linear>(4, 2, g)});  // a container calls Forward
  EXPECT_EQ(seq.Forward(x).shape(), (Shape{3, 2}));

  Swap swap;
  EXPECT_DEATH(swap.Forward(x), "Swap.ForwardMany takes \\(a, b\\): \"b\" is missing");
  EXPECT_EQ(swap.ForwardMany({x, x * 2.0f})[0].ToVector<float>(), (x * 2.0f).ToVector<float>());

  RecursiveRowSum rows;
  EXPECT_EQ(rows.Forward(x).ToVector<float>(), Sum(x, {0}, /*keepdim=*/true).ToVector<float>());

  Hollow hollow;
  EXPECT_DEATH(hollow.Forward(x), "Hollow overrides neither Forward nor ForwardMany");
  EXPECT_DEATH(hollow.ForwardMany({x}), "Hollow overrides neither Forward nor ForwardMany");
}

TEST(ModuleTest, ForwardOfManyOutputsAbortsNamingThem) {
  // A one-input module with two outputs: Forward cannot choose one of them.
  class Split : public Module {
   public:
    Split() : Module("Split") {}
    TensorList ForwardMany(const TensorList& inputs) override {
      const Tensor x = BindInputs(inputs, {"x"})[0];
      return {{"first", x}, {"second", Tensor()}};
    }
    std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }
  } split;
  EXPECT_DEATH(split.Forward(Zeros({2})),
               "Split.Forward: the module returns 2 outputs \\(first: \\[2\\] float32, second: undefined\\); "
               "call ForwardMany to get them all");
}

// Logs every call the observer sees, and replaces what it is given by an alias (as ddp/module_trace.h
// does, to put its own node into the graph).
class AliasingObserver : public ModuleCallObserver {
 public:
  Tensor BeforeForward(const Module& module, const Tensor& input) override {
    log.push_back("before " + module.type_name() + (input.defined() ? " defined" : " undefined"));
    return input.defined() ? input.Detach() : input;
  }
  Tensor AfterForward(const Module& module, const Tensor& output) override {
    log.push_back("after " + module.type_name());
    return output.defined() ? output.Detach() : output;
  }
  std::vector<std::string> log;
};

// Note [Module call observer] for several inputs and outputs: by default the observer sees one call per
// module call, through the first defined input and output; the other entries pass unchanged.
TEST(ModuleTest, ObserverSeesManyTensorCallsOnce) {
  const Tensor a = Zeros({2}), b = Ones({2});
  AliasingObserver observer;
  ModuleCallObserver* previous = SetModuleCallObserver(&observer);
  Swap swap;
  const TensorList out = swap(TensorList{{"a", a}, {"b", b}});
  const TensorList none = observer.BeforeForwardMany(swap, TensorList{Tensor(), Tensor()});
  SetModuleCallObserver(previous);
  EXPECT_THAT(observer.log, ElementsAre("before Swap defined", "after Swap", "before Swap undefined"));
  ASSERT_EQ(out.size(), 2u);
  // Swap returned {b, a-alias}: the first output was replaced by an alias of b, the second is the alias
  // of a that BeforeForwardMany made.
  EXPECT_FALSE(out[0].is_same(b));
  EXPECT_EQ(out[0].storage(), b.storage());
  EXPECT_FALSE(out[1].is_same(a));
  EXPECT_EQ(out[1].storage(), a.storage());
  EXPECT_FALSE(none[0].defined());
}

}  // namespace
}  // namespace ddp
