// Testing aids of train/train, kept out of the training loop's own logic:
//   * --fault_inject_step / --fault_inject_rank / --fault_inject_point: one rank kills itself with SIGKILL,
//     as a crashed node would, on the first attempt only (restart count 0), so tests can check
//     that the others fail cleanly and that a restarted group resumes correctly;
//   * --uneven_drop_batches: rank r trains r * N fewer steps per epoch, so tests see uneven inputs.
#ifndef DDP_TRAIN_FAULT_INJECTION_H_
#define DDP_TRAIN_FAULT_INJECTION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

#include "nn/module.h"

namespace ddp {

// Where the injected fault strikes.
struct FaultInjection {
  int64_t step = 0;                  // 0: no fault
  int rank = 1;                      // the rank that dies
  std::string point = "after_step";  // after_step: once optimizer step `step` is done (and logged);
                                     // backward: in the middle of the backward pass of step `step` + 1
  int64_t uneven_drop_batches = 0;   // rank r drops r * this many steps of each epoch (0: even inputs)
  int attempt = 0;                   // this run's restart count (LaunchEnv::restart_count): faults strike
                                     // on the first start only, so a restarted group can finish
  // --fault_inject_more: further (rank, step) pairs that die after the step (the ranks are launch ranks,
  // which an elastic regroup never renumbers), and the ranks that die in their first elastic regroup.
  std::vector<std::pair<int, int64_t>> more_after_step;
  std::vector<int> in_regroup;
};

// Parses --fault_inject_more ("2:10,0:20,1:regroup") into `fault`'s more_after_step and in_regroup. An
// error names the malformed entry.
absl::Status ParseMoreFaults(const std::string& spec, FaultInjection& fault);

// Dies when launch rank `rank` is named in fault.in_regroup (first attempt only): called by an elastic
// regroup after the decision that includes it, before its group forms.
void MaybeKillInRegroup(const FaultInjection& fault, int rank);

// The steps `rank` trains this epoch when it would train `steps`: fewer by rank * uneven_drop_batches,
// never below 0.
int64_t StepsWithUnevenInputs(const FaultInjection& fault, int rank, int64_t steps);

// Whether this process should die at all: the fault is set, `rank` is its rank and fault.attempt is 0.
bool FaultArmed(const FaultInjection& fault, int rank);

// point == "after_step": dies when `global_step` == fault.step. No-op unless FaultArmed.
void MaybeKillAfterStep(const FaultInjection& fault, int rank, int64_t global_step);

// Rank 0 prints "fault injection: step <fault.step + 1> completed at <unix time>" when `global_step` is
// the first step after the injected fault, on any attempt: with the time the killed rank printed, the
// recovery time from the death to the next completed step (BENCHMARKS.md). No-op without a fault.
void MaybeReportStepAfterFault(const FaultInjection& fault, int rank, int64_t global_step);

// point == "backward": registers a gradient hook on the middle parameter of `model` that dies when it
// fires while *global_step == fault.step (so some of the step's buckets have been launched, others not).
// `global_step` is not owned and must outlive the model's use. No-op unless FaultArmed.
void InstallBackwardFault(const FaultInjection& fault, int rank, Module& model, const int64_t* global_step);

}  // namespace ddp

#endif  // DDP_TRAIN_FAULT_INJECTION_H_
