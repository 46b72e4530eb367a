// ddprun: torchrun for this engine. Takes torchrun's command line (launch/torchrun_args.h; the parity
// table is in docs/launch.md), starts --nproc_per_node workers with RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT, ... set (launch/worker_env.h); the node that hosts the rendezvous also hosts
// the TCP store, on its own port (Note [Two ports]), so PyTorch DDP scripts run unchanged. Examples:
//   ddprun --nproc_per_node=4 bazel-bin/train/train --model=mlp
//   PYTHON_EXEC=/opt/torch2/bin/python ddprun --standalone --nproc_per_node=2 ddp_script.py
//   ddprun --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=10.0.0.1:29400 --rdzv_id=job7 \
//       --job_token_file=/shared/job.token train.py
// Exit code: 0, or the first failing worker's code (128 + signal), see launch/launcher.h; 2 for a bad
// command line.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "launch/local_devices.h"
#include "launch/torchrun_args.h"

extern char** environ;

namespace {

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<ddp::DdprunCommandLine> line = ddp::ParseDdprunCommandLine(
      std::vector<std::string>(argv, argv + argc), Environment(), ddp::DetectLocalDevices());
  if (!line.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", std::string(line.status().message()).c_str());
    return 2;
  }
  if (line->help) {
    std::fputs(ddp::DdprunUsage().c_str(), stdout);
    return 0;
  }
  for (const std::string& warning : line->warnings) std::fprintf(stderr, "ddprun: %s\n", warning.c_str());
  absl::StatusOr<int> code = ddp::RunLauncher(line->options);
  if (!code.ok()) {
    std::fprintf(stderr, "ddprun: %s\n", std::string(code.status().message()).c_str());
    return code.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return *code;
}
