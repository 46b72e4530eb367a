// RunWorkerGroup: one attempt of ddprun's local worker group — start every local worker, relay its
// output, and when one fails (or ddprun is signalled) stop the rest.
#ifndef DDP_LAUNCH_WORKER_GROUP_H_
#define DDP_LAUNCH_WORKER_GROUP_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launch/rank_output.h"
#include "launch/worker_env.h"
#include "launch/worker_logs.h"

namespace ddp {

// What one attempt needs.
struct WorkerGroupConfig {
  // Ranks, store address and restart count of this attempt (see WorkerEnvironment).
  JobLayout layout;
  // Program and arguments run by every worker.
  std::vector<std::string> command;
  // What ranks other than 0 print.
  RedirectMode redirect = RedirectMode::kAll;
  // When not empty, each rank's lines are appended to <log_dir>/rank_<RANK>.log.
  std::string log_dir;
  // After SIGTERM, how long workers get before SIGKILL.
  absl::Duration grace_period = absl::Seconds(5);
  // How often workers are checked for exit while their output is quiet.
  absl::Duration monitor_interval = absl::Milliseconds(100);
  // torchrun's per-attempt tree: each worker gets TORCHELASTIC_ERROR_FILE there, and its redirected or
  // tee'd streams go to stdout.log / stderr.log there. Not owned; null for none (Spawn).
  // REQUIRES: log_tree->StartAttempt(layout.restart_count, ...) has been called.
  const WorkerLogTree* log_tree = nullptr;
  // Streams that go to log_tree's files only (redirects) or to the files and the console (tee).
  StdStreamsByRank redirects;
  StdStreamsByRank tee;
  // Local ranks whose output reaches the console; empty for all.
  std::vector<int> local_ranks_filter;
  WorkerConsoleOptions console;     // Console prefix and filtered logs (rank_output.h).
  bool virtual_local_rank = false;  // launch/virtual_local_rank.h
  // Readable end of a pipe on which each byte is a signal number to forward to the workers
  // (SIGINT/SIGTERM received by ddprun); -1 for none. Not owned.
  int signal_fd = -1;
  // Called once, when the first worker fails (before the others are stopped), with its global rank and
  // how it ended (DescribeWorkerExit, launch/worker_exit.h). May be empty.
  std::function<void(int rank, const std::string& how)> on_first_failure;
  // Elastic mode (launch/elastic_launch.h): a worker that fails does not stop the others; on_worker_lost
  // is called for each such worker instead of on_first_failure, with its slot's rank, its member id
  // (the rank for a worker started with the group, a new id for a replacement) and how it ended, and the
  // attempt succeeds when any worker exits 0 (the survivors finished the job); on_worker_finished is called
  // for each worker that exits 0.
  bool elastic = false;
  std::function<void(int rank, int member, const std::string& how)> on_worker_lost;
  std::function<void()> on_worker_finished;
  // Elastic mode: at most this many lost workers are replaced in this attempt, each by a new process in
  // its slot. replace_worker is asked first, with the slot's rank and the number of this node's workers
  // still running; it returns the variables the replacement gets on top of the slot's (its member id,
  // DDP_ELASTIC_MEMBER), or nullopt for no replacement now. Empty: never replace.
  int max_replacements = 0;
  std::function<std::optional<std::map<std::string, std::string>>(int rank, int alive)> replace_worker;
  // Variables added to every worker's environment (over WorkerEnvironment's).
  std::map<std::string, std::string> extra_env;
};

// How an attempt ended.
struct GroupOutcome {
  enum class Kind {
    kSucceeded,    // Every worker exited 0.
    kFailed,       // A worker exited non-zero or died of a signal; the others were stopped.
    kInterrupted,  // ddprun got a signal; it was forwarded and the workers have exited.
  };
  Kind kind = Kind::kSucceeded;
  int failed_rank = -1;            // kFailed: global rank of the first worker to fail.
  int exit_code = 0;               // kFailed: its exit code (128 + signal for signals).
  std::string exit_description;    // kFailed: how it ended, in words (DescribeWorkerExit).
  std::vector<std::string> tail;   // kFailed: its last output lines.
  std::string error_file_message;  // kFailed: what it wrote to TORCHELASTIC_ERROR_FILE ("" for nothing).
  int signal = 0;                  // kInterrupted: the signal ddprun received.
  std::vector<int> lost_ranks;     // elastic: the workers that failed while others went on (member ids).
  int replacements = 0;            // elastic: the replacements started.
};

// Runs the attempt until every worker has exited. Errors only when a worker cannot be started
// (workers already started are then killed).
absl::StatusOr<GroupOutcome> RunWorkerGroup(const WorkerGroupConfig& config);

}  // namespace ddp

#endif  // DDP_LAUNCH_WORKER_GROUP_H_
