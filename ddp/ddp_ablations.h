// The Reducer's ablations and test seam (reducer/reducer_ablations.h) on a DistributedDataParallel's own
// Reducer. For bench/ and tests only.
#ifndef DDP_DDP_DDP_ABLATIONS_H_
#define DDP_DDP_DDP_ABLATIONS_H_

#include "reducer/reducer_ablations.h"

namespace ddp {

class DistributedDataParallel;  // ddp/distributed_data_parallel.h

namespace internal {

// SetReducerAblations on `ddp`'s Reducer, with its contract: not collective, every rank makes the same
// change at the same iteration. REQUIRES: between iterations.
void SetDdpAblations(DistributedDataParallel& ddp, const ReducerAblations& ablations);

}  // namespace internal
}  // namespace ddp

#endif  // DDP_DDP_DDP_ABLATIONS_H_
