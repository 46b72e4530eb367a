// StopAgreement: after a SIGTERM (preemption by Slurm, Kubernetes or ddprun), every rank of train/train
// stops after the same step, so a checkpoint of that step can be written collectively and `--resume`
// continues as if nothing happened. Ranks receive the signal at slightly different moments; left alone
// they would stop one step apart and the one still training would report a lost peer.
//
// Note [Stop agreement]: each rank's request (train/graceful_stop.h) is sampled before the step's
// forward passes and the ranks combine their requests in one exchange per step; a request seen by any
// rank stops all of them after that step. Inside a Join (the default) the request rides on Join's
// existing per-forward announcement (ddp/join.h), which costs nothing extra; without one, a one-element
// all-reduce is launched before the forward and waited for after the optimizer step, so it overlaps the
// step's compute. In one process there is nothing to agree on.
//
// The same bit carries an elastic member's "a replacement is waiting to join" (Note [Elastic join] in
// comm/elastic_membership.cc): each rank's bit is (stop requested or joiner seen), so no step pays for a
// second exchange. Only when the combined bit is set (every rank sees that alike) do the ranks exchange
// their two reasons once more, to tell a stop from an admission.
//
// Thread safety: the training thread only. Collective under DDP: every rank calls Begin/End each step.
#ifndef DDP_TRAIN_STOP_AGREEMENT_H_
#define DDP_TRAIN_STOP_AGREEMENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "ddp/join.h"

namespace ddp {

class StopAgreement {
 public:
  // `group`: null in one process. `join`: the epoch's Join, or null. Neither is owned.
  StopAgreement(ProcessGroup* group, Join* join) : group_(group), join_(join) {}

  // What the ranks agreed for the boundary after a step (every rank gets the same answer).
  struct Boundary {
    bool stop = false;          // some rank asked to stop: every rank stops after this step
    bool admit_joiner = false;  // some rank saw a replacement waiting: every rank regroups after this step
  };

  // Sends this rank's request for the coming step: a stop, and (elastic) whether it saw a replacement
  // waiting to join. Call before its first forward.
  absl::Status BeginStep(bool stop_requested, bool joiner_waiting = false);
  // What any rank asked for during this step. Call after the optimizer step. Errors name the failed
  // exchange.
  absl::StatusOr<Boundary> EndStep();

 private:
  ProcessGroup* const group_;
  Join* const join_;
  // The reasons of a set bit, exchanged once (the bit alone cannot tell them apart).
  absl::StatusOr<Boundary> ResolveReasons();

  bool requested_ = false;     // this rank's own stop request
  bool joiner_seen_ = false;   // this rank saw a replacement waiting
  Tensor flag_;                // without a Join: the in-flight all-reduce's tensor
  std::shared_ptr<Work> work_;
};

}  // namespace ddp

#endif  // DDP_TRAIN_STOP_AGREEMENT_H_
