// Ways to run the Reducer that no training job wants, kept apart from ReducerOptions' settings: the
// benchmarks' ablations (what overlapping communication with backward buys) and the test seam that sends
// every bucket through the comm hook at world size 1. For bench/ and tests only.
#ifndef DDP_REDUCER_REDUCER_ABLATIONS_H_
#define DDP_REDUCER_REDUCER_ABLATIONS_H_

namespace ddp {

class Reducer;  // reducer/reducer.h

namespace internal {

struct ReducerAblations {
  bool delay_reduction = false;         // launch every bucket only after backward (no overlap)
  bool reduce_at_world_size_1 = false;  // buckets go through the hook even at Note [World size 1] (so a
                                        // one-GPU test moves every bucket through NCCL)
};

// Replaces `reducer`'s ablations for later iterations (bench/bucket_sweep_interleaved switches
// configurations in one run). Not collective: every rank must make the same change at the same
// iteration. REQUIRES: not armed and no backward pass running.
void SetReducerAblations(Reducer& reducer, const ReducerAblations& ablations);

}  // namespace internal
}  // namespace ddp

#endif  // DDP_REDUCER_REDUCER_ABLATIONS_H_
