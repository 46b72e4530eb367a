#include "nn/resnet.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/layers.h"
#include "tensor/autograd.h"
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
  Tensor out = relu((*Child("bn1"))((*Child("conv1"))(x)));
  out = (*Child("bn2"))((*Child("conv2"))(out));
  const std::shared_ptr<Module> downsample = Child("downsample");
  const Tensor identity = downsample != nullptr ? (*downsample)(x) : x;
  return relu(Add(out, identity));
}

// ---- ResNet ----

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
  Tensor y = (*Child("relu"))((*Child("bn1"))((*Child("conv1"))(x)));
  for (size_t stage = 0; stage < options_.blocks_per_stage.size(); ++stage) {
    y = (*Child(absl::StrCat("layer", stage + 1)))(y);
  }
  y = ddp::Flatten((*Child("avgpool"))(y), 1);
  return (*Child("fc"))(y);
}

}  // namespace nn
}  // namespace ddp
