// Test program for Spawn (tests/spawn_test.cc): `spawn_check --nprocs=N [--fail_rank=R
// --fail_how=status|signal|signal_in_group] [--others_sleep_s=S] [--report_signals]` spawns N processes
// of itself; each joins the group through InitProcessGroup, all-reduces rank + 1 and prints "rank R of
// N: sum S env ok" (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT checked). Rank R fails instead (an error
// status, or SIGKILL) when asked, while the others sleep S seconds. With signal_in_group, rank R first
// joins the group and takes part in one all-reduce, then SIGKILLs itself while the others (ignoring
// SIGTERM, so that they report) wait in a second all-reduce, which fails naming the lost rank. With
// --report_signals a rank prints "rank R got signal N" when SIGINT or SIGTERM reaches it, and exits.
// The parent prints "spawn ok" or the Spawn error and exits 1.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/init.h"
#include "launch/spawn.h"
#include "base/check.h"
#include "tensor/factory.h"

namespace {

struct Args {
  int nprocs = 2;
  int fail_rank = -1;
  std::string fail_how = "status";
  int others_sleep_s = 0;
  bool report_signals = false;
};

int g_rank = -1;  // this process's rank, for the signal handler

// Async-signal-safe: "rank R got signal N\n", then exit.
void ReportSignal(int signo) {
  char line[64];
  const int n = std::snprintf(line, sizeof(line), "rank %d got signal %d\n", g_rank, signo);
  (void)!::write(1, line, n);
  ::_exit(128 + signo);
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&a](const char* flag) { return a.substr(std::strlen(flag)); };
    if (a.rfind("--nprocs=", 0) == 0) DDP_CHECK(absl::SimpleAtoi(value("--nprocs="), &args.nprocs));
    if (a.rfind("--fail_rank=", 0) == 0) DDP_CHECK(absl::SimpleAtoi(value("--fail_rank="), &args.fail_rank));
    if (a.rfind("--fail_how=", 0) == 0) args.fail_how = value("--fail_how=");
    if (a == "--report_signals") args.report_signals = true;
    if (a.rfind("--others_sleep_s=", 0) == 0) {
      DDP_CHECK(absl::SimpleAtoi(value("--others_sleep_s="), &args.others_sleep_s));
    }
  }
  return args;
}

absl::Status CheckEnv(int rank, int nprocs) {
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDP_SPAWN_RANK"}) {
    if (std::getenv(name) == nullptr) return absl::FailedPreconditionError(absl::StrCat(name, " is not set"));
  }
  if (std::string(std::getenv("RANK")) != absl::StrCat(rank) ||
      std::string(std::getenv("WORLD_SIZE")) != absl::StrCat(nprocs)) {
    return absl::FailedPreconditionError("RANK/WORLD_SIZE disagree with Spawn's rank");
  }
  return absl::OkStatus();
}

// signal_in_group: the failing rank dies after one all-reduce; the others fail in the second.
absl::Status DieInGroup(const Args& args, int rank) {
  if (rank != args.fail_rank) ::signal(SIGTERM, SIG_IGN);
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ddp::DistributedContext> dist, ddp::InitProcessGroup(ddp::InitOptions{}));
  ddp::Tensor t = ddp::Full({1}, 1.0f);
  DDP_RETURN_IF_ERROR(dist->group->AllReduce(t)->Wait(dist->timeout));
  if (rank == args.fail_rank) ::raise(SIGKILL);
  return dist->group->AllReduce(t)->Wait(dist->timeout);
}

absl::Status RunRank(const Args& args, int rank) {
  g_rank = rank;
  if (args.report_signals) {
    ::signal(SIGINT, ReportSignal);
    ::signal(SIGTERM, ReportSignal);
  }
  if (args.fail_how == "signal_in_group") return DieInGroup(args, rank);
  if (rank == args.fail_rank) {
    if (args.fail_how == "signal") ::raise(SIGKILL);
    return absl::InvalidArgumentError("bad shape");
  }
  if (args.others_sleep_s > 0) absl::SleepFor(absl::Seconds(args.others_sleep_s));
  DDP_RETURN_IF_ERROR(CheckEnv(rank, args.nprocs));
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ddp::DistributedContext> dist, ddp::InitProcessGroup(ddp::InitOptions{}));
  ddp::Tensor t = ddp::Full({1}, static_cast<float>(rank + 1));
  DDP_RETURN_IF_ERROR(dist->group->AllReduce(t)->Wait(dist->timeout));
  std::printf("rank %d of %d: sum %g env ok\n", rank, args.nprocs, t.data<float>()[0]);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  std::printf("before Spawn (every process)\n");
  std::fflush(stdout);
  absl::Status status = ddp::Spawn([&args](int rank) { return RunRank(args, rank); }, args.nprocs);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  std::printf("spawn ok\n");
  return 0;
}
