// Autocast: bfloat16 (and float16: Note [fp16 autocast]) mixed precision in the style of
// torch.autocast(device_type="cpu", dtype=torch.bfloat16 or torch.float16).
//
// Note [Autocast]
// Inside an AutocastScope on a thread, the matrix-multiply ops on CPU tensors (Linear, Matmul, Conv2d and
// Conv2dReluMaxPool2d: PyTorch's lower-precision list for the ops this engine has) round their float32
// operands to bf16 and multiply them with float32 accumulation (tensor/cpu_gemm_bf16.h). Everything else
// runs in float32 as PyTorch's autocast has it (softmax/log-softmax, losses, reductions, BatchNorm and its
// statistics), and the optimizer and the parameters (master weights) never leave float32. Backward runs the
// same GEMMs in bf16: the output gradient is rounded to bf16 and multiplied by the bf16 weight or input the
// forward saved; the gradients that reach the parameters are float32 (the GEMM's float32 result), as
// PyTorch's cast-back gives them.
//
// One difference from PyTorch, on purpose: PyTorch's autocast ops return bf16 tensors, so their outputs are
// rounded to bf16 and the ops after them (ReLU, pooling, the residual add) run on bf16 values. Here an
// autocast op returns its float32 accumulator unrounded, and the next GEMM rounds its operand when it takes
// it: the same rounding of every GEMM operand, one rounding fewer per layer, no bf16 ops outside GEMMs.
// Results agree with PyTorch's autocast within bf16 tolerance (nn/autocast_fixture_test.cc).
//
// Casts are cached as in PyTorch: within the outermost scope, the bf16 copy of a leaf tensor that
// requires grad (a parameter) is made once and reused by every op that takes it, forward and backward
// (a weight shared by several layers, or a training step's forward, casts it once). The cache is
// dropped when the outermost scope ends; a parameter changed in place inside a scope (an optimizer step)
// keeps its stale copy until then, so end the scope before the optimizer step, as with PyTorch.
//
// The state is per thread (as PyTorch's): ops run on another thread (DataParallel's replicas) do not see
// a scope opened here. CUDA tensors follow Note [Autocast on CUDA].
//
// Note [fp16 autocast]
// A scope opened with DType::kFloat16 is torch.autocast("cpu", dtype=torch.float16) for the same ops:
// their operands are rounded to float16 (to nearest, ties to even; values beyond 65504 become inf) and
// multiplied with float32 accumulation, and in backward the output gradient is rounded to float16 before
// the backward GEMMs (as the float16 output of PyTorch's op makes it). The rounded operands are held in
// float32, where every float16 value and every product of two is exact, so the float32 GEMM computes
// exactly "float16 operands, float32 accumulation"; no float16 kernel is needed, and it runs at float32
// speed plus a rounding pass per operand. As under bf16, outputs stay the float32 accumulator, parameter
// copies are cached per outermost scope, and everything else is float32. Gradients that small in float16
// flush to zero: pair fp16 with loss scaling (nn/grad_scaler.h).
//
// Note [Autocast on CUDA]
// On CUDA tensors the same four ops, in either dtype, round their operands to real bf16 or fp16 tensors
// (the CPU's rounding bit for bit: the functors of tensor/low_precision_round.h run in the kernels) and
// multiply them with cuBLAS's cublasGemmEx (CUDA_R_16BF / CUDA_R_16F operands, float32 output,
// CUBLAS_COMPUTE_32F: tensor cores, float32 accumulation); Conv2d builds its im2col buffer in the 16-bit
// type. Everything else is as on the CPU for the scope's dtype: float32 outputs, the output gradient
// rounded before the backward GEMMs, parameters cast once per outermost scope (the cache holds the 16-bit
// copy), the bias gradient summed from the float32 output gradient under bf16 and from the rounded one
// under fp16 (as the CPU's fp16 path, whose output node rounds the gradient before the op sees it).
// So a CUDA op and its CPU counterpart multiply the same rounded values and differ only in float32
// summation order (tensor/cuda/autocast_cuda_test.cc); Conv2dReluMaxPool2d runs on CUDA as Conv2d, ReLU
// and MaxPool2d, the Conv2d under autocast.
#ifndef DDP_TENSOR_AUTOCAST_H_
#define DDP_TENSOR_AUTOCAST_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace ddp {

// RAII: enables (or, with enabled = false, disables) autocast on this thread until destroyed, in bf16
// (Note [Autocast]) or fp16 (Note [fp16 autocast]). Scopes nest; the innermost decides. Not copyable.
// Thread safety: affects only the constructing thread, and must be destroyed on it.
// REQUIRES: dtype is kBFloat16 or kFloat16 (checked).
class AutocastScope {
 public:
  explicit AutocastScope(bool enabled = true, DType dtype = DType::kBFloat16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool previous_;
  DType previous_dtype_;
};

// True inside an enabled AutocastScope on this thread.
bool AutocastEnabled();

// This thread's autocast state as a value, for carrying into another thread: work handed to a worker
// (DataParallel's replicas, dp/data_parallel_workers.h) opens AutocastScope(enabled, dtype) there when
// `enabled`, as PyTorch's parallel_apply enters torch.autocast with the caller's state in each replica's
// thread. A scope opened that way is the worker's outermost, so its cast cache lives for that one task.
struct AutocastSettings {
  bool enabled = false;            // inside an enabled scope
  DType dtype = DType::kBFloat16;  // the innermost enabled scope's dtype (meaningful when enabled)
};
AutocastSettings CurrentAutocastSettings();

// True when an autocast op given these inputs runs in bf16: bf16 autocast is enabled and the first input
// is a CPU tensor.
bool AutocastAppliesTo(const Tensor& first_input);

// True when an autocast op given these inputs takes the fp16 path (AutocastFp16Call): fp16 autocast is
// enabled and the first input is a CPU tensor.
bool AutocastFp16AppliesTo(const Tensor& first_input);

// The fp16 path of an autocast op (Note [fp16 autocast]): rounds each of `operands` to float16 values
// held in float32 (leaves that require grad once per outermost scope; gradients pass through the
// rounding unchanged), runs `op` on them with autocast disabled, and returns its output, whose gradient
// is rounded to float16 in backward. `op` must be the op's float32 path. REQUIRES: AutocastEnabled()
// in fp16.
Tensor AutocastFp16Call(const std::vector<Tensor>& operands,
                        const std::function<Tensor(const std::vector<Tensor>& rounded)>& op);

// x rounded to float16 and widened back (a new float32 CPU tensor, no autograd history).
Tensor RoundToFloat16(const Tensor& x);

// True when an autocast op given these inputs takes the CUDA path (Note [Autocast on CUDA]): autocast is
// enabled, in either dtype, and the first input is a CUDA tensor.
bool AutocastCudaAppliesTo(const Tensor& first_input);

// The dtype of this thread's innermost enabled scope (kBFloat16 or kFloat16). REQUIRES: AutocastEnabled().
DType AutocastDType();

// The contiguous copy of float32 tensor `x` in the scope's dtype (no autograd history): bf16 for a CPU
// tensor (the CPU's fp16 path rounds through AutocastFp16Call instead), bf16 or fp16 for a CUDA tensor. A
// leaf that requires grad is cast once per outermost scope (Note [Autocast]); any other tensor with a
// valid contiguous copy attached by its producer gets that copy (Note [Autocast copies from the
// producer]). REQUIRES: AutocastEnabled(); on the CPU, a bf16 scope.
Tensor AutocastCast(const Tensor& x);

// AutocastCast for an op that takes channels-last operands (Note [Channels-last activations],
// tensor/memory_format.h): a valid channels-last copy attached by x's producer, else x rounded where it
// lies when it is channels-last (never cached), else AutocastCast(x) laid out channels-last. REQUIRES: a
// bf16 scope; x a 4-d CPU tensor.
Tensor AutocastCastChannelsLast(const Tensor& x);

// Note [Autocast copies from the producer]
// Under bf16 autocast on the CPU, an op whose float32 output usually feeds a GEMM can write the output's
// bf16 copy in the pass that computes the output and attach it there; AutocastCast then returns that
// copy instead of reading the output again to round it. BatchNormAddRelu does so (in ResNet every
// BatchNorm + ReLU output is the input of a convolution, and a block's output feeds both the next
// block's conv1 and its downsample convolution, which then share one copy). The copy holds the bits
// ToBFloat16Contiguous gives, so results are unchanged; what goes is a pass over the output (or two).
// The copy is valid while the output's storage version (tensor/storage.h) is the one it was made at: an
// in-place op on the output or on a view of it (tensor/ops.h) makes AutocastCast round afresh; a write
// through a data pointer goes unseen, as with PyTorch's version counter. The copy lives as long as the
// output; a view of the output has none.

// Note [bf16 copies of BatchNorm's input gradient]
// The same for gradients. A channels-last bf16 convolution's backward multiplies its output gradient
// rounded to bf16, and in ResNet that gradient is BatchNorm's input gradient (a convolution's output feeds
// only its BatchNorm). So BatchNorm and BatchNormAddRelu over channels-last activations in a bf16 autocast
// scope write their input gradient's bf16 copy in the pass that computes it (Note [BatchNorm over
// channels in lanes]) and attach it (AttachAutocastCopy); the convolution's backward takes it
// (AttachedAutocastCopy) instead of a rounding pass over the float32 gradient. Same bits; where the
// gradient reaching the convolution is another tensor (a sum of several, or modified in place), it has no
// valid copy and is rounded as before.

// True when an op producing `output` should attach its bf16 copy (Note [Autocast copies from the
// producer]): bf16 autocast is enabled on this thread and output is a float32 CPU tensor.
bool AutocastWantsCopyOf(const Tensor& output);

// Attaches `copy` (a bf16 CPU tensor of output's shape and layout, contiguous or channels-last, holding
// output's values rounded as ToBFloat16Contiguous rounds them) to `output` at its storage's current
// version. Dies naming the shapes or dtype when copy does not fit output.
void AttachAutocastCopy(const Tensor& output, const Tensor& copy);

// The bf16 copy attached to `x` by its producer (AttachAutocastCopy) while x's storage is still at the version
// it was made at; else undefined.
Tensor AttachedAutocastCopy(const Tensor& x);

// The bf16 copy of output gradient `gy` that BatchNorm attached (Note [bf16 copies of BatchNorm's input
// gradient]) when gy is channels-last and the copy still valid, counted in `gradient_copies`; else undefined.
Tensor AttachedGradientCopy(const Tensor& gy);

// The contiguous copy of float32 tensor `x` (any layout, either device) in `dtype` (kBFloat16 or
// kFloat16), rounded by the functors of tensor/low_precision_round.h; never cached; not differentiable.
Tensor ToLowPrecisionContiguous(const Tensor& x, DType dtype);

// Counters of this thread's cast cache since the thread started: a hit reuses a cached copy, a miss
// makes (and caches) one; `attached` counts copies taken from their producer (Note [Autocast copies from
// the producer]), `gradient_copies` the output gradients' copies taken (AttachedGradientCopy). For tests
// and diagnostics.
struct AutocastCacheCounters {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t attached = 0;
  int64_t gradient_copies = 0;
};
AutocastCacheCounters GetAutocastCacheCounters();

// The contiguous bf16 copy of a float32 CPU tensor (any layout), never cached. Not differentiable.
Tensor ToBFloat16Contiguous(const Tensor& x);

}  // namespace ddp

#endif  // DDP_TENSOR_AUTOCAST_H_
