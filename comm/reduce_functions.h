// Element-wise reductions over raw buffers for every (dtype, ReduceOp) a backend supports, in Gloo's
// reduce-function signature: c[i] = op(a[i], b[i]) for n elements (c may alias a).
#ifndef DDP_COMM_REDUCE_FUNCTIONS_H_
#define DDP_COMM_REDUCE_FUNCTIONS_H_

#include <cstddef>

#include "comm/process_group.h"
#include "tensor/dtype.h"

namespace ddp {

using RawReduceFunction = void (*)(void* c, const void* a, const void* b, size_t n);

// The function for `op` on `dtype`; kAvg maps to the sum (the caller divides afterwards).
RawReduceFunction GetReduceFunction(DType dtype, ReduceOp op);

// kAvg's division, fused into ReduceInputs: each block of the result is divided (DivideInPlace) before it
// is written out, so no pass over memory is added and the values are bit-identical with dividing after.
struct FusedDivide {
  DType dtype;
  int divisor;
};

// Note [Blocked reduction] in reduce_functions.cc. out[i] = op(...op(op(inputs[0][i], inputs[1][i]),
// inputs[2][i])..., inputs[k-1][i]) for n elements of `element_size` bytes, in input order (so every caller
// with the same inputs gets bit-identical results), written to `out` and, when `also_out` is not null, to
// `also_out` too; divided first by divide->divisor when `divide` is given. Each input is read once and each
// output written once. An output may be the same buffer as an input (same start); partial overlaps are not
// allowed. REQUIRES: num_inputs >= 2, `fn` from GetReduceFunction for elements of `element_size` bytes
// (of divide->dtype when given).
void ReduceInputs(RawReduceFunction fn, size_t element_size, void* out, void* also_out,
                  const void* const* inputs, int num_inputs, size_t n, const FusedDivide* divide = nullptr);

// Divides n elements of `dtype` in place by `divisor` (kAvg's final step; int64 uses floor division).
// float32 by a power of two multiplies by its reciprocal instead: the same correctly rounded value, without
// the slow divide instruction.
void DivideInPlace(void* data, DType dtype, size_t n, int divisor);

}  // namespace ddp

#endif  // DDP_COMM_REDUCE_FUNCTIONS_H_
