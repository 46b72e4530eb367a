// torchrun's --virtual_local_rank: every worker is told LOCAL_RANK=0 and sees only its own GPU, as device
// 0 (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES on ROCm), so a script that calls
// torch.cuda.set_device(LOCAL_RANK) or our programs' LOCAL_RANK device choice use the right one.
// Semantics read from torch 2.15 (LocalElasticAgent._set_local_rank_env): worker `local_rank` gets entry
// `local_rank` of the launcher's CUDA_VISIBLE_DEVICES list (HIP_VISIBLE_DEVICES when that is set), else
// the device number `local_rank` itself.
#ifndef DDP_LAUNCH_VIRTUAL_LOCAL_RANK_H_
#define DDP_LAUNCH_VIRTUAL_LOCAL_RANK_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "store/launch_env.h"

namespace ddp {

// Checks, before anything starts, that each of `nproc_per_node` workers has a device in the launcher's
// visible-device list (`launcher_env`); kInvalidArgument naming the variable and its value otherwise
// (torchrun raises the same error when it starts the workers).
absl::Status CheckVirtualLocalRank(int nproc_per_node, const EnvLookup& launcher_env);

// Sets LOCAL_RANK=0 and the visible device of worker `local_rank` in `worker_env`.
// REQUIRES: CheckVirtualLocalRank(n, launcher_env) is OK for some n > local_rank.
void ApplyVirtualLocalRank(int local_rank, const EnvLookup& launcher_env,
                           std::map<std::string, std::string>* worker_env);

}  // namespace ddp

#endif  // DDP_LAUNCH_VIRTUAL_LOCAL_RANK_H_
