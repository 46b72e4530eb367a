// Differentiable tensor ops (record the autograd graph when an input requires grad and grad mode is on)
// and the in-place ops optimizers use (never recorded). Ops work on float32 tensors unless they say
// otherwise, on any device whose kernels are linked in (CPU always; CUDA with --config=cuda); inputs of
// one op must share a device. Shape errors abort through DDP_CHECK (base/check.h) with both shapes.
// Thread safety: ops on distinct tensors may run concurrently on different threads.
#ifndef DDP_TENSOR_OPS_H_
#define DDP_TENSOR_OPS_H_

#include <cstdint>
#include <vector>

#include "tensor/random.h"
#include "tensor/tensor.h"

namespace ddp {

// ---- factories for shapes like another tensor (more in tensor/factory.h) ----
Tensor ZerosLike(const Tensor& x);
Tensor OnesLike(const Tensor& x);

// ---- element-wise, with NumPy broadcasting (tensor/ops_elementwise.cc) ----
Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor Div(const Tensor& a, const Tensor& b);
Tensor AddScalar(const Tensor& a, float s);
Tensor MulScalar(const Tensor& a, float s);
Tensor Neg(const Tensor& a);
Tensor Relu(const Tensor& a);
Tensor Exp(const Tensor& a);
Tensor Log(const Tensor& a);
Tensor Sqrt(const Tensor& a);
inline Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return Div(a, b); }
inline Tensor operator*(const Tensor& a, float s) { return MulScalar(a, s); }
inline Tensor operator+(const Tensor& a, float s) { return AddScalar(a, s); }
inline Tensor operator-(const Tensor& a) { return Neg(a); }
// The shape both broadcast to; aborts naming both shapes when they are incompatible.
Shape BroadcastShapes(const Shape& a, const Shape& b);
// Sums `grad` down to `shape` (the inverse of broadcasting `shape` up to grad's shape).
Tensor SumToShape(const Tensor& grad, const Shape& shape);

// ---- reductions (tensor/ops_reduce.cc) ----
Tensor Sum(const Tensor& x);  // all elements -> scalar (shape {})
Tensor Sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor Mean(const Tensor& x);
Tensor Mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Index of the largest value along `dim` (int64, dim removed; ties: first). Not differentiable.
Tensor Argmax(const Tensor& x, int64_t dim);

// ---- shape (tensor/ops_shape.cc). Views share storage where the layout allows. ----
// A view with a new shape (one entry may be -1); copies only when x is not contiguous.
Tensor Reshape(const Tensor& x, const Shape& shape);
// Merges dims [start_dim, end_dim] into one.
Tensor Flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
// A strided view with dims d0 and d1 swapped.
Tensor Transpose(const Tensor& x, int64_t d0, int64_t d1);
// A view of `length` entries of `dim` starting at `start`.
Tensor Narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// x itself when contiguous, else a contiguous copy (differentiable).
Tensor Contiguous(const Tensor& x);
// x with its elements laid out channels-last (Note [Channels-last activations], tensor/memory_format.h):
// x itself when it already is, else a copy; the gradient passes through in whatever layout it comes.
// PyTorch's x.contiguous(memory_format=torch.channels_last). REQUIRES: a 4-d CPU tensor.
Tensor ContiguousChannelsLast(const Tensor& x);
// A contiguous copy with the same values (differentiable).
Tensor Clone(const Tensor& x);
// Concatenates along `dim` (differentiable).
Tensor Cat(const std::vector<Tensor>& xs, int64_t dim);
// Copies to `device` (x itself when already there). Differentiable.
Tensor ToDevice(const Tensor& x, Device device);
// A contiguous CPU tensor with x's values, of any dtype (x itself, detached, when it already is one),
// for code that reads the bytes on the host (serialisation, checksums). Records no graph.
Tensor HostContiguous(const Tensor& x);
// Converts element type (float32 <-> float16/bfloat16/int64). Not differentiable.
Tensor ToDType(const Tensor& x, DType dtype);

// ---- linear algebra (tensor/ops_matmul.cc; GEMM in tensor/cpu_gemm.h) ----
// [m, k] x [k, n] -> [m, n]. Transposed views are passed to GEMM without a copy.
Tensor Matmul(const Tensor& a, const Tensor& b);
// y = x w^T + b with x [n, in], w [out, in], b [out] (optional: undefined), as torch's F.linear.
Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b);

// ---- convolution and pooling (tensor/ops_conv.cc, tensor/ops_pool.cc, tensor/ops_conv_pool.cc) ----
// x [n, c, h, w], w [out, c, kh, kw], b [out] or undefined; torch's F.conv2d with square stride and
// zero padding.
Tensor Conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride = 1, int64_t padding = 0);
// Max over kernel x kernel windows; stride defaults to kernel (as F.max_pool2d); no padding.
Tensor MaxPool2d(const Tensor& x, int64_t kernel, int64_t stride = 0);
// MaxPool2d(Relu(x), kernel, stride) in one pass over x (Note [ReLU then MaxPool2d in one pass],
// tensor/ops_pool.cc): the same values and gradients, bit for bit; as the two ops on CUDA.
Tensor MaxPool2dOfRelu(const Tensor& x, int64_t kernel, int64_t stride = 0);
// MaxPool2d(Relu(Conv2d(x, w, b, stride, padding)), pool_kernel, pool_stride) without the convolution's
// full-size output (Note [Conv2d, ReLU and MaxPool2d in one op], tensor/ops_conv_pool.cc): the same values
// and gradients, bit for bit; as the three ops on CUDA.
Tensor Conv2dReluMaxPool2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                           int64_t pool_kernel, int64_t pool_stride = 0);

// ---- normalisation and regularisation (tensor/ops_batchnorm.cc, tensor/ops_dropout.cc; BatchNorm's
// pieces, for a batch norm synchronised over processes, in tensor/batch_norm.h) ----
// torch's F.batch_norm over x [n, c, h, w] (or [n, c]). Training: normalises with batch statistics and
// updates running_mean/var in place (unbiased variance, `momentum`), as PyTorch. Eval: uses the running
// statistics. weight/bias [c] may be undefined.
Tensor BatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                 const Tensor& running_var, bool training, float momentum = 0.1f, float eps = 1e-5f);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training (mask from
// `generator`); identity otherwise.
Tensor Dropout(const Tensor& x, float p, bool training, Generator& generator);

// ---- losses (tensor/ops_loss.cc) ----
// log(softmax(x)) along `dim`, numerically stable.
Tensor LogSoftmax(const Tensor& x, int64_t dim = -1);
// Mean of -log_probs[i, target[i]] with log_probs [n, classes], target int64 [n]. Aborts naming the
// bad label when a target is out of range.
Tensor NllLoss(const Tensor& log_probs, const Tensor& target);
// NllLoss(LogSoftmax(logits, 1), target), fused.
Tensor CrossEntropy(const Tensor& logits, const Tensor& target);

// ---- in place, never recorded by autograd (tensor/ops_inplace.cc); each bumps dst's storage version ----
// dst += alpha * src (src broadcast to dst's shape). Returns dst.
const Tensor& AddInPlace(const Tensor& dst, const Tensor& src, float alpha = 1.0f);
// dst *= s.
const Tensor& MulScalarInPlace(const Tensor& dst, float s);
// dst = scale * src in one pass (src broadcast to dst's shape). Returns dst.
const Tensor& CopyScaledInPlace(const Tensor& dst, const Tensor& src, float scale);
// dst = value everywhere.
const Tensor& FillInPlace(const Tensor& dst, float value);
// dst = src (same number of elements, converting dtype and device as needed; layout of dst kept).
const Tensor& CopyInPlace(const Tensor& dst, const Tensor& src);

}  // namespace ddp

#endif  // DDP_TENSOR_OPS_H_
