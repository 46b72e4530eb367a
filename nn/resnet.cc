#include "nn/resnet.h"

#include <cmath>
#include <typeinfo>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/layers.h"
#include "tensor/autograd.h"
#include "tensor/batch_norm.h"
#include "tensor/conv_batch_norm.h"
#include "tensor/factory.h"
#include "tensor/ops.h"

namespace ddp {
namespace nn {
namespace {

// A convolution without bias whose weight is redrawn as torchvision's ResNet draws it:
// kaiming_normal_(mode="fan_out", nonlinearity="relu"), Normal(0, sqrt(2 / (out * kernel * kernel))).
std::shared_ptr<Conv2d> ResNetConv(int64_t in, int64_t out, int64_t kernel, int64_t stride, Generator& g) {
  Conv2dOptions options;
  options.stride = stride;
  options.padding = kernel / 2;
  options.bias = false;
  auto conv = std::make_shared<Conv2d>(in, out, kernel, g, options);
  const float stddev = std::sqrt(2.0f / static_cast<float>(out * kernel * kernel));
  NoGradGuard no_grad;
  CopyInPlace(conv->weight(), Normal(conv->weight().shape(), 0.0f, stddev, g));
  return conv;
}

// relu(bn(x) + residual) (undefined residual: relu(bn(x))). With `fuse` and `bn` exactly a BatchNorm2d and
// `relu` exactly a ReLU (not subclasses, which may override Forward), one BatchNormAddRelu op (Note
// [BatchNorm, Add and ReLU in one op], tensor/ops_batchnorm.cc) that a module call observer sees as one
// call of bn; otherwise module by module, as PyTorch eager runs them (a SyncBatchNorm2d in bn's place
// takes this path).
Tensor NormalizeAddRelu(Module& bn_module, Module& relu_module, const Tensor& x, const Tensor& residual,
                        bool fuse) {
  if (fuse && typeid(bn_module) == typeid(BatchNorm2d) && typeid(relu_module) == typeid(ReLU)) {
    auto& bn = static_cast<BatchNorm2d&>(bn_module);
    return bn.CallAs(x, [&](const Tensor& in) {
      DDP_CHECK(in.dim() == 4 && in.size(1) == bn.num_features())
          << "BatchNorm2d(" << bn.num_features() << ") got input " << ShapeToString(in.shape())
          << ", expected [n, " << bn.num_features() << ", h, w]";
      if (bn.is_training()) IncrementBatchCount(bn.num_batches_tracked());
      return BatchNormAddRelu(in, residual, bn.weight(), bn.bias(), bn.running_mean(), bn.running_var(),
                              bn.is_training(), bn.momentum(), bn.eps());
    });
  }
  Tensor y = bn_module(x);
  if (residual.defined()) y = Add(y, residual);
  return relu_module(y);
}

// relu(bn(conv(x)) + residual): with `fuse`, `conv` exactly a bias-free Conv2d, `bn` exactly a BatchNorm2d
// and `relu` exactly a ReLU, one ConvBatchNormAddRelu op (a module call observer sees one call of conv)
// where that op fuses (Note [Convolution and BatchNorm in one op under bf16], tensor/conv_batch_norm.h);
// otherwise conv's call, then NormalizeAddRelu.
Tensor ConvNormalizeAddRelu(Module& conv_module, Module& bn_module, Module& relu_module, const Tensor& x,
                            const Tensor& residual, bool fuse) {
  if (fuse && typeid(conv_module) == typeid(Conv2d) && typeid(bn_module) == typeid(BatchNorm2d) &&
      typeid(relu_module) == typeid(ReLU) && ConvBatchNormFuses(x, bn_module.is_training())) {
    auto& conv = static_cast<Conv2d&>(conv_module);
    auto& bn = static_cast<BatchNorm2d&>(bn_module);
    if (!conv.bias().defined()) {
      return conv.CallAs(x, [&](const Tensor& in) {
        IncrementBatchCount(bn.num_batches_tracked());
        return ConvBatchNormAddRelu(in, conv.weight(), conv.options().stride, conv.options().padding,
                                    residual, bn.weight(), bn.bias(), bn.running_mean(), bn.running_var(),
                                    true, bn.momentum(), bn.eps());
      });
    }
  }
  return NormalizeAddRelu(bn_module, relu_module, conv_module(x), residual, fuse);
}

}  // namespace

// ---- BasicBlock ----

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, Generator& generator)
    : Module("BasicBlock") {
  DDP_CHECK(in_channels > 0 && out_channels > 0 && stride > 0)
      << "BasicBlock(" << in_channels << ", " << out_channels << ", stride " << stride << "): invalid configuration";
  RegisterModule("conv1", ResNetConv(in_channels, out_channels, 3, stride, generator));
  RegisterModule("bn1", std::make_shared<BatchNorm2d>(out_channels));
  RegisterModule("relu", std::make_shared<ReLU>());
  RegisterModule("conv2", ResNetConv(out_channels, out_channels, 3, 1, generator));
  RegisterModule("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    auto downsample = std::make_shared<Sequential>();
    downsample->Add(ResNetConv(in_channels, out_channels, 1, stride, generator));
    downsample->Add(std::make_shared<BatchNorm2d>(out_channels));
    RegisterModule("downsample", downsample);
  }
}

Tensor BasicBlock::Forward(const Tensor& x) {
  Module& relu = *Child("relu");
  const Tensor out = ConvNormalizeAddRelu(*Child("conv1"), *Child("bn1"), relu, x, Tensor(), fuse_blocks_);
  const std::shared_ptr<Module> downsample = Child("downsample");
  const Tensor identity = downsample != nullptr ? (*downsample)(x) : x;
  return ConvNormalizeAddRelu(*Child("conv2"), *Child("bn2"), relu, out, identity, fuse_blocks_);
}

// ---- ResNet ----

ResNet& ResNet::set_fuse_blocks(bool fuse) {
  fuse_blocks_ = fuse;
  for (size_t stage = 0; stage < options_.blocks_per_stage.size(); ++stage) {
    for (const auto& [name, block] : Child(absl::StrCat("layer", stage + 1))->NamedChildren()) {
      if (auto* basic = dynamic_cast<BasicBlock*>(block.get())) basic->set_fuse_blocks(fuse);
    }
  }
  return *this;
}

ResNet& ResNet::set_channels_last(bool channels_last) {
  channels_last_ = channels_last;
  return *this;
}

ResNet::ResNet(const ResNetOptions& options, Generator& generator) : Module("ResNet"), options_(options) {
  const std::vector<int64_t>& stages = options.blocks_per_stage;
  bool valid = !stages.empty() && stages.size() <= 4 && options.in_channels >= 1 && options.num_classes >= 1;
  for (int64_t blocks : stages) valid = valid && blocks >= 1;
  DDP_CHECK(valid) << "ResNet: blocks_per_stage needs 1 to 4 entries, each >= 1 (got " << stages.size()
                   << " entries), in_channels " << options.in_channels << " and num_classes "
                   << options.num_classes << " >= 1";
  RegisterModule("conv1", ResNetConv(options.in_channels, 64, 3, 1, generator));
  RegisterModule("bn1", std::make_shared<BatchNorm2d>(64));
  RegisterModule("relu", std::make_shared<ReLU>());
  int64_t channels = 64;
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    const int64_t out_channels = int64_t{64} << stage;
    auto layer = std::make_shared<Sequential>();
    for (int64_t block = 0; block < stages[stage]; ++block) {
      const int64_t stride = stage > 0 && block == 0 ? 2 : 1;
      layer->Add(std::make_shared<BasicBlock>(channels, out_channels, stride, generator));
      channels = out_channels;
    }
    RegisterModule(absl::StrCat("layer", stage + 1), layer);
  }
  RegisterModule("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  RegisterModule("fc", std::make_shared<Linear>(channels, options.num_classes, generator));
}

Tensor ResNet::Forward(const Tensor& x) {
  DDP_CHECK(x.dim() == 4 && x.size(1) == options_.in_channels)
      << "ResNet got input " << ShapeToString(x.shape()) << ", expected [n, " << options_.in_channels << ", h, w]";
  const Tensor input = channels_last_ ? ContiguousChannelsLast(x) : x;
  Tensor y =
      ConvNormalizeAddRelu(*Child("conv1"), *Child("bn1"), *Child("relu"), input, Tensor(), fuse_blocks_);
  for (size_t stage = 0; stage < options_.blocks_per_stage.size(); ++stage) {
    y = (*Child(absl::StrCat("layer", stage + 1)))(y);
  }
  y = ddp::Flatten((*Child("avgpool"))(y), 1);
  return (*Child("fc"))(y);
}

}  // namespace nn
}  // namespace ddp
