#include "train/fault_injection.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace ddp {
namespace {

[[noreturn]] void Die(int rank, const char* where, int64_t step) {
  std::fprintf(stderr, "fault injection at %.3f: rank %d kills itself %s %lld\n", absl::ToUnixMicros(absl::Now()) / 1e6,
               rank, where, static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();  // not reached
}

}  // namespace

int64_t StepsWithUnevenInputs(const FaultInjection& fault, int rank, int64_t steps) {
  return std::max<int64_t>(0, steps - rank * fault.uneven_drop_batches);
}

bool FaultArmed(const FaultInjection& fault, int rank) {
  return fault.step > 0 && rank == fault.rank && fault.attempt == 0;
}

void MaybeKillAfterStep(const FaultInjection& fault, int rank, int64_t global_step) {
  if (fault.attempt == 0) {
    for (const auto& [r, step] : fault.more_after_step) {
      if (r == rank && step == global_step) Die(rank, "after step", global_step);
    }
  }
  if (fault.point != "after_step" || !FaultArmed(fault, rank) || global_step != fault.step) return;
  Die(rank, "after step", global_step);
}

absl::Status ParseMoreFaults(const std::string& spec, FaultInjection& fault) {
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    int rank = -1;
    int64_t step = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) || rank < 0 ||
        (parts[1] != "regroup" && (!absl::SimpleAtoi(parts[1], &step) || step < 1))) {
      return absl::InvalidArgumentError(absl::StrCat("--fault_inject_more: \"", entry,
                                                     "\" is not LAUNCH_RANK:STEP or LAUNCH_RANK:regroup"));
    }
    if (parts[1] == "regroup") {
      fault.in_regroup.push_back(rank);
    } else {
      fault.more_after_step.emplace_back(rank, step);
    }
  }
  return absl::OkStatus();
}

void MaybeKillInRegroup(const FaultInjection& fault, int rank) {
  if (fault.attempt != 0) return;
  for (int r : fault.in_regroup) {
    if (r == rank) Die(rank, "in the elastic regroup after step", -1);
  }
}

void MaybeReportStepAfterFault(const FaultInjection& fault, int rank, int64_t global_step) {
  if (fault.step <= 0 || rank != 0 || global_step != fault.step + 1) return;
  std::fprintf(stderr, "fault injection: step %lld completed at %.3f\n", static_cast<long long>(global_step),
               absl::ToUnixMicros(absl::Now()) / 1e6);
}

void InstallBackwardFault(const FaultInjection& fault, int rank, Module& model, const int64_t* global_step) {
  if (fault.point != "backward" || !FaultArmed(fault, rank)) return;
  const std::vector<Tensor> params = model.Parameters();
  if (params.empty()) return;
  const int64_t step = fault.step;
  params[params.size() / 2].RegisterPostAccumulateGradHook([rank, step, global_step](const Tensor&) {
    if (*global_step == step) Die(rank, "during the backward pass of step", step + 1);
  });
}

}  // namespace ddp
