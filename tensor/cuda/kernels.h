// Raw-pointer launchers for the CUDA kernels (compiled by nvcc in tensor/cuda/*.cu; the host side in
// tensor/cuda/*.cc calls them with tensors' device pointers). Every launcher enqueues on `stream`
// and returns the launch's cudaError_t without synchronising; callers wrap it in DDP_CUDA_CHECK
// (tensor/cuda/cuda_check.h). Element-wise math comes from tensor/functors.h, shared with the CPU.
// Only built with --config=cuda.
#ifndef DDP_TENSOR_CUDA_KERNELS_H_
#define DDP_TENSOR_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tensor/functors.h"

namespace ddp {
namespace cuda {
namespace kernels {

constexpr int kMaxDims = 8;

// A row-major loop over `shape` with up to three operands: element i of the loop reads/writes
// operand k at offset sum_d index_d(i) * strides[k][d] (elements). Strides of 0 broadcast. When
// `contiguous` is set, every operand's offset is i itself (or 0 where strides[k][0] == 0) and only
// shape[0] (= the element count) is used.
struct Indexer {
  int ndim = 0;
  bool contiguous = false;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};
};

// out = f(a, b) element-wise (operands 0, 1, 2 of the indexer); in-place ops pass out == a. F is one of the
// binary functors of tensor/functors.h, the same object the CPU loops run: Add, Sub, Mul, Div, Axpy,
// ScaledCopy, ReluBackward or Assign (instantiated in elementwise.cu; another F does not link).
template <typename F>
cudaError_t Binary(const F& f, float* out, const float* a, const float* b, const Indexer& ix,
                   cudaStream_t stream);
// out = f(a) element-wise (operands 0, 1); in-place ops pass out == a. F is one of the unary functors of
// tensor/functors.h: AddScalar, MulScalar, Neg, Relu, Exp, Log, Sqrt or Fill.
template <typename F>
cudaError_t Unary(const F& f, float* out, const float* a, const Indexer& ix, cudaStream_t stream);

// out(i) = in(i) for elements of `element_size` bytes (2, 4 or 8), offsets from operands 0 (out) and 1.
cudaError_t StridedCopy(void* out, const void* in, int element_size, const Indexer& ix, cudaStream_t stream);

// Element type codes for Convert (the values of ddp::DType).
enum class ElementType : int { kFloat32 = 0, kInt64 = 1, kFloat16 = 2, kBFloat16 = 3 };
// Converts n contiguous elements (round to nearest even for the 16-bit types, as the CPU path).
cudaError_t Convert(void* out, ElementType to, const void* in, ElementType from, int64_t n, cudaStream_t stream);
cudaError_t FillInt64(int64_t* out, int64_t value, int64_t n, cudaStream_t stream);

// *out = sum of n contiguous floats (accumulated in double, one block: deterministic).
cudaError_t SumAll(const float* x, int64_t n, float* out, cudaStream_t stream);
// out[o] = sum over the reduced index space of x, for o in [0, kept.numel): `kept` has the output's
// shape with x's strides as operand 0; `reduced` has the reduced dims with x's strides as operand 0.
cudaError_t SumReduce(const float* x, float* out, const Indexer& kept, const Indexer& reduced,
                      cudaStream_t stream);
// out[a, b] = argmax_k x[a, k, b] for contiguous x [outer, n, inner] (ties: first).
cudaError_t Argmax(const float* x, int64_t* out, int64_t outer, int64_t n, int64_t inner, cudaStream_t stream);

// Row-wise log-softmax of contiguous [rows, cols], and its backward dx = g - exp(y) * sum(g)
// (functors::LogSoftmaxBackward).
cudaError_t LogSoftmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
cudaError_t LogSoftmaxBackward(const float* g, const float* y, float* dx, int64_t rows, int64_t cols,
                               cudaStream_t stream);
// *out = mean_i -lp[i, target[i]]; NaN when rows == 0 or a target is out of [0, classes) (no host check).
cudaError_t NllLoss(const float* lp, const int64_t* target, int64_t rows, int64_t classes, float* out,
                    cudaStream_t stream);
// dx = 0 except dx[i, target[i]] = -(*g) / rows.
cudaError_t NllLossBackward(const float* g, const int64_t* target, float* dx, int64_t rows, int64_t classes,
                            cudaStream_t stream);
// dx = (exp(lp) - onehot(target)) * (*g) / rows (functors::CrossEntropyBackward).
cudaError_t CrossEntropyBackward(const float* lp, const int64_t* target, const float* g, float* dx,
                                 int64_t rows, int64_t classes, cudaStream_t stream);

// Convolution geometry (as tensor/ops_conv.cc): input [n, c, h, w], weight [out, c, kh, kw].
struct ConvShape {
  int64_t n, c, h, w, out, kh, kw, stride, padding, oh, ow;
};
// Unfolds images [first, first + count) of x into col [c*kh*kw, count*oh*ow] (image i in columns
// [i*P, (i+1)*P)), zero outside the image.
cudaError_t Im2Col(const float* x, const ConvShape& g, int64_t first, int64_t count, float* col,
                   cudaStream_t stream);
// The adjoint: gx[first + i] += fold(col) for the same layout (gathers, no atomics).
cudaError_t Col2Im(const float* col, const ConvShape& g, int64_t first, int64_t count, float* gx,
                   cudaStream_t stream);
// dst[b, a, c] = src[a, b, c] (+ bias[a] when bias is non-null), src [A, B, C] contiguous.
cudaError_t SwapOuterDims(const float* src, float* dst, int64_t A, int64_t B, int64_t C, const float* bias,
                          cudaStream_t stream);

// Autocast's 16-bit operands (tensor/autocast.h; `to` / `from` is kBFloat16 or kFloat16, else
// cudaErrorInvalidValue). out[i] = in[i] rounded with the functors of tensor/low_precision_round.h, the
// CPU's rounding bit for bit (to nearest even; NaN, inf, subnormals and fp16 overflow as there).
cudaError_t RoundToLowPrecision(const float* in, uint16_t* out, ElementType to, int64_t n, cudaStream_t stream);
// out[i] = in[i] widened to float32 (exact).
cudaError_t WidenLowPrecision(const uint16_t* in, ElementType from, float* out, int64_t n, cudaStream_t stream);
// The Reducer's bfloat16 bucket slots (Note [Reduce dtype rounding], reducer/bucket_cast.h, step 1):
// out[i] = bf16(in[i] * scale), the product in float32 and rounded once, with the functor the CPU tests
// run (functors::RoundScaledToBFloat16, tensor/low_precision_round.h), so the bits equal the CPU's for
// every input and a finite scale (NaN, inf, subnormals included: nothing is flushed).
cudaError_t RoundScaledToBFloat16(const float* in, float scale, uint16_t* out, int64_t n, cudaStream_t stream);
// Im2Col on 16-bit elements (bf16 or fp16 bits; +0 outside the image).
cudaError_t Im2Col16(const uint16_t* x, const ConvShape& g, int64_t first, int64_t count, uint16_t* col,
                     cudaStream_t stream);

// Max pooling over `planes` planes of [h, w]; index holds the argmax's offset inside its plane (first
// maximum wins, NaN propagates, as the CPU path). Backward zero-fills gx and scatter-adds.
cudaError_t MaxPoolForward(const float* x, float* y, int32_t* index, int64_t planes, int64_t h, int64_t w,
                           int64_t kernel, int64_t stride, int64_t oh, int64_t ow, cudaStream_t stream);
cudaError_t MaxPoolBackward(const float* gy, const int32_t* index, float* gx, int64_t planes, int64_t in_plane,
                            int64_t out_plane, cudaStream_t stream);

// BatchNorm's pieces (tensor/batch_norm_kernels.h) over contiguous x [n, c, inner]; per-channel vectors
// are contiguous [c] unless a stride is given (in elements).
// out[ch] = Σ x (mean null) or Σ (x - mean[ch])^2 over the channel's n * inner values (double
// accumulation, one block per channel).
cudaError_t BatchNormChannelSums(const float* x, int64_t n, int64_t c, int64_t inner, const float* mean, float* out,
                                 cudaStream_t stream);
// invstd[ch] = 1 / sqrt(var[ch * var_stride] + eps).
cudaError_t BatchNormInvStd(const float* var, int64_t var_stride, int64_t c, float eps, float* invstd,
                            cudaStream_t stream);
// running = (1 - momentum) * running + momentum * batch (unbiased variance); pointers may be null.
cudaError_t BatchNormUpdateRunning(float* running_mean, int64_t mean_stride, float* running_var,
                                   int64_t var_stride, const float* mean, const float* var, int64_t c,
                                   int64_t count, float momentum, cudaStream_t stream);
// y = (x - mean) * invstd * weight + bias (weight / bias nullable).
cudaError_t BatchNormApply(const float* x, int64_t n, int64_t c, int64_t inner, const float* mean,
                           const float* invstd, const float* weight, int64_t weight_stride, const float* bias,
                           int64_t bias_stride, float* y, cudaStream_t stream);
// Per channel: sum_g = sum(gy), sum_gx = sum(gy * (x - mean)).
cudaError_t BatchNormBackwardSums(const float* gy, const float* x, const float* mean, int64_t n, int64_t c,
                                  int64_t inner, float* sum_g, float* sum_gx, cudaStream_t stream);
// gx = k * gy + a * (x - mean) + b per channel (Note [BatchNorm pieces], tensor/ops_batchnorm.cc), with
// the sums over `count` values per channel (training; a = b = 0 otherwise).
cudaError_t BatchNormInputGrad(const float* gy, const float* x, const float* mean, const float* invstd,
                               const float* weight, int64_t weight_stride, const float* sum_g, const float* sum_gx,
                               int64_t n, int64_t c, int64_t inner, int64_t count, bool training, float* gx,
                               cudaStream_t stream);

// mask[i] = scale when a counter-based hash of (seed, i) gives a uniform >= p, else 0.
cudaError_t DropoutMask(float* mask, int64_t n, float p, float scale, uint64_t seed, cudaStream_t stream);

// Optimizer steps on n contiguous elements (the functors of tensor/functors.h). buf may be null
// when step.momentum == 0.
cudaError_t SgdStep(const functors::SgdStep& step, float* param, float* buf, const float* grad, int64_t n,
                    cudaStream_t stream);
cudaError_t AdamStep(const functors::AdamStep& step, float* param, float* m, float* v, const float* grad,
                     int64_t n, cudaStream_t stream);

}  // namespace kernels
}  // namespace cuda
}  // namespace ddp

#endif  // DDP_TENSOR_CUDA_KERNELS_H_
