// Join: training with uneven inputs, as PyTorch's torch.distributed.algorithms.Join. When ranks have
// different numbers of batches (an iterable dataset, a sampler without padding), the rank that runs out
// stops issuing the collectives the others wait for, and they stall until the timeout. Inside a Join, a
// rank that ran out calls Finish(), which stands in for the collectives of the ranks still training
// until every rank has joined, then gives every rank the model of the last joiner:
//
//   for (int epoch = 0; ...) {
//     Join join(ddp.get());                     // this rank's training forwards announce it as training
//     for (const Batch& b : my_uneven_batches) { // any number of steps, different per rank
//       Tensor loss = CrossEntropy(ddp->Forward(b.x), b.y);
//       loss.Backward();
//       optimizer.Step();
//     }
//     DDP_RETURN_IF_ERROR(join.Finish());       // shadow the others, then take the last joiner's model
//   }
//
// Note [Join]: every training-mode Forward inside a Join first all-reduces a small vector: one slot per
// rank (1: still training), the number of ranks whose backward will synchronise, and the number of
// ranks asking to stop (set_stop_requested). A joined rank loops
// on the same all-reduce with its slot 0; while some rank still trains it mirrors one training step's
// collectives in order: the buffer broadcast (broadcast_buffers), the bucket rebuild's broadcast when
// due, each bucket's reduction with zeros in its place and, under find_unused_parameters, the used-map
// all-reduce (Reducer::ShadowBackward). When every slot is 0 all ranks leave together and broadcast the
// parameters and buffers of the highest rank among those that trained in the last round, so all end
// identical. Optimizer state stays each rank's own (as in PyTorch); last_joiner() names the rank whose
// state a caller may broadcast.
//
// Gradients are divided by the initial world size (joined ranks contribute zeros) unless
// divide_by_initial_world_size is off, when they are averaged over the ranks still training.
// With throw_on_early_termination, every rank fails at the first step at which some rank has run out,
// naming the ranks that did. Cost: one all-reduce of world_size + 2 int64 per training forward.
//
// Thread safety: one training thread, as DistributedDataParallel. Collective: every rank of the DDP
// module's group creates a Join at the same point and calls Finish.
#ifndef DDP_DDP_JOIN_H_
#define DDP_DDP_JOIN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "ddp/distributed_data_parallel.h"

namespace ddp {

struct JoinOptions {
  bool enable = true;                        // false: Join does nothing (Forward announces nothing)
  bool divide_by_initial_world_size = true;  // false: average over the ranks still training
  bool throw_on_early_termination = false;   // fail every rank as soon as one has run out of data
};

class Join {
 public:
  // Enters the join context for `ddp` (not owned; must outlive the Join). Collectives start with the
  // next training forward. REQUIRES: no other Join is active on `ddp`.
  explicit Join(DistributedDataParallel* ddp, JoinOptions options = {});
  // Leaves the context. Normally after Finish; on an error path (a failed step returned early) it only
  // detaches from the DDP module: the other ranks then fail at their next collective, through the
  // group's failure reports or timeout, as after any failed step.
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has run out of data: shadows the others' training steps until every rank has called
  // Finish, then broadcasts the last joiner's parameters and buffers to every rank. Returns a failed
  // collective's error, or (throw_on_early_termination) the error naming the ranks that ran out.
  // Collective. Call once. After a training forward inside the Join failed (a collective, or early
  // termination), it communicates nothing and returns that error: the group is no longer in step.
  absl::Status Finish();

  // Preemption rides on the announcement (train/train): this rank's request to stop goes into every
  // later exchange, and stop_agreed() says whether any rank had requested it in the last one, which
  // every rank saw alike, so the ranks still training stop after the same step.
  void set_stop_requested(bool requested) { stop_requested_ = requested; }
  bool stop_agreed() const { return stop_agreed_; }

  // The rank whose model every rank took in Finish (-1 before Finish, or when no rank trained a step).
  int last_joiner() const { return last_joiner_; }

 private:
  friend class DistributedDataParallel;

  // Called by every training-mode Forward inside the Join (Note [Join]): announces this rank as
  // training; `syncs` says whether its backward will synchronise. Collective.
  absl::Status AnnounceTraining(bool syncs);
  // The all-reduce of every rank's slot; `training` is this rank's slot. Keeps the result.
  absl::Status ExchangeSlots(bool training, bool syncs);
  // Ranks still training in the last exchange, and those that had stopped.
  int TrainingRanks() const;
  std::vector<int> StoppedRanks() const;
  // One shadowed training step of the ranks still training.
  absl::Status ShadowStep();
  absl::Status EarlyTerminationError() const;

  DistributedDataParallel* const ddp_;
  const JoinOptions options_;
  std::vector<int64_t> slots_;       // last exchange: [rank] 1 if training, [world] ranks that sync,
                                     // [world + 1] ranks that requested a stop
  std::vector<int64_t> last_round_;  // the last exchange in which some rank still trained
  bool finished_ = false;
  bool stop_requested_ = false;
  bool stop_agreed_ = false;
  absl::Status failed_;  // the first failed announcement: Finish returns it without communicating
  int last_joiner_ = -1;
};

}  // namespace ddp

#endif  // DDP_DDP_JOIN_H_
