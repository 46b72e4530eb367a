// The logic of ddprun (torchrun for this engine): start the rendezvous store, start the local
// workers with their environment, relay their output, stop them all when one fails, restart.
// The command-line front end is launch/ddprun.cc.
#ifndef DDP_LAUNCH_LAUNCHER_H_
#define DDP_LAUNCH_LAUNCHER_H_

#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launch/elastic_launch.h"
#include "launch/rank_output.h"
#include "launch/worker_logs.h"

namespace ddp {

// How the nodes of a job meet (torchrun's --rdzv_backend).
enum class RendezvousBackend {
  // Every node is told its --node_rank; node 0 at --master_addr:--master_port hosts the store.
  kStatic,
  // Nodes meet at --rdzv_endpoint and get their node ranks there (launch/node_rendezvous.h).
  kC10d,
};

// Everything ddprun's flags say (defaults are torchrun's).
struct LaunchOptions {
  // Workers started on this node.
  int nproc_per_node = 1;
  // Nodes in the job (each runs its own ddprun): with kC10d the most nodes the rendezvous admits
  // (torchrun's --nnodes=MIN:MAX gives min_nodes and nnodes).
  int nnodes = 1;
  // kC10d: the rendezvous closes once this many nodes have joined and last_call_timeout has passed
  // without another (or nnodes have joined). Equals nnodes for kStatic.
  int min_nodes = 1;
  // How nodes meet; the endpoint of kC10d is rdzv_host:rdzv_port (port 0: a free one, one node only).
  RendezvousBackend rdzv_backend = RendezvousBackend::kStatic;
  std::string rdzv_host;
  int rdzv_port = 29400;
  // kC10d: how long a node waits for the rendezvous to complete (torchrun's rdzv_conf join_timeout),
  // and how long it stays open for more nodes once min_nodes have joined (last_call_timeout).
  absl::Duration join_timeout = absl::Seconds(600);
  absl::Duration last_call_timeout = absl::Seconds(30);
  // kC10d: whether this node hosts the rendezvous store: unset decides by address (this host owns
  // rdzv_host; when the port is taken, another ddprun on this host hosts it and this one joins).
  std::optional<bool> is_host;
  // TORCHELASTIC_RUN_ID (--rdzv_id); nodes of one kC10d rendezvous must agree on it.
  std::string run_id = "none";
  // ROLE_NAME (--role).
  std::string role = "default";
  // kC10d: the address other nodes reach this node at; when this node becomes node 0, the workers'
  // MASTER_ADDR. "" for rdzv_host (node 0 owns it).
  std::string local_addr;
  // How often the workers are checked for exit when their output is quiet (--monitor_interval).
  absl::Duration monitor_interval = absl::Milliseconds(100);
  // Which streams of which local ranks go to files only (--redirects) or to files and the console
  // (--tee), under log_dir in torchrun's layout (launch/worker_logs.h).
  StdStreamsByRank redirects;
  StdStreamsByRank tee;
  // Local ranks whose output reaches the console (--local_ranks_filter); empty for all.
  std::vector<int> local_ranks_filter;
  // Console prefix and filtered logs (--log_line_prefix_template, --duplicate_*_filters).
  WorkerConsoleOptions console;
  // --virtual_local_rank: LOCAL_RANK=0 and one visible GPU per worker (launch/virtual_local_rank.h).
  bool virtual_local_rank = false;
  // Signals forwarded to the workers (--signals_to_handle), as numbers; torchrun's default.
  std::vector<int> signals_to_handle = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
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
  // restart appends), and torchrun's per-attempt tree (error files, redirected streams) lives under it
  // (launch/worker_logs.h); else that tree is in a temporary folder.
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
