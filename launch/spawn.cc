#include "launch/spawn.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "store/job_token.h"
#include "store/socket_util.h"
#include "store/tcp_store_server.h"
#include "base/unique_fd.h"
#include "launch/job_control.h"
#include "launch/launcher.h"
#include "launch/worker_group.h"
#include "base/check.h"

namespace ddp {
namespace {

constexpr char kSpawnRankEnv[] = "DDP_SPAWN_RANK";

absl::Status RunRank(int rank, const std::function<absl::Status(int rank)>& fn) {
  try {
    return fn(rank);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("uncaught exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("uncaught exception of unknown type");
  }
}

// The child's side: run this rank's function and exit.
[[noreturn]] void RunSpawnedRank(const char* rank_text, const std::function<absl::Status(int rank)>& fn,
                                 int nprocs) {
  int rank = -1;
  const char* world = std::getenv("WORLD_SIZE");
  absl::Status status;
  if (!absl::SimpleAtoi(rank_text, &rank) || rank < 0 || rank >= nprocs) {
    status = absl::InvalidArgumentError(absl::StrCat(kSpawnRankEnv, "=\"", rank_text, "\" is not in [0, ", nprocs, ")"));
  } else if (world == nullptr || absl::StrCat(nprocs) != world) {
    status = absl::InvalidArgumentError(absl::StrCat("Spawn(fn, ", nprocs, ") in a child of a Spawn of ",
                                                     world == nullptr ? "?" : world, " processes"));
  } else {
    status = RunRank(rank, fn);
  }
  if (!status.ok()) std::fprintf(stderr, "spawned rank %d: %s\n", rank, status.ToString().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(status.ok() ? 0 : 1);
}

// This program's path and arguments, to run it again.
absl::StatusOr<std::vector<std::string>> OwnCommand() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return absl::InternalError("Spawn: cannot read /proc/self/exe");
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  std::vector<std::string> command = absl::StrSplit(text, '\0');
  if (!command.empty() && command.back().empty()) command.pop_back();  // the trailing NUL
  if (command.empty()) return absl::InternalError("Spawn: cannot read /proc/self/cmdline");
  command[0] = std::string(path, n);
  return command;
}

absl::Status FailureStatus(const GroupOutcome& outcome) {
  return absl::InternalError(absl::StrCat("Spawn: rank ", outcome.failed_rank, " failed first with ",
                                          outcome.exit_description, "; its last lines:\n  | ",
                                          absl::StrJoin(outcome.tail, "\n  | ")));
}

}  // namespace


absl::Status Spawn(const std::function<absl::Status(int rank)>& fn, int nprocs, const SpawnOptions& options) {
  if (nprocs < 1 || nprocs > kMaxProcPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("Spawn: nprocs must be in [1, ", kMaxProcPerNode, "] (processes on this host), got ", nprocs));
  }
  if (const char* rank = std::getenv(kSpawnRankEnv); rank != nullptr) RunSpawnedRank(rank, fn, nprocs);
  WorkerGroupConfig config;
  DDP_ASSIGN_OR_RETURN(config.command, OwnCommand());
  TcpStoreServerOptions server_options;
  server_options.host = options.master_addr;
  server_options.port = 0;
  const std::string token = GenerateJobToken();
  server_options.job_token = token;
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreServer> store, TcpStoreServer::Create(server_options));
  config.layout.nproc_per_node = nprocs;
  config.layout.master_addr = options.master_addr;
  DDP_ASSIGN_OR_RETURN(config.layout.master_port, PickFreePort());
  config.layout.store_port = store->port();
  config.layout.job_token = token;
  config.layout.job_id = GenerateJobToken().substr(0, 16);
  config.layout.spawned = true;
  config.grace_period = options.grace_period;
  // As under ddprun: SIGINT/SIGTERM to this process reach every rank, and the first rank to fail is
  // recorded in the store before the others are stopped, so their errors name it.
  ScopedSignalPipe signals;
  config.signal_fd = signals.read_fd();
  config.on_first_failure = [&config](int rank, const std::string& how) {
    RecordExitNotice(config.layout, /*restart=*/0, rank, how);
  };
  DDP_ASSIGN_OR_RETURN(GroupOutcome outcome, RunWorkerGroup(config));
  if (outcome.kind == GroupOutcome::Kind::kSucceeded) return absl::OkStatus();
  if (outcome.kind == GroupOutcome::Kind::kInterrupted) {
    return absl::CancelledError(absl::StrCat("Spawn: interrupted by signal ", outcome.signal));
  }
  return FailureStatus(outcome);
}

}  // namespace ddp
