// Spawn: run a function on n ranks, each in its own process, as torch.multiprocessing.spawn does, so a
// program trains on several ranks without a launcher (examples/minimal_ddp --nprocs=2).
#ifndef DDP_LAUNCH_SPAWN_H_
#define DDP_LAUNCH_SPAWN_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace ddp {

struct SpawnOptions {
  // Where the store listens and rank 0's MASTER_ADDR. Loopback: the ranks all run on this host.
  std::string master_addr = "127.0.0.1";
  // When a rank fails, how long the others get after SIGTERM before SIGKILL.
  absl::Duration grace_period = absl::Seconds(5);
};

// In the program's own process (DDP_SPAWN_RANK unset): re-executes the current binary (/proc/self/exe)
// with the same arguments `nprocs` times, each child with ddprun's worker environment
// (launch/worker_env.h: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, the store's
// DDP_STORE_ADDR/DDP_STORE_PORT and job token) plus DDP_SPAWN_RANK; hosts the TCP store; relays the
// children's output with "[rank N] " prefixes; and returns when all have exited: OK when every child
// exited 0, else an error naming the first rank to fail, how it ended (exit code or signal) and its last
// lines; the other ranks are then stopped (SIGTERM, then SIGKILL after options.grace_period), as under
// ddprun, after the failed rank's exit notice ("exit code 137 (signal 9)") was written into the store,
// so the survivors' failure reports name it (Note [Failure reports] in comm/failure_reports.h). SIGINT
// and SIGTERM sent to the parent while the ranks run are forwarded to every rank (their own process
// groups do not get a terminal's Ctrl-C), and Spawn then returns kCancelled "Spawn: interrupted by
// signal N" once all have exited (SIGKILL after grace_period). kInternal errors when the store or a
// child cannot be started.
// In a child (DDP_SPAWN_RANK set), the same call runs fn(DDP_SPAWN_RANK) and exits the process: 0 when fn
// returns OK, else 1 after printing "spawned rank R: <status>" on stderr (an escaping exception counts as
// an error). So the code before the call runs in every process, and the code after it only in the
// parent. fn should join its group through InitProcessGroup(InitOptions{}) (comm/init.h).
// nprocs outside [1, kMaxProcPerNode] (launch/launcher.h, ddprun's bound) is kInvalidArgument, before
// anything starts. The children die with the thread that called Spawn, even when the parent is
// SIGKILLed (launch/worker_process.h), so a killed parent leaves no rank training on.
// REQUIRES: in a child, the same nprocs as the parent's call. Not thread-safe (forks, installs
// SIGINT/SIGTERM handlers and ignores SIGPIPE for its duration; one Spawn at a time per process).
absl::Status Spawn(const std::function<absl::Status(int rank)>& fn, int nprocs, const SpawnOptions& options = {});

}  // namespace ddp

#endif  // DDP_LAUNCH_SPAWN_H_
