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

// Divides n elements of `dtype` in place by `divisor` (kAvg's final step; int64 uses floor division).
void DivideInPlace(void* data, DType dtype, size_t n, int divisor);

}  // namespace ddp

#endif  // DDP_COMM_REDUCE_FUNCTIONS_H_
