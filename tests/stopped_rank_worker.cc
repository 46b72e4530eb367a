// stopped_rank_worker: a rank that stops (SIGSTOP, as a debugger, a frozen container or an overloaded
// node would) in the middle of a job, for the flight recorder's end-to-end test
// (tests/flight_recorder_process_test.cc). Every rank joins the group with InitProcessGroup and runs
// --calls rounds, each issuing two all-reduces of 1000 float32 and then waiting for both (as DDP issues
// its buckets and waits at the end of backward); rank --stop_rank raises SIGSTOP on itself just before
// round --stop_round, so it never issues call #(2 * stop_round). The others' waits time out
// (DDP_TIMEOUT_S) and print their error, which must name the stopped rank and the call.
//
//   ddprun --nproc_per_node=2 --master_port=0 bazel-bin/tests/stopped_rank_worker --stop_rank=1
//
// Exit codes: 0 every round completed; 2 the group could not be joined; 3 a call failed (its error is
// printed on one line starting "stopped_rank_worker rank R: "), after which the process waits up to 3 s
// for the launcher's SIGTERM, so that its error is not mistaken for the job's first failure.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/init.h"
#include "tensor/factory.h"
#include "testing/worker_env.h"

ABSL_FLAG(std::string, init_method, "env://",
          "env://, or tcp://host:port to have rank 0 serve the store (DDP_STORE_IN_LAUNCHER is then ignored).");
ABSL_FLAG(int, calls, 40, "Rounds of two all-reduces.");
ABSL_FLAG(int, stop_rank, -1, "The rank that SIGSTOPs itself (-1: none).");
ABSL_FLAG(int, stop_round, 10, "The round the stopping rank never starts.");

namespace ddp {
namespace {

constexpr int kExitInit = 2;
constexpr int kExitCallFailed = 3;

int Main() {
  InitOptions options;
  options.init_method = absl::GetFlag(FLAGS_init_method);
  options.env = WorkerEnvForInitMethod(options.init_method);
  absl::StatusOr<std::unique_ptr<DistributedContext>> context = InitProcessGroup(options);
  if (!context.ok()) {
    std::fprintf(stderr, "stopped_rank_worker: cannot join: %s\n", std::string(context.status().message()).c_str());
    return kExitInit;
  }
  ProcessGroup& group = *(*context)->group;
  Tensor a = Full({1000}, 1.0f);
  Tensor b = Full({1000}, 2.0f);
  for (int round = 0; round < absl::GetFlag(FLAGS_calls); ++round) {
    if (group.rank() == absl::GetFlag(FLAGS_stop_rank) && round == absl::GetFlag(FLAGS_stop_round)) {
      std::printf("stopped_rank_worker rank %d: stopping before round %d\n", group.rank(), round);
      std::fflush(stdout);
      ::raise(SIGSTOP);
    }
    std::shared_ptr<Work> first = group.AllReduce(a);
    std::shared_ptr<Work> second = group.AllReduce(b);
    for (const std::shared_ptr<Work>& work : {first, second}) {
      const absl::Status status = work->Wait(group.timeout());
      if (status.ok()) continue;
      std::fprintf(stderr, "stopped_rank_worker rank %d: %s\n", group.rank(), std::string(status.message()).c_str());
      std::fflush(stderr);
      absl::SleepFor(absl::Seconds(3));  // the launcher's SIGTERM ends it sooner
      return kExitCallFailed;
    }
  }
  std::printf("stopped_rank_worker rank %d: %d rounds completed\n", group.rank(), absl::GetFlag(FLAGS_calls));
  return 0;
}

}  // namespace
}  // namespace ddp

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ddp::Main();
}
