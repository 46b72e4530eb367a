// The logic of ddprun (torchrun for this engine): start the rendezvous store, start the local
// workers with their environment, relay their output, stop them all when one fails, restart.
// The command-line front end is launch/ddprun.cc.
#ifndef DDP_LAUNCH_LAUNCHER_H_
#define DDP_LAUNCH_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launch/elastic_launch.h"
#include "launch/rank_output.h"

namespace ddp {

// Everything ddprun's flags say (defaults are torchrun's).
struct LaunchOptions {
  // Workers started on this node.
  int nproc_per_node = 1;
  // Nodes in the job (each runs its own ddprun).
  int nnodes = 1;
  // This node's index in [0, nnodes). Node 0 hosts the TCP store server.
  int node_rank = 0;
  // Address of node 0, where the store listens (MASTER_ADDR and DDP_STORE_ADDR for the workers).
  std::string master_addr = "127.0.0.1";
  // Port of ddprun's store (DDP_STORE_PORT). 0 picks a free port (single-node jobs only). The workers'
  // MASTER_PORT is another, free port of node 0 (Note [Two ports] in launch/worker_env.h).
  int master_port = 29500;
  // How many times the whole local worker group is restarted after a failure. The store (and its
  // keys) lives on across restarts: workers should put DDP_RESTART_COUNT into their keys (e.g. a
  // PrefixStore "attempt_<n>"). Restarts are node-local; multi-node jobs are not re-synchronised.
  int max_restarts = 0;
  // When not empty, each rank's output is also written to <log_dir>/rank_<RANK>.log (created; a
  // restart appends).
  std::string log_dir;
  // What ranks other than 0 print (rank 0 always prints everything).
  RedirectMode redirect = RedirectMode::kAll;
  // After SIGTERM, how long workers get to exit before SIGKILL.
  absl::Duration grace_period = absl::Seconds(5);
  // Job token of the store (Note [Job tokens] in store/job_token.cc). "": the token in job_token_file;
  // else $DDP_JOB_TOKEN, else the file $DDP_JOB_TOKEN_FILE names; else a random token for a single-node
  // job. A multi-node job without one is refused: every node's ddprun must share it.
  std::string job_token;
  // A file that holds the job token, on a filesystem every node sees: node 0 creates it (mode 0600,
  // a fresh token) when it does not exist; the other nodes wait for it (up to the node join timeout).
  // At most one of job_token and job_token_file.
  std::string job_token_file;
  // --elastic and --min_world_size (launch/elastic_launch.h): a lost worker does not stop the others.
  ElasticLaunchOptions elastic;
  // The program and its arguments.
  std::vector<std::string> command;
};

// The most workers one ddprun starts. Each worker is a process with its own kernel threads, two output
// pipes into ddprun and a store connection; a node has at most a few hundred cores (or 8-16 GPUs), so
// more than this is a typo, and would exhaust process and file-descriptor limits long before training.
inline constexpr int kMaxProcPerNode = 1024;

// Checks ranges (1 <= nproc_per_node <= kMaxProcPerNode, 0 <= node_rank < nnodes, ports, a command
// given, at most one of job_token and job_token_file, ...).
absl::Status ValidateLaunchOptions(const LaunchOptions& options);

// Runs the job to completion and returns the exit code ddprun should exit with: 0 when every worker
// of the last attempt exited 0; else the exit code of the worker that failed first (128 + signal
// number when it died of a signal); 128 + signal when ddprun itself got SIGINT/SIGTERM (forwarded to
// the workers). Worker output is printed on this process's stdout/stderr with "[rank N] " prefixes;
// launcher messages go to stderr prefixed "ddprun: ". Returns an error status only when the job
// could not be started (bad options, no job token for a multi-node job, store port busy, fork failure).
// Every worker dies with ddprun, even when ddprun is SIGKILLed (launch/worker_process.h).
// Not thread-safe: installs SIGINT/SIGTERM handlers for its duration and ignores SIGPIPE.
absl::StatusOr<int> RunLauncher(const LaunchOptions& options);

}  // namespace ddp

#endif  // DDP_LAUNCH_LAUNCHER_H_
