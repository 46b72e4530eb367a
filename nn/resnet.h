// ResNets with torchvision's layout and parameter names (torchvision.models.resnet), for small images as
// CIFAR ResNets adapt them: the stem is a 3x3, stride 1 convolution without the max pool, so a 28x28
// image reaches the last stage at 4x4 instead of 1x1.
//
// ResNet18 here is torchvision's resnet18(num_classes=10) after two replacements:
//   model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
//   model.maxpool = nn.Identity()
// Its state dict has the same 122 keys in the same order (62 parameters, 11,172,810 values; every
// BatchNorm's running_mean, running_var and num_batches_tracked), so a safetensors file saved by either
// loads in the other with strict names (nn/resnet_interchange_test.sh checks both directions).
//
// Thread safety: as Module.
#ifndef DDP_NN_RESNET_H_
#define DDP_NN_RESNET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "tensor/random.h"

namespace ddp {
namespace nn {

// torchvision's BasicBlock: two 3x3 convolutions without bias, each followed by a BatchNorm2d, and a
// residual connection:
//   out = relu(bn1(conv1(x)));  out = relu(bn2(conv2(out)) + identity)
// where identity is x, or downsample(x) when the block changes the stride or the channel count:
// "downsample" is Sequential(Conv2d 1x1 with `stride`, no bias; BatchNorm2d), named "downsample.0" /
// "downsample.1" as torchvision's. conv1 carries the stride.
class BasicBlock : public Module {
 public:
  // REQUIRES: positive channels and stride.
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, Generator& generator);
  // x [n, in_channels, h, w] -> [n, out_channels, ceil(h / stride), ceil(w / stride)].
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  // Whether the block has the "downsample" path (stride != 1 or a channel change).
  bool has_downsample() const { return Child("downsample") != nullptr; }

  // Whether Forward runs each BatchNorm2d with the ReLU (and the residual add) after it as one op (Note
  // [BatchNorm, Add and ReLU in one op], tensor/ops_batchnorm.cc: the same numbers, two passes over
  // memory fewer; a module call observer sees bn1 + relu as one call of bn1, and bn2 + add + relu as one
  // call of bn2); on by default, kept by Replicate; false: module by module, as PyTorch eager.
  void set_fuse_blocks(bool fuse) { fuse_blocks_ = fuse; }
  bool fuse_blocks() const { return fuse_blocks_; }

 private:
  bool fuse_blocks_ = true;
};

// What varies between the ResNets with BasicBlocks.
struct ResNetOptions {
  std::vector<int64_t> blocks_per_stage = {2, 2, 2, 2};  // ResNet-18; {3, 4, 6, 3} is ResNet-34
  int64_t in_channels = 1;                              // channels of the input images
  int64_t num_classes = 10;                             // outputs of "fc"
};

// conv1 (3x3, stride 1, padding 1, no bias) -> bn1 -> relu -> layer1 .. layer4 -> global average pooling
// -> fc. Stage k ("layer<k+1>", a Sequential of BasicBlocks "0", "1", ...) has 64 * 2^k channels; its
// first block has stride 2 (k > 0) and a downsample. Input [n, in_channels, h, w] -> logits
// [n, num_classes], for any h, w >= 1.
//
// Initialisation as torchvision's ResNet: every convolution weight ~ Normal(0, sqrt(2 / fan_out)) with
// fan_out = out_channels * kernel * kernel (kaiming_normal_, mode="fan_out", nonlinearity="relu"),
// BatchNorm weights 1 and biases 0, fc as nn.Linear's default. Values drawn from `generator`, so they
// differ from PyTorch's but their distribution does not.
class ResNet : public Module {
 public:
  // REQUIRES: blocks_per_stage has 1 to 4 entries, each >= 1; in_channels, num_classes >= 1.
  ResNet(const ResNetOptions& options, Generator& generator);
  Tensor Forward(const Tensor& x) override;
  std::shared_ptr<Module> Replicate() const override { return ReplicateAs(*this); }

  const ResNetOptions& options() const { return options_; }

  // BasicBlock::set_fuse_blocks for the stem's bn1 + relu and every block. Returns *this.
  ResNet& set_fuse_blocks(bool fuse);
  bool fuse_blocks() const { return fuse_blocks_; }

  // With `channels_last`, Forward lays its input out channels-last (ContiguousChannelsLast), so on the
  // CPU every convolution and BatchNorm runs on NHWC activations without layout conversions (Note
  // [Channels-last activations], tensor/memory_format.h), as PyTorch's model.to(memory_format=
  // torch.channels_last) with a channels-last input. The parameters, the output and state dicts are the
  // same either way. Returns *this.
  ResNet& set_channels_last(bool channels_last);
  bool channels_last() const { return channels_last_; }

 private:
  ResNetOptions options_;
  bool fuse_blocks_ = true;
  bool channels_last_ = false;
};

}  // namespace nn
}  // namespace ddp

#endif  // DDP_NN_RESNET_H_
