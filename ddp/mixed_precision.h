// DDP's mixed precision settings, as PyTorch's DistributedDataParallel(mixed_precision=...): the dtypes of
// the parameters, of the gradient reduction and of the buffers.
//
// What this engine implements is the reduce dtype: the buckets (and so the all-reduce) are bfloat16,
// half the bytes of float32, while parameters, .grad, optimizer state and buffers stay float32
// (Note [Reduce dtype rounding] in reducer/bucket_cast.h says how gradients are rounded). Low-precision
// compute comes from an AutocastScope (tensor/autocast.h, --precision=bf16|fp16), which rounds the GEMM
// operands and keeps float32 master weights; so param_dtype and buffer_dtype stay float32 here: DDP
// refuses other values by name rather than ignore them.
//
//   DdpOptions options;
//   options.mixed_precision.reduce_dtype = DType::kBFloat16;   // train/train: --reduce_dtype=bf16
//   auto ddp = DistributedDataParallel::Create(model, group, options);
#ifndef DDP_DDP_MIXED_PRECISION_H_
#define DDP_DDP_MIXED_PRECISION_H_

#include "absl/status/status.h"
#include "reducer/reducer.h"
#include "tensor/tensor.h"

namespace ddp {

// PyTorch's _MixedPrecision for DDP. Every rank must pass the same values (part of Note [DDP settings
// agreement]).
struct DdpMixedPrecision {
  DType param_dtype = DType::kFloat32;   // must stay float32 (compute precision: AutocastScope)
  DType reduce_dtype = DType::kFloat32;  // float32, or bfloat16: buckets and all-reduce in bfloat16
  DType buffer_dtype = DType::kFloat32;  // must stay float32 (buffers are broadcast as they are)
};

// Checks `mixed_precision` against the Reducer options it will be used with: param/buffer dtypes float32;
// reduce dtype float32 or bfloat16 (on CPU or CUDA parameters); a bfloat16 reduce dtype needs
// gradient_as_bucket_view off and a comm hook that takes bfloat16 buckets
// (CommHook::SupportsBucketDtype: the plain all-reduce does; the fp16/bf16 compression hooks, PowerSGD
// and ZeRO's hook do not, and the error names the hook: the bf16 hook on bf16 buckets would convert
// twice). OK, or kInvalidArgument naming the setting.
absl::Status CheckDdpMixedPrecision(const DdpMixedPrecision& mixed_precision, const ReducerOptions& reducer);

}  // namespace ddp

#endif  // DDP_DDP_MIXED_PRECISION_H_
