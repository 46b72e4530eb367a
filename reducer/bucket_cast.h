// Casting gradients into and out of bucket buffers whose dtype is the reduce dtype
// (ReducerOptions::reduce_dtype, PyTorch DDP's mixed_precision.reduce_dtype).
//
// Note [Reduce dtype rounding]
// With reduce dtype bfloat16 a parameter's float32 gradient g on rank r reaches the average as follows:
//   1. into the bucket: b_r = bf16(g * s), where s = 1/divisor is applied in float32 and the product is
//      rounded once to bfloat16, to nearest with ties to even (FloatToBFloat16: NaN stays NaN, inf stays
//      inf, subnormals kept). The division is never done after the rounding, so there is one rounding.
//   2. the all-reduce sums the bfloat16 values: each reduction step widens its two operands to float32,
//      adds them in float32 and rounds the sum to bfloat16 the same way (comm/reduce_functions.cc). The
//      order of the steps is the backend's (with two ranks there is one step: bf16(b_0 + b_1)). NCCL
//      (CUDA buckets) sums bfloat16 with its own kernels, in its own order; at world size 1 it copies.
//   3. out of the bucket: the bfloat16 average widens to float32 exactly into .grad (CopyInPlace, on
//      either device).
// CPU and CUDA slots hold the same bits: the CUDA kernel runs functors::RoundScaledToBFloat16
// (tensor/low_precision_round.h: the float32 product, then RoundToBFloat16), which the CPU cast equals bit
// for bit (reducer/reduce_dtype_test; reducer/reduce_dtype_cuda_test checks the device).
// So the averaged gradient carries the relative error of one bfloat16 rounding per rank plus one per
// reduction step: about 2^-8 = 0.4% per rounding, in the worst case (world_size) * 2^-8 relative to the
// largest term. The bucket buffers, and the bytes on the wire, are half those of float32.
#ifndef DDP_REDUCER_BUCKET_CAST_H_
#define DDP_REDUCER_BUCKET_CAST_H_

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace ddp {

// Whether the Reducer can keep its buckets in `dtype`: float32 or bfloat16. OK, or kInvalidArgument
// naming the dtype and the supported ones.
absl::Status CheckReduceDtype(DType dtype);

// slot = scale * grad, rounded to slot's dtype (Note [Reduce dtype rounding], step 1). `slot` is a
// contiguous region of a bucket buffer (float32 or bfloat16); `grad` is a float32 tensor with slot's
// number of elements, on slot's device. On CUDA the cast runs on the current stream of slot's device (as
// the float32 copy does, and where the collective that reads the bucket waits) with the rounding functor
// the CPU runs, so both devices give the same bits for a finite `scale`. Not thread-safe for overlapping
// slots.
void CastScaledIntoSlot(const Tensor& slot, const Tensor& grad, float scale);

// slot = 0 in whatever dtype the slot has, on slot's device (on CUDA: its current stream).
// REQUIRES: a 16-bit slot is contiguous.
void ZeroSlot(const Tensor& slot);

}  // namespace ddp

#endif  // DDP_REDUCER_BUCKET_CAST_H_
