#include "train/fault_injection.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

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
  if (fault.point != "after_step" || !FaultArmed(fault, rank) || global_step != fault.step) return;
  Die(rank, "after step", global_step);
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
