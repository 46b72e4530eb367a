// Channels-last activations: 4-d tensors whose shape is [n, c, h, w] but whose elements lie as NHWC
// (PyTorch's torch.channels_last memory format).
//
// Note [Channels-last activations]
// oneDNN's convolutions run on NHWC (AMX bf16) or channel-blocked layouts, so an NCHW activation is
// transposed on its way into every convolution's primitives and the result transposed back (Note [NHWC
// reorders], tensor/conv_onednn.cc). A model that keeps its activations channels-last from the first
// convolution to the last BatchNorm does no such transposes: Conv2d on the CPU takes a channels-last
// input as it lies and returns a channels-last output (tensor/conv_channels_last.h); BatchNorm and
// BatchNormAddRelu normalise it as its [n*h*w, c] rows, channels in vector lanes (Note [BatchNorm over
// channels in lanes]), and return it channels-last; gradients sum into each other in their layout
// (tensor/autograd.cc). The shape stays [n, c, h, w], so every other op takes such a tensor as it takes
// any strided one (through Contiguous, at the price of a copy), and shapes, state dicts and checkpoints
// are unchanged. ContiguousChannelsLast (tensor/ops.h) converts a tensor, as PyTorch's
// x.contiguous(memory_format=torch.channels_last); nn::ResNet::set_channels_last converts its input.
#ifndef DDP_TENSOR_MEMORY_FORMAT_H_
#define DDP_TENSOR_MEMORY_FORMAT_H_

#include <vector>

#include "tensor/tensor.h"

namespace ddp {

// The strides of a channels-last tensor of 4-d `shape`: {h*w*c, 1, w*c, c}.
std::vector<int64_t> ChannelsLastStrides(const Shape& shape);

// True when x is 4-d and its strides are ChannelsLastStrides(x.shape()) (the stride of a dimension of size
// 1 does not matter, as for is_contiguous(): a [n, 1, h, w] or [n, c, 1, 1] tensor is both).
bool IsChannelsLast(const Tensor& x);

// True when x's strides are exactly ChannelsLastStrides(x.shape()), every dimension's: laid out
// channels-last on purpose (by ContiguousChannelsLast or a channels-last op), which the ops of Note
// [Channels-last activations] keep. A contiguous [n, 1, h, w] tensor IsChannelsLast but is not this.
bool HasChannelsLastStrides(const Tensor& x);

// An uninitialised channels-last tensor of 4-d `shape`.
Tensor EmptyChannelsLast(const Shape& shape, DType dtype, Device device = Device::CPU());

// x's values in a channels-last tensor: x itself when IsChannelsLast(x), else a copy (any 4-d CPU tensor,
// any dtype). No autograd: ContiguousChannelsLast is the op.
Tensor ChannelsLastCopy(const Tensor& x);

// A new channels-last tensor with x's values (a copy even when x is channels-last already). No autograd.
Tensor CloneChannelsLast(const Tensor& x);

// The contiguous [n*h*w, c] rows of a channels-last x, sharing its storage. Differentiable: the rows'
// gradient reaches x as a channels-last tensor. REQUIRES: IsChannelsLast(x).
Tensor RowsOf(const Tensor& x);

// The channels-last [n, c, h, w] tensor `shape` over contiguous rows [n*h*w, c], sharing their storage,
// with the rows' bf16 copy (Note [Autocast copies from the producer]) attached as a channels-last copy.
// Differentiable: the gradient, in any layout, reaches the rows as rows.
Tensor ChannelsLastFromRows(const Tensor& rows, const Shape& shape);

}  // namespace ddp

#endif  // DDP_TENSOR_MEMORY_FORMAT_H_
