// ddprun: torchrun for this engine. Starts --nproc_per_node workers running the given program with
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ... set (launch/worker_env.h); node 0 also
// hosts the TCP store, on its own port (Note [Two ports]), so PyTorch DDP scripts run unchanged. Examples:
//   ddprun --nproc_per_node=4 bazel-bin/train/train --model=mlp
//   ddprun --nnodes=2 --node_rank=1 --master_addr=10.0.0.1 --job_token_file=/shared/job.token -- ./train
// Exit code: 0, or the first failing worker's code (128 + signal), see launch/launcher.h.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "launch/launcher.h"
#include "launch/launcher_args.h"

ABSL_FLAG(int, nproc_per_node, 1, "Workers to start on this node.");
ABSL_FLAG(int, nnodes, 1, "Nodes in the job (one ddprun per node).");
ABSL_FLAG(int, node_rank, 0, "This node's index in [0, nnodes); node 0 hosts the store.");
ABSL_FLAG(std::string, master_addr, "127.0.0.1", "Address of node 0 (MASTER_ADDR, DDP_STORE_ADDR).");
ABSL_FLAG(int, master_port, 29500,
          "Port of ddprun's store on node 0 (DDP_STORE_PORT); 0 picks one. The workers' MASTER_PORT is "
          "another, free port of node 0, for their own rendezvous (a PyTorch script's TCPStore).");
ABSL_FLAG(int, max_restarts, 0, "Restarts of the local worker group after a failure.");
ABSL_FLAG(bool, elastic, false,
          "Elastic mode (docs/elastic.md): a worker that dies does not stop the others, which regroup "
          "(train/train --elastic); the job succeeds when they finish.");
ABSL_FLAG(int, min_world_size, 1,
          "With --elastic: the fewest ranks the job continues with (torchrun's --nnodes=MIN:MAX is MIN * "
          "nproc_per_node); below it the survivors stop with a checkpoint.");
ABSL_FLAG(std::string, log_dir, "", "Also write each rank's output to <log_dir>/rank_N.log.");
ABSL_FLAG(std::string, redirect, "all",
          "What ranks other than 0 print: all | errors (stderr only) | none.");
ABSL_FLAG(double, grace_period_s, 5.0, "Seconds between SIGTERM and SIGKILL when stopping workers.");
ABSL_FLAG(std::string, job_token, "",
          "Store job token; default $DDP_JOB_TOKEN (or the file $DDP_JOB_TOKEN_FILE names), or a random one "
          "for single-node jobs. A multi-node job needs one, the same on every node.");
ABSL_FLAG(std::string, job_token_file, "",
          "File holding the job token, on a filesystem every node sees: node 0 creates it (mode 0600) when "
          "missing, the other nodes wait for it.");

namespace {

const std::vector<std::string> kValueFlags = {
    "nproc_per_node", "nnodes",   "node_rank", "master_addr",    "master_port",
    "max_restarts",   "log_dir",  "redirect",  "grace_period_s", "job_token", "job_token_file", "min_world_size"};

// Parses our flags; returns false (after printing why) when they are unusable.
bool ParseOptions(int argc, char** argv, ddp::LaunchOptions* options) {
  ddp::SplitArgs split = ddp::SplitLauncherArgs(std::vector<std::string>(argv, argv + argc),
                                                kValueFlags);
  std::vector<char*> flag_argv;
  for (std::string& arg : split.launcher_args) flag_argv.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(flag_argv.size()), flag_argv.data());
  options->nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  options->nnodes = absl::GetFlag(FLAGS_nnodes);
  options->node_rank = absl::GetFlag(FLAGS_node_rank);
  options->master_addr = absl::GetFlag(FLAGS_master_addr);
  options->master_port = absl::GetFlag(FLAGS_master_port);
  options->max_restarts = absl::GetFlag(FLAGS_max_restarts);
  options->log_dir = absl::GetFlag(FLAGS_log_dir);
  options->grace_period = absl::Seconds(absl::GetFlag(FLAGS_grace_period_s));
  options->job_token = absl::GetFlag(FLAGS_job_token);
  options->job_token_file = absl::GetFlag(FLAGS_job_token_file);
  options->elastic.enabled = absl::GetFlag(FLAGS_elastic);
  options->elastic.min_world_size = absl::GetFlag(FLAGS_min_world_size);
  options->command = std::move(split.command);
  if (!ddp::ParseRedirectMode(absl::GetFlag(FLAGS_redirect), &options->redirect)) {
    std::fprintf(stderr, "ddprun: --redirect must be all, errors or none, not '%s'\n",
                 absl::GetFlag(FLAGS_redirect).c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ddprun [flags] [--] program [args...]\n"
      "Starts --nproc_per_node workers of `program` with torchrun's environment variables.");
  ddp::LaunchOptions options;
  if (!ParseOptions(argc, argv, &options)) return 2;
  absl::StatusOr<int> code = ddp::RunLauncher(options);
  if (!code.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", std::string(code.status().message()).c_str());
    return code.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return *code;
}
